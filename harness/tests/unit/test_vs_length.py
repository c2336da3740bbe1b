"""``reflectrm eval vs-length``: the judge against "longer wins" and against the per-source
length rule, paired over pairs, against hand-computed values."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from reflectrm_harness.evaluation import cli
from reflectrm_harness.evaluation.vs_length import (
    LONGER,
    SHORTER,
    compare_with_length,
    fit_rule,
    longer_is_chosen,
    rule_score,
    source_label,
)


def test_the_length_heuristic_scores_a_pair_once() -> None:
    assert longer_is_chosen("long answer", "short") == 1.0
    assert longer_is_chosen("short", "long answer") == 0.0
    assert longer_is_chosen("same", "size") == 0.5
    assert rule_score(SHORTER, (3, 9)) == 1.0
    assert rule_score(SHORTER, (9, 3)) == 0.0
    assert rule_score(LONGER, (4, 4)) == 0.5
    assert source_label("dir/hh_rlhf.jsonl.gz") == "hh_rlhf"


def _write_pairs(path: Path, rows: list[dict]) -> None:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "wt", encoding="utf-8") as f:
        for row in rows:
            f.write(json.dumps({"prompt": f"q {row['id']}", **row}) + "\n")


def _pairs(path: Path, specs: list[tuple[str, str, str]], **extra: str) -> Path:
    _write_pairs(path, [{"id": i, "chosen": c, "rejected": r, **extra} for i, c, r in specs])
    return path


def _results(path: Path, rows: list[tuple[str, int, int | None]], subset: str = "") -> Path:
    lines: list[dict] = [{"type": "run"}]
    for pair_id, chosen_position, winner in rows:
        lines.append(
            {
                "type": "result",
                "benchmark": "heldout",
                "mode": "single",
                "pair_id": pair_id,
                "chosen_position": chosen_position,
                "primary": chosen_position == 1,
                "seed": 0,
                "status": "verdict" if winner else "no_verdict",
                "winner": winner,
                "meta": {"subset": subset} if subset else {},
            }
        )
    path.write_text("".join(json.dumps(r) + "\n" for r in lines))
    return path


def test_the_judge_is_scored_per_pair_over_both_orders(tmp_path: Path) -> None:
    pairs = _pairs(
        tmp_path / "pairs.jsonl",
        [
            ("a", "long answer", "short"),  # longer wins: 1
            ("b", "short", "long answer"),  # longer wins: 0
            ("c", "same", "size"),  # longer wins: 0.5
            ("d", "x", "yy"),  # judged in one order only: left out
        ],
    )
    results = _results(
        tmp_path / "results.jsonl",
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
    # Length-balanced: a (longer) 1, b (shorter) 0.5; c of equal length in neither.
    lba = result["judge_length_balanced"]
    assert lba["value"] == 75.0
    assert lba["equal_length"] == 1
    assert "rule" not in result


def test_subsets_come_from_the_evaluation_records(tmp_path: Path) -> None:
    pairs = tmp_path / "p.jsonl"
    _write_pairs(
        pairs,
        [
            {"id": "a", "chosen": "long answer", "rejected": "short", "subset": "row"},
            {"id": "b", "chosen": "short", "rejected": "long answer"},
        ],
    )
    lines = [
        {"type": "result", "mode": "single", "pair_id": p, "chosen_position": c, "winner": w,
         "benchmark": "x", "primary": c == 1, "seed": 0, "status": "verdict",
         "meta": {"subset": s}}
        for p, c, w, s in (("a", 1, 1, "hh"), ("a", 2, 2, "hh"), ("b", 1, 2, "pl"), ("b", 2, 2, "pl"))
    ]  # fmt: skip
    results = tmp_path / "results.jsonl"
    results.write_text("".join(json.dumps(r) + "\n" for r in lines))
    by = compare_with_length(pairs, results, bootstrap=50)["per_subset"]
    assert set(by) == {"hh", "pl"}
    assert by["hh"]["judge_accuracy"] == 100.0  # right in both orders
    assert by["pl"]["judge_accuracy"] == 50.0  # by position
    assert by["hh"]["length_accuracy"] == 100.0
    assert by["pl"]["length_accuracy"] == 0.0


def _train(tmp_path: Path) -> list[Path]:
    """Source "up": the better response longer in 2 of 3 pairs; "down": shorter in 2 of 2; the
    file without a source field is its own source (its label), where shorter wins 1 to 0."""
    a = tmp_path / "first.jsonl.gz"
    _write_pairs(
        a,
        [
            {"id": "1", "source": "up", "chosen": "aaaa", "rejected": "b"},
            {"id": "2", "source": "up", "chosen": "aaaa", "rejected": "bb"},
            {"id": "3", "source": "up", "chosen": "a", "rejected": "bbbb"},
            {"id": "4", "source": "down", "chosen": "a", "rejected": "bbbb"},
            {"id": "5", "source": "down", "chosen": "aa", "rejected": "bbbb"},
            {"id": "6", "source": "down", "chosen": "aa", "rejected": "bb"},  # equal
        ],
    )
    b = _pairs(tmp_path / "second.jsonl", [("7", "a", "bbbb")])
    return [a, b]


def test_the_rule_is_fitted_per_source(tmp_path: Path) -> None:
    rule = fit_rule(_train(tmp_path))
    assert set(rule.by_source) == {"up", "down", "first", "second"}
    assert rule.by_source["up"]["direction"] == LONGER
    assert rule.by_source["up"]["train_accuracy"] == pytest.approx(66.7)
    assert rule.by_source["down"]["direction"] == SHORTER
    assert rule.by_source["down"]["equal_length"] == 1
    assert rule.by_source["first"]["direction"] == SHORTER  # 2 longer, 3 shorter
    assert rule.by_source["second"]["direction"] == SHORTER
    assert rule.overall["direction"] == SHORTER  # 2 longer, 4 shorter
    assert rule.direction(["nowhere", "up"]) == (LONGER, "up")
    assert rule.direction([None, "nowhere"]) == (SHORTER, None)


def test_the_judge_against_the_per_source_rule(tmp_path: Path) -> None:
    rule = fit_rule(_train(tmp_path))
    # Evaluated pairs: u1, u2 of source "up" (rule: longer), d1, d2 of "down" (rule: shorter),
    # x/1 named by its file label through its id ("second": shorter).
    _write_pairs(
        tmp_path / "eval.jsonl",
        [
            {"id": "u1", "source": "up", "chosen": "long one", "rejected": "s"},  # rule right
            {"id": "u2", "source": "up", "chosen": "s", "rejected": "long one"},  # rule wrong
            {"id": "d1", "source": "down", "chosen": "s", "rejected": "long one"},  # rule right
            {"id": "d2", "source": "down", "chosen": "long one", "rejected": "s"},  # rule wrong
            {"id": "second/1", "chosen": "s", "rejected": "long one"},  # rule right
        ],
    )
    results = _results(
        tmp_path / "results.jsonl",
        [
            ("u1", 1, 1), ("u1", 2, 2),  # right twice: 1; rule right: agree
            ("u2", 1, 1), ("u2", 2, 2),  # right twice: 1; rule wrong: disagree, judge right
            ("d1", 1, 2), ("d1", 2, 1),  # wrong twice: 0; rule right: disagree, judge wrong
            ("d2", 1, 1), ("d2", 2, 1),  # by position: 0.5 (no one response named)
            ("second/1", 1, 1), ("second/1", 2, 2),  # right twice: 1; rule right
        ],
    )  # fmt: skip
    result = compare_with_length(tmp_path / "eval.jsonl", results, bootstrap=300, rule=rule)
    r = result["rule"]
    assert result["judge_accuracy"] == 70.0  # (1 + 1 + 0 + 0.5 + 1) / 5
    assert r["accuracy"] == 60.0  # (1 + 0 + 1 + 0 + 1) / 5
    assert r["difference"] == 10.0
    low, high = r["difference_ci"]
    assert -100.0 <= low <= 10.0 <= high <= 100.0
    assert r["applied"] == {"down": 2, "second": 1, "up": 2}
    assert r["disagree_pairs"] == 2
    assert r["judge_right_where_disagree"] == 50.0
    # "longer wins" on the same pairs: u1 and d2 right.
    assert result["length_accuracy"] == 40.0


def test_the_command_writes_json_and_markdown(tmp_path: Path, capsys) -> None:
    pairs = _pairs(tmp_path / "p.jsonl", [("a", "long answer", "short"), ("b", "s", "longer")])
    results = _results(
        tmp_path / "results.jsonl", [("a", 1, 1), ("a", 2, 2), ("b", 1, 1), ("b", 2, 1)]
    )
    train = _train(tmp_path)
    out = tmp_path / "out" / "vs-length"
    argv = ["vs-length", "--pairs", str(pairs), "--results", str(results), "--bootstrap", "100"]
    argv += ["--out", str(out), "--rule-from", *map(str, train)]
    assert cli.main(argv) == 0
    text = capsys.readouterr().out
    assert "| per-source length rule |" in text
    saved = json.loads(out.with_suffix(".json").read_text())
    assert saved["pairs"] == 2
    assert saved["bootstrap"] == 100
    assert saved["rule"]["applied"] == {"(all training pairs)": 2}
    assert out.with_suffix(".md").read_text() == text.rstrip("\n") + "\n"
