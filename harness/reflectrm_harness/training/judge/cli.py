"""The judge recipe's ``train`` commands: ``judge``, ``verdict``, ``ship-judge`` and ``heldout``
(the SmolLM2 judge), ``states``, ``pool-split``, ``readouts`` and ``marker-layer`` (the Qwen
judge), and ``vs-length`` (an alias of ``reflectrm eval vs-length``).

Each command is an ``_add_<command>`` that declares its arguments and a ``run_<command>`` that
calls the recipe's functions (which read and write the files) and prints what they made;
``add_commands`` registers them all.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from reflectrm_harness.evaluation import vs_length
from reflectrm_harness.training.judge import verdict_layer
from reflectrm_harness.training.judge.heldout import export_heldout
from reflectrm_harness.training.judge.marker_layer import LayerConfig, plain, ship_layer
from reflectrm_harness.training.judge.model import base_model_dir
from reflectrm_harness.training.judge.pool import PoolConfig, read_pool, states_pass, write_role
from reflectrm_harness.training.judge.readout import write_readouts
from reflectrm_harness.training.judge.sft import JudgeTrainConfig, train_judge
from reflectrm_harness.training.judge.ship import ship_judge
from reflectrm_harness.training.judge.split import (
    JUDGE_SPLIT,
    load_or_make_split,
    read_sources,
    read_split,
    training_pairs,
)
from reflectrm_harness.training.judge.states import StatesConfig
from reflectrm_harness.training.options import friendly
from reflectrm_harness.training.overrides import make_settings, parse_overrides


def add_commands(commands: Any) -> None:
    """Register the judge recipe's commands on ``train``'s subparsers."""
    _add_judge(commands)
    _add_verdict(commands)
    _add_ship(commands)
    _add_heldout(commands)
    _add_states(commands)
    _add_pool_split(commands)
    _add_readouts(commands)
    _add_marker_layer(commands)


def _add_data(p: Any, benchmarks: bool = False) -> None:
    """``--data`` (the training pool's files, repeatable) and, with ``benchmarks``,
    ``--benchmark`` (files whose prompts leave the pool and whose groups a states pass samples)."""
    p.add_argument(
        "--data",
        action="append",
        required=True,
        type=Path,
        help="a shared-schema JSONL(.gz) file of the training pool (repeatable)",
    )
    if benchmarks:
        p.add_argument(
            "--benchmark",
            type=Path,
            action="append",
            default=[],
            help="a benchmark file (repeat): its prompts are dropped from the pool, and "
            "the states pass samples its groups",
        )


def _add_pool(p: Any, split_help: str) -> None:
    """``--data`` and ``--split`` (the pool's held-out split file)."""
    _add_data(p)
    p.add_argument(
        "--split",
        type=Path,
        default=JUDGE_SPLIT,
        help=f"{split_help} (default: harness/reflectrm_harness/splits/{JUDGE_SPLIT.name})",
    )


def _add_set(p: Any, settings: str, example: str) -> None:
    p.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help=f"override a {settings} field, e.g. --set {example} (repeatable)",
    )


def _add_judge(commands: Any) -> None:
    p = commands.add_parser(
        "judge",
        help="train the judge's verdict from preference labels (LoRA, both orders per step; "
        "resumable); ship the result with ship-judge",
    )
    _add_pool(
        p,
        "the held-out split file: read and checked if it exists, else made "
        "(--holdout-fraction of each file's prompts) and written",
    )
    p.add_argument("--holdout-fraction", type=float, default=0.22)
    p.add_argument(
        "--base",
        default="base",
        help="the model to train: 'base' (the embedded SmolLM2-135M-Instruct) or a folder",
    )
    p.add_argument("--output-dir", required=True, type=Path, help="the run's folder")
    p.add_argument("--resume", action="store_true", help="continue the run in --output-dir")
    p.add_argument(
        "--stop-after", type=int, help="end this session after this many steps (resumable)"
    )
    p.add_argument(
        "--end-at",
        type=int,
        help="end the run at this step and write its adapter (the schedule stays the planned "
        "one; the summary says it ended early)",
    )
    _add_set(p, "JudgeTrainConfig", "max_steps=300")
    p.set_defaults(func=run_judge)


def _add_verdict(commands: Any) -> None:
    p = commands.add_parser(
        "verdict",
        help="add a verdict layer to a judge run: one resumable forward pass saves its states, "
        "then an attention layer that reads each response's end is fitted on them (minutes); "
        "ship it with ship-judge --verdict",
    )
    _add_pool(p, "the held-out split file of the run (its pairs are never read)")
    p.add_argument("--run", required=True, type=Path, help="the run folder of `train judge`")
    p.add_argument("--out", required=True, type=Path, help="the verdict layers' folder")
    p.add_argument("--resume", action="store_true", help="continue the states' forward pass")
    _add_set(p, "VerdictConfig", "max_prompt_tokens=1024")
    p.set_defaults(func=run_verdict)


def _add_ship(commands: Any) -> None:
    p = commands.add_parser(
        "ship-judge",
        help="copy a finished judge run's adapter into an artifact folder with its manifest "
        "(hashes of the adapter, the base model, the data and the split; the run's figures)",
    )
    p.add_argument("--run", required=True, type=Path, help="the run folder of `train judge`")
    _add_pool(p, "the held-out split file of the run")
    p.add_argument("--to", required=True, type=Path, help="the artifact folder to write")
    p.add_argument("--name", default="reflectrm-judge-smollm2-135m")
    p.add_argument("--command", required=True, help="the training command, as run")
    p.add_argument(
        "--heldout",
        type=Path,
        help="a JSON file of held-out figures to record (e.g. an eval report's summary)",
    )
    p.add_argument(
        "--verdict", type=Path, help="a `train verdict` folder whose top layers ship too"
    )
    p.set_defaults(func=run_ship)


def _add_heldout(commands: Any) -> None:
    p = commands.add_parser(
        "heldout", help="write the held-out pairs of a split as a file `reflectrm eval` reads"
    )
    _add_pool(p, "the held-out split file")
    p.add_argument("--out", required=True, type=Path, help="a .jsonl or .jsonl.gz file")
    p.set_defaults(func=run_heldout)

    p = commands.add_parser("vs-length", help="an alias of `reflectrm eval vs-length`")
    vs_length.configure(p)
    p.set_defaults(func=run_vs_length)


def _add_states(commands: Any) -> None:
    p = commands.add_parser(
        "states",
        help="the judge recipe's states pass: a frozen backbone reads the pool's training and "
        "development pairs and benchmark samples in both orders (resumable)",
    )
    _add_data(p, benchmarks=True)
    p.add_argument("--model", required=True, help="the backbone's checkpoint folder")
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--plan-from", type=Path, help="reuse another pass's plan")
    p.add_argument("--limit-pairs", type=int, help="only the plan's first N pairs")
    p.add_argument("--max-prompt-tokens", type=int, default=1024)
    p.add_argument("--threads", type=int, default=0)
    p.add_argument("--worker", default="0/1", help="k/n: this process reads pairs k mod n")
    p.set_defaults(func=run_states)


def _add_pool_split(commands: Any) -> None:
    p = commands.add_parser(
        "pool-split",
        help="write one role of the judge recipe's split (heldout, dev, train) as a pairs file "
        "`reflectrm eval` reads",
    )
    _add_data(p, benchmarks=True)
    p.add_argument("--role", choices=("heldout", "dev", "train"), default="heldout")
    p.add_argument(
        "--cap",
        action="append",
        default=[],
        help="SOURCE=N: at most N pairs of a source (a seeded sample), repeatable",
    )
    p.add_argument("--out", type=Path, required=True)
    p.set_defaults(func=run_pool_split)


def _add_readouts(commands: Any) -> None:
    p = commands.add_parser(
        "readouts",
        help="position-free frozen-feature readouts of one or more states passes, scored "
        "length-balanced on the development split and the benchmark samples",
    )
    p.add_argument("--states", type=Path, action="append", required=True)
    p.add_argument("--out", type=Path, required=True, help="the report (JSON)")
    p.add_argument("--train-source", action="append", help="fit on these sources only")
    p.set_defaults(func=run_readouts)


def _add_marker_layer(commands: Any) -> None:
    p = commands.add_parser(
        "marker-layer",
        help="fit the verdict layer on a states pass and write the judge artifact "
        "(the layer and its manifest); `REFLECTRM_MODEL=OUT` serves it",
    )
    p.add_argument("--states", type=Path, required=True)
    p.add_argument("--model", type=Path, required=True, help="the backbone the pass read")
    p.add_argument("--out", type=Path, required=True, help="the artifact folder")
    p.add_argument("--name", required=True, help="the judge's name (its served folder's)")
    p.add_argument("--source", action="append", help="fit on these sources only (repeat)")
    p.add_argument("--report", type=Path, help="also write the fit's report (JSON)")
    p.add_argument("--command", default="", help="the commands that made it, for the manifest")
    p.add_argument(
        "--refit-on-dev",
        action="store_true",
        help="ship readouts fitted again on training and development items, with the "
        "grid point chosen on development items",
    )
    p.set_defaults(func=run_marker_layer)


@friendly
def run_judge(args: argparse.Namespace) -> int:
    config = make_settings(JudgeTrainConfig, parse_overrides(args.overrides, JudgeTrainConfig))
    sources = read_sources(args.data)
    split, made = load_or_make_split(args.split, sources, args.holdout_fraction, config.seed)
    if made:
        print(f"held-out split written to {args.split} ({len(split['pairs'])} pairs)")
    pairs = training_pairs(split, sources)
    base = base_model_dir() if args.base == "base" else Path(args.base)
    summary = train_judge(
        base,
        pairs,
        args.output_dir,
        config,
        resume=args.resume,
        stop_after=args.stop_after,
        end_at=args.end_at,
    )
    print(json.dumps({k: summary[k] for k in ("finished", "step", "steps")}))
    return 0


@friendly
def run_verdict(args: argparse.Namespace) -> int:
    settings = verdict_layer.VerdictConfig
    config = make_settings(settings, parse_overrides(args.overrides, settings))
    pairs = training_pairs(read_split(args.split), read_sources(args.data))
    report = verdict_layer.run_verdict(
        base_model_dir(), args.run, pairs, args.out, config, args.resume
    )
    if report.get("finished"):
        print(json.dumps({"scale": report["scale"], "development": report["development"]}))
    return 0


@friendly
def run_ship(args: argparse.Namespace) -> int:
    manifest = ship_judge(
        args.run,
        args.data,
        args.split,
        args.to,
        args.name,
        args.command,
        args.heldout,
        args.verdict,
    )
    print(json.dumps(manifest["files"], indent=1))
    return 0


@friendly
def run_heldout(args: argparse.Namespace) -> int:
    n = export_heldout(read_split(args.split), read_sources(args.data), args.out)
    print(f"{n} held-out pairs written to {args.out}")
    return 0


@friendly
def run_states(args: argparse.Namespace) -> int:
    config = StatesConfig(max_prompt_tokens=args.max_prompt_tokens, threads=args.threads)
    k, n = (int(x) for x in args.worker.split("/"))
    done = states_pass(
        args.data,
        args.benchmark,
        args.model,
        args.out,
        config,
        plan_from=args.plan_from,
        limit_pairs=args.limit_pairs,
        worker=(k, n),
    )
    print(done)
    return 0


@friendly
def run_pool_split(args: argparse.Namespace) -> int:
    config = PoolConfig()
    pool = read_pool(args.data, args.benchmark, config)
    caps = {k: int(v) for k, v in (c.split("=", 1) for c in args.cap)}
    n = write_role(pool, args.role, caps, config, args.out)
    print(f"{n} {args.role} pairs written to {args.out}")
    print(json.dumps(pool.sources, indent=1))
    return 0


@friendly
def run_readouts(args: argparse.Namespace) -> int:
    rep = write_readouts(args.states, args.out, train_sources=args.train_source)
    for model, r in rep.items():
        for layer in ("top", "mid"):
            for pen, res in r.get(layer, {}).get("by_penalty", {}).items():
                line = " ".join(
                    f"{g}={v.get('length_balanced', float('nan')):.3f}({v['pairs']})"
                    for g, v in res.items()
                    if "/" not in g or g.startswith("bench")
                )
                print(model, layer, pen, line)
    return 0


@friendly
def run_marker_layer(args: argparse.Namespace) -> int:
    sources = tuple(args.source) if args.source else None
    config = LayerConfig(sources=sources, refit_on_dev=args.refit_on_dev)
    report = ship_layer(
        args.states, args.model, args.out, config, args.command, args.name, args.report
    )
    chosen = {"chosen": report["chosen"], "development": report["development"]}
    print(json.dumps(chosen, indent=1, default=plain))
    return 0


@friendly
def run_vs_length(args: argparse.Namespace) -> int:
    """``reflectrm eval vs-length``, kept as ``train vs-length``."""
    return vs_length.run(args)
