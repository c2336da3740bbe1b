"""What a folder must hold to be served: a Hugging Face-format checkpoint (config, weights,
tokenizer) whose manifest, if any, names the prompt template the service uses."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from reflectrm.checkpoints.files import MANIFEST


class CheckpointError(ValueError):
    """A checkpoint folder cannot be served; the message says what to fix."""


class NotPreparedError(CheckpointError):
    """What a model setting names has not been built into the cache (``reflectrm prepare-model``
    builds it); the message says what is missing."""


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
