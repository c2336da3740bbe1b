"""The register of shipped judges (reflectrm.checkpoints.judges) names, for each judge, the
``reflectrm train`` commands that built it: each is a command ``reflectrm train`` has."""

from __future__ import annotations

import argparse

import pytest

from reflectrm.checkpoints.judges import SHIPPED
from reflectrm_harness.training.cli import add_parser


def train_commands() -> set[str]:
    parser = argparse.ArgumentParser(prog="reflectrm")
    train = add_parser(parser.add_subparsers(dest="command"))
    [commands] = [a for a in train._actions if isinstance(a, argparse._SubParsersAction)]
    return set(commands.choices)


@pytest.mark.parametrize("setting", list(SHIPPED))
def test_a_shipped_judges_recipe_names_train_commands(setting: str) -> None:
    known = train_commands()
    for command in SHIPPED[setting].commands():
        program, train, name = command.split()
        assert (program, train) == ("reflectrm", "train")
        assert name in known, f"{setting}: `{command}` is no `reflectrm train` command"
