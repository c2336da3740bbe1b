"""The paper's GRPO recipe's ``train`` commands: ``build-data``, ``grpo``, ``warmup``,
``check`` and ``grpo-pairs`` (declared and run in pairs.py: counterfactual pairs whose length
and position predict nothing).

Each command is an ``_add_<command>`` that declares its arguments and a ``run_<command>`` that
calls the recipe's functions (which open the engine, read and write the files) and prints what
they made; ``add_commands`` registers them all.
"""

from __future__ import annotations

import argparse
import asyncio
import json
from pathlib import Path
from typing import Any

from reflectrm.settings import get_settings
from reflectrm_harness.training.grpo.check import CheckConfig, check_model, save_check
from reflectrm_harness.training.grpo.config import GRPOSettings, load_settings
from reflectrm_harness.training.grpo.data import BuildConfig, build_with_engine, rebuild
from reflectrm_harness.training.grpo.pairs import add_command as add_pairs_command
from reflectrm_harness.training.grpo.pairs import run_command as run_pairs_command
from reflectrm_harness.training.grpo.sources import load_pairs
from reflectrm_harness.training.grpo.train import train
from reflectrm_harness.training.grpo.warmup import WarmupSettings, warmup
from reflectrm_harness.training.options import friendly
from reflectrm_harness.training.overrides import make_settings, parse_overrides


def add_commands(commands: Any) -> None:
    """Register the GRPO recipe's commands on ``train``'s subparsers."""
    _add_build(commands)
    _add_grpo(commands)
    _add_warmup(commands)
    _add_check(commands)
    add_pairs_command(commands).set_defaults(func=friendly(run_pairs_command))


def _add_build(commands: Any) -> None:
    p = commands.add_parser(
        "build-data",
        help="judge pairs with the base model and build the preference + reflection mix",
    )
    p.add_argument(
        "--data",
        help="shared-schema JSONL(.gz) file or folder, or a hub dataset id "
        "(nvidia/HelpSteer3 is converted)",
    )
    p.add_argument("--split", default="train", help="hub dataset split")
    p.add_argument("--limit", type=int, help="read at most this many pairs")
    p.add_argument("--out", required=True, type=Path, help="output folder")
    p.add_argument("--model", default=None, help="base model (default: REFLECTRM_MODEL)")
    p.add_argument("--samples", type=int, default=8, help="judgments per pair (paper: 8)")
    p.add_argument("--max-tokens", type=int, default=1024, help="per judgment (paper: 1024)")
    p.add_argument(
        "--ratio", type=float, default=4.0, help="preference items per reflection item (paper: 4)"
    )
    p.add_argument(
        "--no-reflection", action="store_true", help="preference items only (the RFT baseline)"
    )
    p.add_argument("--max-prompt-tokens", type=int, help="skip pairs with longer judging prompts")
    p.add_argument(
        "--holdout",
        type=int,
        default=0,
        help="pairs set aside untouched in holdout.jsonl, to measure on",
    )
    p.add_argument(
        "--no-enforce-format",
        action="store_true",
        help="let the base model write free text (default: format enforced)",
    )
    p.add_argument(
        "--unparsed-is-incorrect",
        action="store_true",
        help="use unparseable judgments as the wrong analysis of reflection items",
    )
    p.add_argument("--concurrency", type=int, default=8, help="pairs judged at once")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--from-judgments",
        type=Path,
        help="select again from a judgments.jsonl instead of running the model",
    )
    p.set_defaults(func=run_build)


def _add_overrides(p: Any, help_text: str) -> None:
    """``--set KEY=VALUE`` (repeatable) and the ``--output-dir`` shortcut."""
    p.add_argument(
        "--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE", help=help_text
    )
    p.add_argument("--output-dir", help="shortcut for --set output_dir=...")


