"""The files of a served checkpoint and of a judge artifact: each name declared once, the hash
every manifest records, and how a checkpoint folder is written (whole or not at all). Which
judges the package ships, and their folders: checkpoints/judges.py."""

from __future__ import annotations

import contextlib
import hashlib
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

# --- in an artifact folder -------------------------------------------------------------------
# The sha256 of every file below, of the base model and of the data; the run's command, figures.
ARTIFACT_MANIFEST = "manifest.json"
ADAPTER_WEIGHTS = "adapter_model.safetensors"
ADAPTER_CONFIG = "adapter_config.json"
# Optional: an added decoder layer (``reflectrm train verdict``): its attention's and norms'
# weights (its MLP is zero); the file's metadata names its index, the base's layer count.
VERDICT_WEIGHTS = "verdict-layer.safetensors"

# --- in a served checkpoint folder -----------------------------------------------------------
# The template the checkpoint was trained for and where it came from (validate reads it).
MANIFEST = "reflectrm-manifest.json"
# The base model's conversion record (its source's size, its weights' hashes).
PREPARED_MARKER = "reflectrm-prepared.json"
# The built judge's record: the artifact files and base it was built from.
BUILT_MARKER = "reflectrm-judge-built.json"


@contextlib.contextmanager
def building(target: Path) -> Iterator[Path]:
    """A folder to build a checkpoint in, beside ``target``, moved to ``target`` (replacing what
    is there) when the block ends without an error: a stopped build leaves no half folder."""
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent) as tmp:
        work = Path(tmp) / "model"
        yield work
        if target.exists():
            shutil.rmtree(target)
        work.rename(target)


def file_sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()
