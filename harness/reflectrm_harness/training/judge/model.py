"""How the judge recipe's steps compute: the model the steps after ``sft`` read (the run's
adapter merged onto the base as the service merges it, ``checkpoints.artifact.merge_adapter``,
loaded in float32 for inference), the precision and threads of their passes, and their saves
(whole or not at all, so that a stopped step resumes from its last one)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from reflectrm.checkpoints.artifact import merge_adapter
from reflectrm.hardware import cpu_has_bf16_matmul

# Where a run of ``sft`` writes its adapter, inside the run's folder.
ADAPTER_DIR = "adapter"


def resolve_precision(precision: str) -> str:
    """``auto``: bf16 autocast where the CPU has bf16 matrix units (AMX, AVX512-BF16), else f32."""
    if precision == "auto":
        return "bf16" if cpu_has_bf16_matmul() else "f32"
    if precision not in ("bf16", "f32"):
        raise ValueError(f"precision must be auto, bf16 or f32, not {precision!r}")
    return precision


def use_threads(threads: int) -> int:
    """torch's threads for this step: ``threads``, 0 for every core; how many."""
    import torch

    count = threads or os.cpu_count() or 1
    torch.set_num_threads(count)
    return count


def save_atomically(state: Any, path: Path) -> None:
    """``torch.save`` to ``path`` through a temporary file: a stop while writing keeps the
    previous file."""
    import torch

    tmp = path.with_suffix(".tmp")
    torch.save(state, tmp)
    os.replace(tmp, path)


def load_model(model_dir: Path) -> Any:
    """A checkpoint in float32, in inference mode."""
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    model.eval()
    return model


def merge_run(base_model: Path, run_dir: Path, out: Path) -> Path:
    """The run's adapter merged onto ``base_model`` into ``out`` (the served judge's merge)."""
    merge_adapter(base_model, run_dir / ADAPTER_DIR, out)
    return out
