"""The correctness set (reflectrm_harness.evaluation.data.CORRECTNESS): its shape, its balance,
and that length cannot tell its right answers from its wrong ones."""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

from reflectrm_harness.datasets import read_pairs
from reflectrm_harness.evaluation.data import CORRECTNESS

SUBSETS = {"facts", "arithmetic", "units", "code", "common-sense"}
FIELDS = {"id", "source", "subset", "prompt", "chosen", "rejected"}


def _rows() -> list[dict[str, Any]]:
    with CORRECTNESS.open(encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def test_at_least_60_unique_complete_rows_that_read_as_pairs() -> None:
    rows = _rows()
    assert len(rows) >= 60
    assert len({r["id"] for r in rows}) == len(rows)
    assert len({r["prompt"] for r in rows}) == len(rows)
    for row in rows:
        assert set(row) == FIELDS, row["id"]
        assert row["source"] == "reflectrm-correctness"
        assert row["chosen"] != row["rejected"], row["id"]
    assert len(list(read_pairs(CORRECTNESS))) == len(rows)


def test_every_kind_of_question_is_there() -> None:
    counts = Counter(r["subset"] for r in _rows())
    assert set(counts) == SUBSETS
    assert min(counts.values()) >= 12, counts


def test_length_cannot_tell_right_from_wrong() -> None:
    rows = _rows()
    # Same sentence frame: at most two characters apart.
    assert all(abs(len(r["chosen"]) - len(r["rejected"])) <= 2 for r in rows)
    longer = sum(len(r["chosen"]) > len(r["rejected"]) for r in rows)
    shorter = sum(len(r["chosen"]) < len(r["rejected"]) for r in rows)
    assert longer == shorter  # a length rule of either direction scores 50% on unequal pairs
