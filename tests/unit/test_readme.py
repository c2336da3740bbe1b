"""The README stays true to the code: its settings table is the Settings class."""

from pathlib import Path

from scripts.settings_table import rows

README = Path(__file__).resolve().parents[2] / "README.md"


def test_readme_settings_table_matches_settings():
    text = README.read_text()
    missing = [row for row in rows() if row not in text]
    assert not missing, "README settings table is stale; regenerate with scripts/settings_table.py"


def test_readme_names_the_two_commands():
    text = README.read_text()
    assert "make serve" in text
    assert "make test" in text
