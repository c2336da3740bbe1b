"""Checkpoint export: a Hugging Face-format folder plus the manifest the service checks at load.

``checkpoints.validate.validate_checkpoint`` reads ``reflectrm-manifest.json`` and refuses a
checkpoint whose ``template_version`` differs from the service's; this module writes that file.
"""

from __future__ import annotations

import datetime as dt
import json
import subprocess
from pathlib import Path
from typing import Any

from reflectrm.checkpoints.files import MANIFEST
from reflectrm.checkpoints.validate import validate_checkpoint

MANIFEST_FORMAT = 1


def git_revision(cwd: Path | None = None) -> str | None:
    """The code's commit, with "-dirty" when the tree has uncommitted changes; None outside git."""
    where = cwd or Path(__file__).resolve().parent
    try:
        rev = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=where, capture_output=True, text=True, check=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=where,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None
    return f"{rev}-dirty" if dirty else rev


def build_manifest(
    *,
    template_version: str,
    base_model: str,
    data: dict[str, Any],
    config: dict[str, Any],
    training: dict[str, Any] | None = None,
    evaluation: dict[str, Any] | None = None,
    base_path: str | None = None,
) -> dict[str, Any]:
    """The manifest; a base that is itself an exported checkpoint (e.g. the warm-up) has its
    manifest kept under ``base_manifest``, so the whole lineage stays readable."""
    return {
        "format": MANIFEST_FORMAT,
        "template_version": template_version,
        "base_model": base_model,
        "base_manifest": _manifest_of(base_path),
        "data": data,
        "config": config,
        "training": training or {},
        "evaluation": evaluation or {},
        "git_revision": git_revision(),
        "created": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
    }


def _manifest_of(base_path: str | None) -> dict[str, Any] | None:
    if base_path is None or not (Path(base_path) / MANIFEST).is_file():
        return None
    return read_manifest(Path(base_path))


def write_manifest(folder: Path, manifest: dict[str, Any]) -> Path:
    path = folder / MANIFEST
    path.write_text(json.dumps(manifest, indent=2, ensure_ascii=False) + "\n")
    return path


def read_manifest(folder: Path) -> dict[str, Any]:
    return dict(json.loads((folder / MANIFEST).read_text()))


def add_evaluation(folder: Path, name: str, results: dict[str, Any]) -> None:
    """Record evaluation results in an exported checkpoint's manifest (keyed by what was run)."""
    manifest = read_manifest(folder)
    manifest.setdefault("evaluation", {})[name] = results
    write_manifest(folder, manifest)


def export_checkpoint(model: Any, tokenizer: Any, folder: Path, manifest: dict[str, Any]) -> Path:
    """Save merged weights (LoRA adapters folded in), the tokenizer and the manifest, then run the
    service's own load-time check on the result."""
    if hasattr(model, "merge_and_unload"):
        model = model.merge_and_unload()
    folder.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(folder, safe_serialization=True)
    tokenizer.save_pretrained(folder)
    write_manifest(folder, manifest)
    validate_checkpoint(folder, manifest["template_version"])
    return folder
