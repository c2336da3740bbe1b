"""studies/swap_consistency.py: the offline figure it compares the online rate with, by hand."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from studies.swap_consistency import offline_consistency, wilson


def _row(pair: str, chosen_at: int, winner: int | None, mode: str = "single") -> dict:
    return {
        "type": "result",
        "pair_id": pair,
        "mode": mode,
        "chosen_position": chosen_at,
        "winner": winner,
    }


def test_consistent_means_the_same_response_named_in_both_orders(tmp_path: Path) -> None:
    rows = [
        {"type": "run"},
        # a: the chosen one both times (winner follows it from slot 1 to slot 2): consistent.
        _row("a", 1, 1),
        _row("a", 2, 2),
        # b: slot 1 both times: the chosen one once, the rejected once: inconsistent.
        _row("b", 1, 1),
        _row("b", 2, 1),
        # c: the rejected one both times: consistent (and wrong).
        _row("c", 1, 2),
        _row("c", 2, 1),
        # d: no verdict in one order: left out of the rate.
        _row("d", 1, 1),
        _row("d", 2, None),
        # e: not asked for; f: another mode.
        _row("e", 1, 1),
        _row("e", 2, 2),
        _row("f", 1, 1, mode="vote"),
        _row("f", 2, 1, mode="vote"),
    ]
    path = tmp_path / "results.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = offline_consistency(path, {"a", "b", "c", "d", "f"}, "single")
    assert out["pairs"] == 4
    assert out["with_verdicts_in_both_orders"] == 3
    assert out["consistent"] == 2
    assert out["rate"] == pytest.approx(2 / 3)
    assert out["rate_95"] == pytest.approx(wilson(2, 3))
