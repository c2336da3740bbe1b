"""docs/rlhf.md's policy-run tables are the ones scripts/policy_results.py renders from the
saved records of docs/records/policy-grpo/."""

from __future__ import annotations

from scripts.generated import between
from scripts.policy_results import END, PAGE, START, render


def test_the_rlhf_page_holds_the_tables_rendered_from_the_records() -> None:
    inside = between(PAGE.read_text(), START, END)
    assert inside.strip() == render().strip(), "run `python -m scripts.policy_results --write`"
