"""docs/training.md's figure tables are the ones scripts/training_tables.py renders from the
saved records under docs/records/judge-training/."""

from __future__ import annotations

import pytest

from scripts.generated import between
from scripts.training_tables import PAGE, TABLES, markers


@pytest.mark.parametrize("name", sorted(TABLES))
def test_the_training_page_holds_the_table_rendered_from_its_record(name: str) -> None:
    inside = between(PAGE.read_text(), *markers(name))
    assert inside.strip() == TABLES[name]().strip(), (
        "run `python -m scripts.training_tables --write`"
    )
