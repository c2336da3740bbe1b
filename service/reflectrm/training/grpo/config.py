"""The GRPO job's settings: one YAML file (grpo_default.yaml holds the paper's values)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import yaml

DEFAULT_CONFIG = Path(__file__).with_name("grpo_default.yaml")


@dataclass(frozen=True)
class GRPOSettings:
    model: str = "default"
    output_dir: str = "checkpoints/reflectrm-grpo"
    template_version: str = "v1"
    epochs: float = 3.0
    prompts_per_batch: int = 64
    group_size: int = 8
    micro_batch: int = 8
    learning_rate: float = 1e-6
    max_completion_length: int = 1024
    max_prompt_tokens: int | None = None
    temperature: float = 1.0
    kl_beta: float = 0.001
    format_reward_weight: float = 0.0
    max_steps: int | None = None
    seed: int = 0
    lora: bool = False
    lora_r: int = 16
    lora_alpha: int = 32
    lora_dropout: float = 0.05
    use_vllm: Literal["auto", "true", "false"] | bool = "auto"
    vllm_gpu_memory_utilization: float = 0.3
    dtype: str = "auto"
    gradient_checkpointing: bool = False
    logging_steps: int = 1
    report_to: str = "none"
    save_steps: int | None = None

    def completions_per_step(self) -> int:
        return self.prompts_per_batch * self.group_size

    def accumulation_steps(self, world_size: int = 1) -> int:
        """Micro-batches per optimizer step, so one step sees ``prompts_per_batch`` groups."""
        per_pass = self.micro_batch * world_size
        if self.completions_per_step() % per_pass:
            raise ValueError(
                f"prompts_per_batch x group_size = {self.completions_per_step()} completions per "
                f"step must be a multiple of micro_batch x processes = {per_pass}"
            )
        return self.completions_per_step() // per_pass

    def wants_vllm(self, gpu: bool) -> bool:
        if self.use_vllm in ("auto", None):
            return gpu
        return self.use_vllm in (True, "true")


_FIELDS = {f.name: f for f in dataclasses.fields(GRPOSettings)}


def load_settings(
    path: Path | None = None, overrides: dict[str, Any] | None = None
) -> GRPOSettings:
    """Settings from a YAML file (default: the paper's), then explicit overrides."""
    raw = yaml.safe_load((path or DEFAULT_CONFIG).read_text()) or {}
    unknown = set(raw) - set(_FIELDS)
    if unknown:
        raise ValueError(f"unknown settings in {path}: {', '.join(sorted(unknown))}")
    return GRPOSettings(**typed(GRPOSettings, {**raw, **(overrides or {})}))


def typed(cls: Any, values: dict[str, Any]) -> dict[str, Any]:
    """YAML reads ``1e-6`` (no dot) as a string; float fields take it as the number meant."""
    fields = {f.name: str(f.type) for f in dataclasses.fields(cls)}
    return {
        k: float(v) if v is not None and fields.get(k, "").startswith("float") else v
        for k, v in values.items()
    }


def parse_overrides(pairs: list[str], cls: Any = GRPOSettings) -> dict[str, Any]:
    """``--set key=value`` strings for the settings dataclass ``cls`` (default: the GRPO job's).

    Each value is read as YAML, so numbers, booleans and null keep their types; an unknown key
    is an error naming the known ones.
    """
    known = sorted(f.name for f in dataclasses.fields(cls))
    out: dict[str, Any] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep:
            raise ValueError(f"--set expects key=value, got {pair!r}")
        key = key.strip()
        if key not in known:
            raise ValueError(f"unknown setting {key!r}; known: {', '.join(known)}")
        out[key] = yaml.safe_load(value)
    return out