def _add_grpo(commands: Any) -> None:
    p = commands.add_parser("grpo", help="GRPO training, then export a servable checkpoint")
    p.add_argument("--data", required=True, type=Path, help="train.jsonl written by build-data")
    p.add_argument(
        "--config",
        type=Path,
        help="YAML settings, or the name of a bundled file: 'default' (the paper's values, "
        "the default) or 'small' (a small judge in an hour of CPU; docs/training.md)",
    )
    _add_overrides(p, "override one setting, e.g. --set lora=true (repeatable)")
    p.set_defaults(func=run_grpo)


def _add_warmup(commands: Any) -> None:
    p = commands.add_parser(
        "warmup",
        help="optional: supervised warm-up on the base model's own correct judgments (for small "
        "models that never write the format; not in the paper)",
    )
    p.add_argument("--judgments", required=True, type=Path, help="judgments.jsonl of build-data")
    _add_overrides(p, "override a WarmupSettings field, e.g. --set epochs=2 (repeatable)")
    p.set_defaults(func=run_warmup)


def _add_check(commands: Any) -> None:
    p = commands.add_parser(
        "check", help="parseable-verdict rate and accuracy on held-out pairs (format not forced)"
    )
    p.add_argument("--model", required=True, help="'default', a checkpoint folder or a hub id")
    p.add_argument("--pairs", required=True, help="shared-schema pairs, e.g. holdout.jsonl")
    p.add_argument("--limit", type=int)
    p.add_argument("--max-tokens", type=int, default=256)
    p.add_argument("--enforce-format", action="store_true")
    p.add_argument("--out", type=Path, help="write the results as JSON here")
    p.add_argument(
        "--record",
        metavar="NAME",
        help="also store the results in the checkpoint's manifest under this name",
    )
    p.set_defaults(func=run_check)


def _build_config(args: argparse.Namespace, template_version: str) -> BuildConfig:
    return BuildConfig(
        samples_per_pair=args.samples,
        max_tokens=args.max_tokens,
        enforce_format=not args.no_enforce_format,
        preference_per_reflection=None if args.no_reflection else args.ratio,
        unparsed_is_incorrect=args.unparsed_is_incorrect,
        max_prompt_tokens=args.max_prompt_tokens,
        holdout_pairs=args.holdout,
        seed=args.seed,
        concurrency=args.concurrency,
        template_version=template_version,
    )


@friendly
def run_build(args: argparse.Namespace) -> int:
    settings = get_settings(model=args.model or None)
    # the items are rendered in the template the service is set to (REFLECTRM_TEMPLATE_VERSION),
    # whether the judgments are made now or read back
    config = _build_config(args, settings.template_version)
    if args.from_judgments:
        stats = rebuild(args.from_judgments, config, args.out)
    else:
        if not args.data:
            raise SystemExit("build-data needs --data (or --from-judgments)")
        pairs = load_pairs(args.data, args.split, args.limit)
        stats = asyncio.run(build_with_engine(settings.engine_config(), pairs, config, args.out))
    print(json.dumps({k: v for k, v in stats.__dict__.items() if k != "extra"}, indent=2))
    return 0


@friendly
def run_grpo(args: argparse.Namespace) -> int:
    overrides = parse_overrides(args.overrides, GRPOSettings)
    if args.output_dir:
        overrides["output_dir"] = args.output_dir
    cfg = load_settings(args.config, overrides)
    folder = train(cfg, args.data)
    print(folder)
    return 0


@friendly
def run_warmup(args: argparse.Namespace) -> int:
    overrides = parse_overrides(args.overrides, WarmupSettings)
    if args.output_dir:
        overrides["output_dir"] = args.output_dir
    print(warmup(make_settings(WarmupSettings, overrides), args.judgments))
    return 0


@friendly
def run_check(args: argparse.Namespace) -> int:
    settings = get_settings(model=args.model or None)
    pairs = load_pairs(args.pairs, limit=args.limit)
    config = CheckConfig(
        max_tokens=args.max_tokens,
        enforce_format=args.enforce_format,
        template_version=settings.template_version,
    )
    engine_config = settings.engine_config()
    summary = asyncio.run(check_model(engine_config, settings.model, pairs, config))
    print(json.dumps(summary, indent=2))
    save_check(summary, args.out, Path(args.model), args.record)
    return 0
