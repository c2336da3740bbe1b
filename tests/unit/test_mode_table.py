"""docs/modes.md's tables are the ones scripts/mode_table.py renders from the saved record of
docs/records/default-judge-modes/."""

from __future__ import annotations

from scripts.generated import between
from scripts.mode_table import END, PAGE, START, render


def test_the_modes_page_holds_the_tables_rendered_from_the_record() -> None:
    inside = between(PAGE.read_text(), START, END)
    assert inside.strip() == render().strip(), "run `python -m scripts.mode_table --write`"


def test_same_pairs_keeps_the_pairs_every_mode_judged_in_both_orders(tmp_path) -> None:
    import json

    from scripts.mode_table import same_pairs

    def result(mode: str, pair: str, order: int, bench: str = "heldout") -> dict:
        return {
            "type": "result",
            "mode": mode,
            "benchmark": bench,
            "pair_id": pair,
            "chosen_position": order,
        }

    rows = [
        {"type": "run", "modes": ["single"]},
        *(result("single", p, o) for p in ("a", "b", "c") for o in (1, 2)),
        result("single", "a", 1, bench="trap"),  # same id, another set: a pair of its own
        {"type": "run_end", "judged": 7},
        {"type": "run", "modes": ["reflect"]},
        *(result("reflect", "a", o) for o in (1, 2)),
        result("reflect", "b", 1),  # one order only: b is left out
        result("reflect", "a", 1, bench="trap"),
        result("reflect", "a", 2, bench="trap"),  # trap/a lacks single's order 2
    ]
    path = tmp_path / "results.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    kept = same_pairs(path)
    assert [r for r in kept if r["type"] == "result"] == [
        result("single", "a", 1),
        result("single", "a", 2),
        result("reflect", "a", 1),
        result("reflect", "a", 2),
    ]
    assert [r["type"] for r in kept if r["type"] != "result"] == ["run", "run_end", "run"]


def test_same_as_single_compares_each_pairs_pooled_outcome(tmp_path) -> None:
    import json

    from scripts.mode_table import same_as_single

    def result(mode: str, pair: str, order: int, chosen: float) -> dict:
        scores = [chosen, 1 - chosen] if order == 1 else [1 - chosen, chosen]
        return {
            "type": "result",
            "mode": mode,
            "benchmark": "heldout",
            "pair_id": pair,
            "chosen_position": order,
            "scores": scores,
        }

    rows = [
        # a: single right (0.9, 0.3: mean 0.6), reflect right (0.7, 0.4), margin wrong (0.4, 0.4)
        result("single", "a", 1, 0.9),
        result("single", "a", 2, 0.3),
        result("reflect", "a", 1, 0.7),
        result("reflect", "a", 2, 0.4),
        result("margin", "a", 1, 0.4),
        result("margin", "a", 2, 0.4),
        # b: single a tie (1.0, 0.0), reflect a tie (0.5, 0.5), margin right (0.6, 0.5)
        result("single", "b", 1, 1.0),
        result("single", "b", 2, 0.0),
        result("reflect", "b", 1, 0.5),
        result("reflect", "b", 2, 0.5),
        result("margin", "b", 1, 0.6),
        result("margin", "b", 2, 0.5),
    ]
    path = tmp_path / "results.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert same_as_single(path) == {"single": (2, 2), "margin": (0, 2), "reflect": (2, 2)}
