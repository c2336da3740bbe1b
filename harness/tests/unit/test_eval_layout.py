"""evaluation/ is one core and two workloads: the core imports no workload, and the pairwise and
group workloads never import each other (only cli.py, the dispatch, sees both)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

EVALUATION = Path(__file__).resolve().parents[2] / "reflectrm_harness" / "evaluation"
WORKLOADS = ("pairwise", "groups")
CORE = sorted(p for p in EVALUATION.glob("*.py") if p.name not in ("cli.py", "__init__.py"))


def workloads_imported(path: Path) -> set[str]:
    """The workloads a file names in an import, wherever the import is."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
            names |= {f"{node.module}.{a.name}" for a in node.names}
    return {
        w for w in WORKLOADS for n in names if n.startswith(f"reflectrm_harness.evaluation.{w}")
    }


def test_the_core_and_the_workloads_are_where_the_layout_says():
    assert {p.name for p in CORE} >= {
        "common.py",
        "records.py",
        "names.py",
        "benchmarks.py",
        "hub.py",
        "scoring.py",
        "reporting.py",
    }
    for workload in WORKLOADS:
        assert (EVALUATION / workload / "command.py").is_file()


@pytest.mark.parametrize("path", CORE, ids=lambda p: p.name)
def test_the_core_imports_no_workload(path: Path):
    assert workloads_imported(path) == set()


@pytest.mark.parametrize("workload", WORKLOADS)
def test_a_workload_never_imports_the_other(workload: str):
    other = next(w for w in WORKLOADS if w != workload)
    for path in sorted((EVALUATION / workload).glob("*.py")):
        assert other not in workloads_imported(path), path.name
