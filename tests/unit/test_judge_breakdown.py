"""The per-group accuracy and split counts of studies/judge_breakdown, hand-computed."""

from __future__ import annotations

from studies.judge_breakdown import accuracy_by_group, group_of, split_overlap


def test_a_group_is_the_source_else_the_subset_prefix() -> None:
    assert group_of({"source": "hh"}, "x/y") == "hh"
    assert group_of({}, "chat/alpacaeval-easy") == "chat"
    assert group_of(None, None) == "(none)"


def test_accuracy_by_group_counts_verdicts() -> None:
    got = accuracy_by_group([("a", True), ("a", False), ("a", True), ("b", False)])
    assert got == {"a": {"verdicts": 3, "accuracy": 66.7}, "b": {"verdicts": 1, "accuracy": 0.0}}


def test_split_overlap_counts_held_out_and_pool_pairs_of_covered_sources() -> None:
    split = {
        "sources": {"hh.jsonl.gz": {}},
        "pairs": [{"source": "hh.jsonl.gz", "id": "h1"}],
    }
    pairs = {"h1": {"source": "hh"}, "h2": {"source": "hh"}, "a1": {"source": "alpaca"}}
    assert split_overlap(pairs, split) == {"hh": {"held_out": 1, "in_pool": 1}}
