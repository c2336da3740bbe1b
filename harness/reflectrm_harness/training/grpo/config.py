"""The GRPO job's settings: one YAML file (grpo_default.yaml holds the paper's values)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import yaml

from reflectrm_harness.training.overrides import make_settings

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
    # Leave out items until a length rule scores 50% on those trained on (batches.length_balanced)
    balance_length: bool = False
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


def load_settings(
    path: Path | None = None, overrides: dict[str, Any] | None = None
) -> GRPOSettings:
    """Settings from a YAML file (default: the paper's), then explicit overrides. A path that
    is not a file but names a bundled settings file (``small`` for grpo_small.yaml, ``default``
    for the paper's) is that file, so one command runs on a checkout and in the training image."""
    path = path or DEFAULT_CONFIG
    if not path.is_file() and path.parent == Path():
        bundled = DEFAULT_CONFIG.with_name(f"grpo_{path.name}.yaml")
        path = bundled if bundled.is_file() else path
    raw = yaml.safe_load(path.read_text()) or {}
    return make_settings(GRPOSettings, {**raw, **(overrides or {})}, str(path))
