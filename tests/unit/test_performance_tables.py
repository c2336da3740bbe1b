"""docs/performance.md's judging-benchmark tables are the ones scripts/performance_tables.py
renders from the saved run under docs/records/bench-service-vs-engine-limit/."""

from __future__ import annotations

import pytest

from scripts.generated import between
from scripts.performance_tables import PAGE, TABLES, markers


@pytest.mark.parametrize("name", sorted(TABLES))
def test_the_performance_page_holds_the_table_rendered_from_its_record(name: str) -> None:
    inside = between(PAGE.read_text(), *markers(name))
    assert inside.strip() == TABLES[name]().strip(), (
        "run `python -m scripts.performance_tables --write`"
    )
