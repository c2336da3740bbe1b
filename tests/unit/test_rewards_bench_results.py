"""docs/performance.md's reward-benchmark tables are the ones scripts/rewards_bench_results.py
renders from the saved record of docs/records/bench-rewards/."""

from __future__ import annotations

import json

from scripts.generated import between
from scripts.rewards_bench_results import END, PAGE, RECORD, START, render


def test_the_performance_page_holds_the_tables_rendered_from_the_record() -> None:
    inside = between(PAGE.read_text(), START, END)
    expected = render(json.loads((RECORD / "summary.json").read_text()))
    assert inside.strip() == expected.strip(), (
        "run `python -m scripts.rewards_bench_results --write`"
    )
