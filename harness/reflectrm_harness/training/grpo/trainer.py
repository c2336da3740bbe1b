"""What the GRPO job and the supervised warm-up share: loading the base model, LoRA, the
per-step metrics file, and a run that ends in an exported checkpoint with its manifest.

torch, transformers, trl and peft are imported inside the functions that need them, so the
module (and the CLI) imports without the training extra.
"""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path
from typing import Any

from reflectrm_harness.training.grpo.export import build_manifest, export_checkpoint

log = logging.getLogger(__name__)

CHECKPOINT_DIR = "checkpoint"
METRICS_FILE = "metrics.jsonl"


def has_gpu() -> bool:
    import torch

    return bool(torch.cuda.is_available())


def load_tokenizer(base: str) -> Any:
    """The base model's tokenizer; one without a pad token pads with its end-of-sequence token."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(base)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


def torch_dtype(name: str, gpu: bool) -> Any:
    """``auto`` is bfloat16 on a GPU and float32 on the CPU; other names are torch dtypes."""
    import torch

    if name == "auto":
        return torch.bfloat16 if gpu else torch.float32
    return getattr(torch, name)


def load_model(base: str, dtype: str, gpu: bool) -> Any:
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(base, dtype=torch_dtype(dtype, gpu))


def lora_config(enabled: bool, r: int, alpha: int, dropout: float = 0.0) -> Any:
    """Adapters on every linear layer, or None to train all weights."""
    if not enabled:
        return None
    from peft import LoraConfig

    return LoraConfig(
        r=r,
        lora_alpha=alpha,
        lora_dropout=dropout,
        target_modules="all-linear",
        task_type="CAUSAL_LM",
    )


def metrics_callback(path: Path) -> Any:
    """A trainer callback writing every logged step to a JSONL file, whatever ``report_to`` says."""
    from transformers import TrainerCallback

    class WriteMetrics(TrainerCallback):
        def on_log(self, args: Any, state: Any, control: Any, logs: Any = None, **_: Any) -> None:
            if logs:
                row = {"step": state.global_step, "time": round(time.time(), 1), **logs}
                with path.open("a") as f:
                    f.write(json.dumps(row) + "\n")
                log.info("step %d/%d %s", state.global_step, state.max_steps, _brief(logs))

    return WriteMetrics()


def _brief(logs: dict[str, Any]) -> str:
    keys = ("loss", "reward", "reward_std", "completions/mean_length", "kl", "step_time")
    return " ".join(f"{k}={logs[k]:.4g}" for k in keys if isinstance(logs.get(k), int | float))


def train_and_export(
    trainer: Any,
    tokenizer: Any,
    out: Path,
    *,
    model: str,
    base: str,
    template_version: str,
    data: dict[str, Any],
    config: dict[str, Any],
    gpu: bool,
) -> Path:
    """Run the trainer, then export ``<out>/checkpoint`` with a manifest naming the base model
    (``model`` as asked, ``base`` as loaded), the data, the settings and the run."""
    started = time.monotonic()
    result = trainer.train()
    manifest = build_manifest(
        base_path=base,
        template_version=template_version,
        base_model=model if model == base else f"{model} ({base})",
        data=data,
        config=config,
        training={
            "steps": trainer.state.global_step,
            "seconds": round(time.monotonic() - started, 1),
            "metrics": json.loads(json.dumps(result.metrics, default=str)),
            "device": "cuda" if gpu else "cpu",
        },
    )
    folder = export_checkpoint(trainer.model, tokenizer, out / CHECKPOINT_DIR, manifest)
    log.info("checkpoint exported to %s", folder)
    return folder
