"""The README and the settings page stay true to the code: the settings table is the Settings
class, the README names the two commands, fits in about two screens and shows a real reply."""

from pathlib import Path

from scripts.readme_example import REQUEST, SHOWN, readme_reply
from scripts.settings_table import rows

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
SETTINGS_PAGE = ROOT / "docs" / "settings.md"


def test_the_settings_page_matches_settings():
    text = SETTINGS_PAGE.read_text()
    missing = [row for row in rows() if row not in text]
    assert not missing, "docs/settings.md is stale; regenerate with scripts/settings_table.py"


def test_readme_names_the_two_commands():
    text = README.read_text()
    assert "make serve" in text
    assert "make test" in text


def test_readme_is_short():
    assert len(README.read_text().splitlines()) <= 150


def test_readme_shows_the_request_and_a_reply_of_the_shown_fields():
    text = README.read_text()
    for value in (REQUEST["prompt"], *REQUEST["responses"]):
        assert value in text
    assert list(readme_reply()) == list(SHOWN)
