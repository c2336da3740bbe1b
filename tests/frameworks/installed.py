"""Where scripts/frameworks.sh put the trainers' pinned packages (requirements/frameworks.txt)
and the NeMo Gym side environment (requirements/nemo-gym-servers.txt): the same digest of both
files and the Python version, under the cache. Missing, a test that needs them is
``unavailable`` (a skip on a developer's machine, a failure in CI)."""

from __future__ import annotations

import base64
import csv
import hashlib
import os
import sys
from pathlib import Path

from tests.conftest import require

ROOT = Path(__file__).resolve().parents[2]
FETCH = "scripts/frameworks.sh .venv/bin/python (make setup runs it)"


def folder() -> Path:
    digest = hashlib.sha256()
    for name in ("frameworks.txt", "nemo-gym-servers.txt"):
        digest.update((ROOT / "requirements" / name).read_bytes())
    digest.update((sys.version.split()[0] + "\n").encode())
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "reflectrm" / "frameworks" / digest.hexdigest()[:16]


def site() -> Path:
    """The folder the pinned OpenRLHF, verl and NeMo Gym packages are installed in, required."""
    path = folder()
    require((path / ".complete").exists(), f"the trainers' pinned packages are absent: {FETCH}")
    return path / "site"


def gym_python() -> Path:
    """The Python of the side environment that runs NeMo Gym's genrm servers, required."""
    return site().parent / "gym-venv" / "bin" / "python"


def source(relative: str) -> Path:
    """A file of an installed package, checked against its wheel's RECORD (the file is the
    package's as published: pip verified the wheel's hash, RECORD each file's)."""
    base = site()
    path = base / relative
    for record in base.glob("*.dist-info/RECORD"):
        with record.open() as f:
            for name, digest, _ in csv.reader(f):
                if name == relative and digest:
                    algorithm, _, expected = digest.partition("=")
                    actual = hashlib.new(algorithm, path.read_bytes()).digest()
                    got = base64.urlsafe_b64encode(actual).rstrip(b"=").decode()
                    assert got == expected, f"{relative} differs from its wheel's RECORD"
                    return path
    raise AssertionError(f"{relative} is in no installed wheel's RECORD under {base}")
