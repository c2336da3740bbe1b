"""docs/results.md shows the pooled-judge table as scripts/margin_results.py renders it from
the saved records: a rerun that changes a record changes the page."""

from __future__ import annotations

from pathlib import Path

from scripts.generated import between
from scripts.margin_results import END, START, render

PAGE = Path(__file__).resolve().parents[2] / "docs" / "results.md"


def test_the_results_page_holds_the_table_rendered_from_the_records() -> None:
    text = PAGE.read_text()
    inside = between(text, START, END)
    assert inside.strip() == render().strip(), "run `python -m scripts.margin_results`"
