"""The dtype a checkpoint the set-up builds is written in: the one the engine serves it in.

vLLM casts each weight to the served dtype as it loads it, and logs one warning per weight when
the cast narrows (a float32 checkpoint served in bfloat16: 126 lines on every start of the
default judge). Written in the served dtype, the checkpoint loads as stored; its weights are the
very values the load-time cast gave (the same round-to-nearest-even cast, done once at build).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from reflectrm.checkpoints.validate import CheckpointError

# The folder-name suffix of each dtype a checkpoint is built in.
SHORT = {"float32": "f32", "bfloat16": "bf16", "float16": "f16"}
# Other names vLLM and torch accept for them.
ALIASES = {"float": "float32", "half": "float16", "bf16": "bfloat16", "f32": "float32"}


def canonical(dtype: str) -> str:
    """``dtype`` as the name a config.json records (``float32``, ``bfloat16``, ``float16``)."""
    name = ALIASES.get(dtype.lower(), dtype.lower())
    if name not in SHORT:
        raise CheckpointError(
            f"the default checkpoints are built in float32, bfloat16 or float16, not {dtype!r}: "
            "set REFLECTRM_DTYPE to one of them (or auto)"
        )
    return name


def cast_weights(weights: dict[str, Any], dtype: str) -> dict[str, Any]:
    """Every floating-point tensor of ``weights`` in ``dtype``; others (indices) as they are."""
    import torch

    target = getattr(torch, canonical(dtype))
    return {
        k: v.to(target).contiguous() if v.is_floating_point() else v for k, v in weights.items()
    }


def record_dtype(config_path: Path, dtype: str) -> None:
    """Name ``dtype`` in a checkpoint's config.json as the dtype its weights are stored in."""
    config = json.loads(config_path.read_text())
    config["dtype"] = canonical(dtype)
    if "torch_dtype" in config:  # the name older transformers releases write
        config["torch_dtype"] = canonical(dtype)
    config_path.write_text(json.dumps(config, indent=2) + "\n")


def copy_in(source: Path, out: Path, dtype: str, skip: tuple[str, ...] = ()) -> None:
    """A copy of the checkpoint ``source`` in ``out`` with its weights in ``dtype`` (the files
    named in ``skip`` left out)."""
    import shutil

    from safetensors.torch import load_file, save_file

    out.mkdir(parents=True, exist_ok=True)
    for item in sorted(source.iterdir()):
        if not item.is_file() or item.name in skip:
            continue
        if item.suffix == ".safetensors":
            weights = cast_weights(load_file(str(item)), dtype)
            save_file(weights, str(out / item.name), metadata={"format": "pt"})
        else:
            shutil.copy2(item, out / item.name)
    record_dtype(out / "config.json", dtype)
