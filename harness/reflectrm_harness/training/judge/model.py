"""How the judge recipe's steps compute: the base model they start from (SmolLM2-135M-Instruct),
the model the steps after ``sft`` read (the run's adapter merged onto the base as the service
merges it, ``checkpoints.artifact.merge_adapter``, loaded in float32 for inference), the precision
and threads of their passes and the CPU they record, their saves (whole or not at all, so that a
stopped step resumes from its last one; an added layer stored sparse, as
``checkpoints.artifact.unpack_sparse`` reads it) and the one logistic fit of every probe and
readout."""

from __future__ import annotations

import logging
import os
import platform
from pathlib import Path
from typing import Any

from reflectrm.checkpoints.artifact import merge_adapter
from reflectrm.checkpoints.base import prepare_smollm2
from reflectrm.hardware import cpu_has_bf16_matmul

log = logging.getLogger(__name__)

# Where a run of ``sft`` writes its adapter, inside the run's folder.
ADAPTER_DIR = "adapter"


def base_model_dir(cache_dir: Path | None = None) -> Path:
    """The embedded base model (SmolLM2-135M-Instruct), prepared once: what training starts from."""
    return prepare_smollm2(cache_dir, say=lambda m: log.info("%s", m))


def cpu_name(cpuinfo: Path = Path("/proc/cpuinfo")) -> str:
    """The CPU's model name, as a run's summary records it."""
    try:
        for line in cpuinfo.read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


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


def pack_sparse(weights: dict[str, Any]) -> dict[str, Any]:
    """Matrices mostly zero stored as their non-zero entries: ``K.indices`` (rows of (row,
    column)), ``K.values`` and ``K.shape`` for a weight ``K``; the others as they are. An added
    verdict layer's attention is a few rows and columns of zeros-filled matrices."""
    import torch

    out: dict[str, Any] = {}
    for key, value in weights.items():
        nonzero = value.nonzero()
        if value.dim() == 2 and len(nonzero) * 3 < value.numel():
            out[f"{key}.indices"] = nonzero.contiguous()
            out[f"{key}.values"] = value[nonzero[:, 0], nonzero[:, 1]].contiguous()
            out[f"{key}.shape"] = torch.tensor(list(value.shape), dtype=torch.int64)
        else:
            out[key] = value.contiguous()
    return out


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


def fit_logistic(
    x: Any,
    y: Any,
    penalty: float,
    *,
    weights: Any = None,
    offset: Any = None,
    bias: bool = False,
    max_iter: int = 500,
    tolerance_grad: float = 1e-9,
) -> tuple[Any, float]:
    """L2-penalised logistic regression, LBFGS from zero in float64: a label above 0 is the
    positive class; the loss is the sum of ``weights`` (default 1/n each: the mean) times each
    item's log-loss, plus ``penalty`` |w|^2 (a ``bias`` is fitted unpenalised), ``offset`` added
    to every score. Returns the weights (numpy, float64) and the bias (0.0 without one)."""
    import torch

    xs = torch.as_tensor(x, dtype=torch.float64)
    ys = (torch.as_tensor(y, dtype=torch.float64) > 0).double()
    n = len(ys)
    ws = torch.full((n,), 1 / n, dtype=torch.float64) if weights is None else weights
    ws = torch.as_tensor(ws, dtype=torch.float64)
    off = torch.zeros(n, dtype=torch.float64) if offset is None else offset
    off = torch.as_tensor(off, dtype=torch.float64)
    w = torch.zeros(xs.shape[1], dtype=torch.float64, requires_grad=True)
    b = torch.zeros(1, dtype=torch.float64, requires_grad=bias)
    opt = torch.optim.LBFGS(
        [w, b] if bias else [w],
        max_iter=max_iter,
        tolerance_grad=tolerance_grad,
        line_search_fn="strong_wolfe",
    )

    def closure() -> Any:
        opt.zero_grad()
        z = xs @ w + b + off
        losses = torch.nn.functional.binary_cross_entropy_with_logits(z, ys, reduction="none")
        loss = (ws * losses).sum() + penalty * (w @ w)
        loss.backward()
        return loss

    opt.step(closure)
    return w.detach().numpy(), float(b.detach())
