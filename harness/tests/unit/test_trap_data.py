"""The non-answer trap (reflectrm_harness.evaluation.data.TRAP): its shape, its balance, and that none of
its prompts is taken from the shared benchmarks."""

from __future__ import annotations

import gzip
import json
from collections import Counter
from typing import Any

import pytest

from reflectrm_harness.datasets import read_pairs
from reflectrm_harness.evaluation.data import TRAP
from support.prerequisites import SHARED_DATA  # ../shared/data beside the repo

SUBSETS = {"refusal", "dont_know", "evasion", "one_word", "off_topic"}
FIELDS = ("id", "source", "subset", "prompt", "chosen", "rejected")


def _rows() -> list[dict[str, Any]]:
    with TRAP.open(encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def _normal(text: str) -> str:
    return " ".join(text.split()).casefold()


def _benchmark_prompt(row: dict[str, Any]) -> str | None:
    if isinstance(row.get("prompt"), str):
        return row["prompt"]
    users = [m for m in row.get("messages") or () if m.get("role") == "user"]
    return users[-1].get("content") if users else None


def test_rows_are_many_unique_and_complete() -> None:
    rows = _rows()
    assert len(rows) >= 60
    ids = [row["id"] for row in rows]
    assert len(set(ids)) == len(ids)
    for row in rows:
        assert set(row) == set(FIELDS), row["id"]
        assert row["source"] == "reflectrm-trap"
        assert row["id"].startswith("trap/")
        for key in FIELDS:
            assert isinstance(row[key], str), (row["id"], key)
            assert row[key].strip(), (row["id"], key)
        assert row["chosen"].strip() != row["rejected"].strip(), row["id"]


def test_subsets_are_balanced() -> None:
    counts = Counter(row["subset"] for row in _rows())
    assert set(counts) == SUBSETS
    assert all(n >= 10 for n in counts.values()), counts


def test_length_alone_cannot_solve_it() -> None:
    rows = _rows()
    assert sum(len(row["rejected"]) > len(row["chosen"]) for row in rows) >= 8
    assert any("boil an egg" in row["prompt"] for row in rows)


def test_loads_through_the_shared_schema() -> None:
    pairs = list(read_pairs(TRAP))
    assert len(pairs) == len(_rows())
    assert {pair.benchmark for pair in pairs} == {"reflectrm-trap"}


def test_no_prompt_is_taken_from_a_benchmark() -> None:
    folder = SHARED_DATA / "benchmarks"
    files = sorted(folder.glob("*.jsonl.gz")) if folder.is_dir() else []
    if not files:
        pytest.skip(f"no shared benchmarks at {folder}")
    trap = {_normal(row["prompt"]): row["id"] for row in _rows()}
    found = []
    for path in files:
        with gzip.open(path, "rt", encoding="utf-8") as f:
            for line in f:
                prompt = _benchmark_prompt(json.loads(line)) if line.strip() else None
                if isinstance(prompt, str) and _normal(prompt) in trap:
                    found.append((trap[_normal(prompt)], path.name))
    assert not found
