"""The serving package and the harness apart: the serving package imports nothing of the harness,
and its command finds eval and train through an entry-point group, or says what to install."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

import pytest

from reflectrm import cli

PACKAGE = Path(__file__).resolve().parents[2] / "service" / "reflectrm"


def harness_imports(path: Path) -> set[str]:
    """Every harness module a file names in an import, wherever the import is."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return {n for n in names if n.split(".")[0] == "reflectrm_harness"}


@pytest.mark.parametrize(
    "path", sorted(PACKAGE.rglob("*.py")), ids=lambda p: str(p.relative_to(PACKAGE))
)
def test_the_serving_package_imports_nothing_of_the_harness(path: Path) -> None:
    assert harness_imports(path) == set()


def test_the_serving_package_holds_no_evaluation_or_training() -> None:
    assert not (PACKAGE / "evaluation").exists()
    assert not (PACKAGE / "training").exists()


def test_the_checker_sees_a_harness_import(tmp_path: Path) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text("def f():\n    from reflectrm_harness.evaluation import records\n")
    assert harness_imports(bad) == {"reflectrm_harness.evaluation"}


@pytest.mark.parametrize("command", ["eval", "train"])
def test_without_the_harness_eval_and_train_say_what_to_install(
    command: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(cli, "entry_points", lambda group: [])
    assert cli.main([command, "--dataset", "x"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        f"reflectrm {command} needs the harness (reflectrm-harness): pip install -e harness "
        "(from the repository; `make setup` installs it)"
    ]


def test_the_installed_harness_adds_its_commands(monkeypatch: pytest.MonkeyPatch) -> None:
    added: list[str] = []

    class Entry:
        def __init__(self, name: str) -> None:
            self.name = name

        def load(self) -> Any:
            def add(sub: Any) -> None:
                added.append(self.name)
                sub.add_parser(self.name).set_defaults(func=lambda args: 0)

            return add

    def found(group: str) -> list[Entry]:
        assert group == "reflectrm.commands"
        return [Entry("eval"), Entry("train")]

    monkeypatch.setattr(cli, "entry_points", found)
    assert cli.main(["eval"]) == 0
    assert added == ["eval", "train"]
