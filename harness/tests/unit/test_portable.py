"""Paths in written artifacts relative to the repository, not the machine's
(reflectrm_harness/portable.py)."""

from __future__ import annotations

import re
import tempfile
from pathlib import Path

import pytest

from reflectrm_harness.portable import portable, portable_text

REPO = Path("/srv/checkouts/reflectrm")
HOME = str(Path.home())
TMP = tempfile.gettempdir()


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("/srv/checkouts/reflectrm/.venv/bin/python", ".venv/bin/python"),
        ("/srv/checkouts/reflectrm", "."),
        (
            "/srv/checkouts/shared/data/benchmarks/rmb.jsonl.gz",
            "../shared/data/benchmarks/rmb.jsonl.gz",
        ),
        ("/srv/checkouts/runs/bench-v2", "../runs/bench-v2"),
        (f"{HOME}/.cache/reflectrm/models/m-f32", "~/.cache/reflectrm/models/m-f32"),
        (f"{TMP}/run-1/out", "<tmp>/run-1/out"),
        # Inside a longer text: a log line, a command line.
        (
            f"config: model='{HOME}/.cache/m', tokenizer='{HOME}/.cache/m'",
            "config: model='~/.cache/m', tokenizer='~/.cache/m'",
        ),
        (
            "python /srv/checkouts/reflectrm/service/reflectrm/engines/reaper.py 7403",
            "python service/reflectrm/engines/reaper.py 7403",
        ),
        # Not those folders: a longer name, a URL's path, a relative path.
        ("/srv/checkouts/reflectrm-old/x", "../reflectrm-old/x"),
        ("/srv/checkoutsx/y", "/srv/checkoutsx/y"),
        ("http://host/srv/checkouts/reflectrm/x", "http://host/srv/checkouts/reflectrm/x"),
        ("/v1/judge", "/v1/judge"),
        ("runs/a/srv/checkouts/reflectrm", "runs/a/srv/checkouts/reflectrm"),
    ],
)
def test_paths_are_written_relative_to_the_repository(text: str, expected: str):
    assert portable_text(text, REPO) == expected


def test_every_string_of_a_json_value_keys_included():
    value = {
        "argv": ["--out-dir", f"{TMP}/x"],
        f"{HOME}/k": [1, None, 2.5, True, ("/srv/checkouts/reflectrm/a",)],
    }
    assert portable(value, REPO) == {
        "argv": ["--out-dir", "<tmp>/x"],
        "~/k": [1, None, 2.5, True, ["a"]],
    }


DOCS = Path(__file__).resolve().parents[3] / "docs"
# Absolute paths of a machine: home directories, temporary folders, the work folder.
MACHINE_PATH = re.compile(r"(?<![\w.~/-])/(?:root|home|Users|tmp|var/folders|work)/[\w.-]")


def test_no_artifact_under_docs_holds_a_path_of_the_machine_it_ran_on():
    found = [
        f"{path.relative_to(DOCS)}: {match.group(0)}..."
        for path in sorted(DOCS.rglob("*.json*"))
        for match in MACHINE_PATH.finditer(path.read_text())
    ]
    assert not found, found[:10]
