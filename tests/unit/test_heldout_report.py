"""The held-out file and the length heuristic's paired comparison, against hand-computed values."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

from reflectrm.datasets import Pair, read_pairs
from reflectrm.judging.types import Message
from reflectrm.training.judge.heldout import compare_with_length, export_heldout, longer_is_chosen
from reflectrm.training.judge.split import SourcePairs, make_split


def _pair(i: str, chosen: str, rejected: str) -> Pair:
    return Pair(i, (Message("user", f"q {i}"),), chosen, rejected)


def test_the_length_heuristic_scores_a_pair_once() -> None:
    assert longer_is_chosen(_pair("a", "long answer", "short")) == 1.0
    assert longer_is_chosen(_pair("b", "short", "long answer")) == 0.0
    assert longer_is_chosen(_pair("c", "same", "size")) == 0.5


def _results(path: Path, rows: list[tuple[str, int, int | None]]) -> None:
    lines = [{"type": "run"}]
    for pair_id, chosen_position, winner in rows:
        lines.append(
            {
                "type": "result",
                "mode": "single",
                "pair_id": pair_id,
                "chosen_position": chosen_position,
                "winner": winner,
            }
        )
    path.write_text("".join(json.dumps(r) + "\n" for r in lines))


def test_the_judge_is_scored_per_pair_over_both_orders(tmp_path: Path) -> None:
    pairs = [
        _pair("a", "long answer", "short"),  # longer wins: 1
        _pair("b", "short", "long answer"),  # longer wins: 0
        _pair("c", "same", "size"),  # longer wins: 0.5
        _pair("d", "x", "yy"),  # judged in one order only: left out
    ]
    results = tmp_path / "results.jsonl"
    _results(
        results,
        [
            ("a", 1, 1), ("a", 2, 2),  # right in both orders: 1
            ("b", 1, 1), ("b", 2, 1),  # by position: 0.5
            ("c", 1, None), ("c", 2, 1),  # no verdict, then wrong: 0
            ("d", 1, 1),
        ],
    )  # fmt: skip
    result = compare_with_length(pairs, results, bootstrap=200)
    assert result["pairs"] == 3
    assert result["judge_accuracy"] == 50.0  # (1 + 0.5 + 0) / 3
    assert result["length_accuracy"] == 50.0  # (1 + 0 + 0.5) / 3
    assert result["difference"] == 0.0
    low, high = result["judge_ci"]
    assert 0.0 <= low <= 50.0 <= high <= 100.0


def test_the_held_out_file_names_each_pair_by_source(tmp_path: Path) -> None:
    source = SourcePairs("x.jsonl.gz", tuple(_pair(f"p{i}", f"a{i}", f"b{i}") for i in range(8)))
    split = make_split([source], 0.25, seed=0)
    out = tmp_path / "heldout.jsonl.gz"
    assert export_heldout(split, [source], out) == 2
    with gzip.open(out, "rt") as f:
        rows = [json.loads(line) for line in f]
    assert [r["id"] for r in rows] == [f"x/{e['id']}" for e in split["pairs"]]
    assert {r["subset"] for r in rows} == {"x"}
    assert [p.chosen for p in read_pairs(out)] == [
        next(p.chosen for p in source.pairs if p.id == e["id"]) for e in split["pairs"]
    ]


def test_subsets_come_from_the_evaluation_records(tmp_path: Path) -> None:
    pairs = [_pair("a", "long answer", "short"), _pair("b", "short", "long answer")]
    results = tmp_path / "results.jsonl"
    rows = [
        {"type": "result", "mode": "single", "pair_id": p, "chosen_position": c, "winner": w,
         "meta": {"subset": s}}
        for p, c, w, s in (("a", 1, 1, "hh"), ("a", 2, 2, "hh"), ("b", 1, 2, "pl"), ("b", 2, 2, "pl"))
    ]  # fmt: skip
    results.write_text("".join(json.dumps(r) + "\n" for r in rows))
    result = compare_with_length(pairs, results, bootstrap=50)
    by = result["per_subset"]
    assert set(by) == {"hh", "pl"}
    assert by["hh"]["judge_accuracy"] == 100.0  # right in both orders
    assert by["pl"]["judge_accuracy"] == 50.0  # by position
    assert by["hh"]["length_accuracy"] == 100.0
    assert by["pl"]["length_accuracy"] == 0.0
