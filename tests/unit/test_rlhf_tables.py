"""docs/rlhf.md's figure tables are the ones scripts/rlhf_tables.py renders from the saved run
records under docs/records/."""

from __future__ import annotations

import pytest

from scripts.generated import between
from scripts.rlhf_tables import PAGE, TABLES, markers


@pytest.mark.parametrize("name", sorted(TABLES))
def test_the_rlhf_page_holds_the_table_rendered_from_its_record(name: str) -> None:
    inside = between(PAGE.read_text(), *markers(name))
    assert inside.strip() == TABLES[name]().strip(), "run `python -m scripts.rlhf_tables --write`"
