"""A test's prerequisites: the shared data beside the repository; absent, a skip on a developer's
machine and a failure in CI."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

SHARED_DATA = Path(__file__).resolve().parents[4] / "shared" / "data"


def in_ci() -> bool:
    """Running in CI (``CI`` set, as CI services set it: ``CI=true``)."""
    return os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")


def require(present: bool, reason: str) -> None:
    """Unless ``present``: a skip with ``reason``, or in CI a failure (a skip there would let a
    check pass that never ran)."""
    if present:
        return
    if in_ci():
        pytest.fail(f"{reason} (CI is set: a missing prerequisite fails, it does not skip)")
    pytest.skip(reason)


def require_shared_data(*parts: str) -> Path:
    """``../shared/data/<parts>`` beside the repository, required (see ``require``)."""
    path = SHARED_DATA.joinpath(*parts)
    require(path.exists(), f"the shared data is absent ({path})")
    return path
