"""The harness imports of the serving package only what it declares for the harness
(``reflectrm.HARNESS_SEAM``); the service's insides (serving, api, metrics, the trainers'
integrations) it reaches through the app or over HTTP. Nothing under harness/, its tests
included, imports the repository's ``tests`` package (the harness's tests have their own doubles,
harness/tests/support)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from reflectrm import HARNESS_SEAM

DISTRIBUTION = Path(__file__).resolve().parents[2]
HARNESS = DISTRIBUTION / "reflectrm_harness"


def imports(path: Path, top: str) -> set[str]:
    """Every module under ``top`` a file names in an import, wherever the import is."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return {n for n in names if n.split(".")[0] == top}


def serving_imports(path: Path) -> set[str]:
    """Every serving-package module a file names in an import, wherever the import is."""
    return imports(path, "reflectrm")


def outside(names: set[str]) -> set[str]:
    return {n for n in names if not any(n == s or n.startswith(s + ".") for s in HARNESS_SEAM)}


@pytest.mark.parametrize(
    "path", sorted(HARNESS.rglob("*.py")), ids=lambda p: str(p.relative_to(HARNESS))
)
def test_the_harness_imports_only_the_declared_seam(path: Path) -> None:
    assert outside(serving_imports(path)) == set()


def test_the_checker_sees_an_import_outside_the_seam(tmp_path: Path) -> None:
    module = tmp_path / "m.py"
    module.write_text(
        "def f():\n    from reflectrm.serving.service import JudgingService\n"
        "from reflectrm.judging.judge import Judge\nimport reflectrm.api.convert\n"
    )
    assert outside(serving_imports(module)) == {
        "reflectrm.serving.service",
        "reflectrm.api.convert",
    }


@pytest.mark.parametrize(
    "path",
    sorted(p for p in DISTRIBUTION.rglob("*.py") if ".egg-info" not in str(p)),
    ids=lambda p: str(p.relative_to(DISTRIBUTION)),
)
def test_nothing_in_the_harness_imports_the_repositorys_tests(path: Path) -> None:
    assert imports(path, "tests") == set()


def test_the_checker_sees_an_import_of_the_repositorys_tests(tmp_path: Path) -> None:
    module = tmp_path / "m.py"
    module.write_text(
        "def f():\n    from tests.conftest import ScriptedEngine\n"
        "import tests\nimport tests.unit.tiny_models\nfrom support.engines import judgment\n"
    )
    assert imports(module, "tests") == {"tests", "tests.conftest", "tests.unit.tiny_models"}
