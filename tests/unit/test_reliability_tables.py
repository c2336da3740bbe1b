"""docs/reliability.md shows each table as scripts/reliability_tables.py renders it from the
saved runs in docs/records/reliability-runs/: a rerun that changes a record changes the page."""

from __future__ import annotations

import pytest

from scripts.generated import between
from scripts.reliability_tables import (
    PAGE,
    REPORTS,
    TABLES,
    counts,
    keepalive_table,
    markers,
    render,
)


@pytest.mark.parametrize("name", sorted([*TABLES, *REPORTS]))
def test_the_reliability_page_holds_each_table_rendered_from_its_records(name: str) -> None:
    start, end = markers(name)
    text = PAGE.read_text()
    assert (text.count(start), text.count(end)) == (1, 1), f"{PAGE.name}: the {name} markers"
    assert between(text, start, end).strip() == render(name).strip(), (
        "run `python -m scripts.reliability_tables --write`"
    )


def test_statuses_are_listed_in_numeric_order_then_by_name() -> None:
    assert counts({"429": 28, "200": 12, "no answer: ReadError": 1}) == (
        "200 × 12, 429 × 28, no answer: ReadError × 1"
    )
    assert counts({}) == "none"


def test_the_keepalive_table_counts_requests_without_an_answer_per_wait() -> None:
    report = {"by_wait": {"4.0": {"429": 3}, "5.02": {"429": 1, "no answer: ReadError": 2}}}
    assert keepalive_table(report).splitlines() == [
        "| wait | 4 s | 5.02 s |",
        "|---|---:|---:|",
        "| requests with no answer (`ReadError`), of 3 | 0 | 2 |",
    ]
