"""The margin recipe's ``train`` commands: ``counterfactuals``, ``margin-features`` and
``margin-fit``.

Each command is an ``_add_<command>`` that declares its arguments and a ``run_<command>`` that
calls the recipe's functions (which open the engine, read and write the files) and prints what
they made; ``add_commands`` registers them all.
"""

from __future__ import annotations

import argparse
import asyncio
from pathlib import Path
from typing import Any

from reflectrm_harness.training.margin import counterfactuals, features, fit
from reflectrm_harness.training.options import friendly


def add_commands(commands: Any) -> None:
    """Register the margin recipe's commands on ``train``'s subparsers."""
    _add_counterfactuals(commands)
    _add_features(commands)
    _add_fit(commands)


def _first_paragraph(doc: str | None) -> str:
    return (doc or "").split("\n\n")[0]


def _add_counterfactuals(commands: Any) -> None:
    p = commands.add_parser(
        "counterfactuals",
        help="counterfactual pairs from a pairs file, no model needed: the chosen reply against "
        "another prompt's reply, a non-answer, a truncated, a padded, a wrong-number copy",
        description=_first_paragraph(counterfactuals.__doc__),
    )
    p.add_argument("--pairs", type=Path, required=True)
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--per-kind", type=int, default=25)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--source",
        action="append",
        default=[],
        help="only rows of this source (repeatable); default every row",
    )
    p.add_argument(
        "--kind",
        action="append",
        choices=counterfactuals.KINDS,
        default=[],
        help="only this kind of counterfactual (repeatable); default every kind",
    )
    p.set_defaults(func=run_counterfactuals)


def _add_features(commands: Any) -> None:
    p = commands.add_parser(
        "margin-features",
        help="margin mode's features of every pair on a real engine: the verdict digits' "
        "log-odds in both orders, each response's mean token log-prob (resumable)",
        description=_first_paragraph(features.__doc__),
    )
    p.add_argument("--model", required=True)
    p.add_argument("--pairs", type=Path, required=True)
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--concurrency", type=int, default=4)
    p.set_defaults(func=run_features)


def _add_fit(commands: Any) -> None:
    p = commands.add_parser(
        "margin-fit",
        help="fit margin mode's two weights on margin-features files and report each choice's "
        "development figures; --manifest writes the chosen fit into a judge's manifest",
        description=_first_paragraph(fit.__doc__),
    )
    p.add_argument("--features", type=Path, action="append", required=True)
    p.add_argument("--out", type=Path, required=True)
    p.add_argument(
        "--manifest",
        type=Path,
        help="a judge artifact's manifest.json: its `margin` block is set to the --choose fit",
    )
    p.add_argument("--choose", help="the choice whose weights go into --manifest")
    p.set_defaults(func=run_fit)


@friendly
def run_counterfactuals(args: argparse.Namespace) -> int:
    n = counterfactuals.write_counterfactuals(
        args.pairs, args.out, args.per_kind, args.seed, args.source, args.kind
    )
    print(f"{n} counterfactual pairs written to {args.out}")
    return 0


@friendly
def run_features(args: argparse.Namespace) -> int:
    todo, total = features.pending(args.pairs, args.out)
    print(f"{len(todo)} of {total} pairs to do", flush=True)
    asyncio.run(features.write_features(args.model, todo, args.out, args.concurrency))
    return 0


@friendly
def run_fit(args: argparse.Namespace) -> int:
    fitted = fit.write_fit(args.features, args.out, args.manifest, args.choose)
    for line in fit.summary_lines(fitted):
        print(line)
    return 0
