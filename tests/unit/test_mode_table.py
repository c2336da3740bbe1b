"""docs/modes.md's tables are the ones scripts/mode_table.py renders from the saved record of
docs/records/default-judge-modes/."""

from __future__ import annotations

from scripts.generated import between
from scripts.mode_table import END, PAGE, START, render


def test_the_modes_page_holds_the_tables_rendered_from_the_record() -> None:
    inside = between(PAGE.read_text(), START, END)
    assert inside.strip() == render().strip(), "run `python -m scripts.mode_table --write`"
