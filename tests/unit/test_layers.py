"""Dependencies point down: the engines import nothing of the judging code, the service or the
settings (the chat message they take is theirs), and the settings import no serving module."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "service" / "reflectrm"
ABOVE_THE_ENGINES = ("judging", "serving", "settings", "metrics", "api", "app", "evaluation")
ABOVE_THE_SETTINGS = ("serving", "metrics", "api", "app", "evaluation", "training", "cli")


def imported(path: Path) -> set[str]:
    """Every reflectrm module a file names in an import, wherever the import is."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return {n for n in names if n.startswith("reflectrm.")}


def under(names: set[str], parts: tuple[str, ...]) -> set[str]:
    return {n for n in names if n.split(".")[1] in parts}


@pytest.mark.parametrize("path", sorted((PACKAGE / "engines").glob("*.py")), ids=lambda p: p.name)
def test_the_engines_import_nothing_above_them(path: Path) -> None:
    assert under(imported(path), ABOVE_THE_ENGINES) == set()


def test_the_settings_import_no_serving_module() -> None:
    assert under(imported(PACKAGE / "settings.py"), ABOVE_THE_SETTINGS) == set()
    # Nor through what they import: no serving module, no metrics, no judge.
    code = (
        "import sys, reflectrm.settings; "
        "print(' '.join(m for m in sys.modules if m.startswith(('reflectrm.serving', "
        "'reflectrm.metrics', 'reflectrm.judging.judge', 'prometheus_client'))))"
    )
    loaded = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout.split()
    assert loaded == []
