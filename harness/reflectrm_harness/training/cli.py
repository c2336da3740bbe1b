"""``reflectrm train ...``: the commands of every recipe, each recipe's in its own ``cli``
module: the paper's GRPO recipe's (``build-data``, ``grpo``, ``warmup``, ``check``,
``grpo-pairs``: training/grpo/cli.py), the judge recipe's (``judge``, ``verdict``, ``ship-judge``,
``states``, ``marker-layer``, ...: training/judge/cli.py) and the margin recipe's
(``counterfactuals``, ``margin-features``, ``margin-fit``: training/margin/cli.py).

A recipe's module registers its commands with ``add_commands(commands)``: each command declares
its arguments and sets ``func``, which takes the parsed namespace and returns an exit code (a bad
input is a one-line error: training/options.py). Wire ``train`` into the main CLI with
``add_parser(subparsers)`` (the ``reflectrm.commands`` entry point); ``main(argv)`` runs it
standalone (``python -m reflectrm_harness.training.cli ...``).
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence
from typing import Any

from reflectrm.interrupts import run_command
from reflectrm_harness.training.grpo import cli as grpo_cli
from reflectrm_harness.training.judge import cli as judge_cli
from reflectrm_harness.training.margin import cli as margin_cli

log = logging.getLogger("reflectrm_harness.training")

RECIPES = (grpo_cli, judge_cli, margin_cli)


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Register ``train`` with its commands on an argparse subparsers object."""
    train = subparsers.add_parser(
        "train",
        help="train a judge: the judge recipe (judge, verdict, ship-judge, ...), the paper's "
        "GRPO recipe (build-data, grpo, ...) or the default judge's margin weights "
        "(counterfactuals, margin-features, margin-fit)",
    )
    commands = train.add_subparsers(dest="train_command", required=True)
    for recipe in RECIPES:
        recipe.add_commands(commands)
    return train


def main(argv: Sequence[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    parser = argparse.ArgumentParser(prog="reflectrm")
    add_parser(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    return run_command(lambda: int(args.func(args)))


if __name__ == "__main__":
    sys.exit(main())
