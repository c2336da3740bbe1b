"""``reflectrm train ...``: the commands of both recipes, the judge recipe's (``judge``,
``verdict``, ``ship-judge``, ``states``, ``marker-layer``, ...: training/judge) and the paper's
GRPO recipe's (``build-data``, ``grpo``, ...: training/grpo).

Every command is registered here, one way: an ``_add_<command>`` that declares its arguments and
a ``run_<command>`` (``_friendly``: a bad input is a one-line error) that calls the recipe's
functions. Wire it into the main CLI with ``add_parser(subparsers)`` (the ``reflectrm.commands``
entry point); the parsed namespace carries ``func``, which takes the namespace and returns an
exit code. ``main(argv)`` runs it standalone
(``python -m reflectrm_harness.training.cli ...``).
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import json
import logging
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from reflectrm.checkpoints.validate import CheckpointError
from reflectrm.engines import open_engine
from reflectrm.interrupts import run_command
from reflectrm.settings import get_settings
from reflectrm_harness.training.grpo.config import GRPOSettings, load_settings
from reflectrm_harness.training.grpo.data import BuildConfig, build, rebuild
from reflectrm_harness.training.grpo.sources import load_pairs
from reflectrm_harness.training.judge.split import JUDGE_SPLIT
from reflectrm_harness.training.overrides import make_settings, parse_overrides

log = logging.getLogger("reflectrm_harness.training")


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Register ``train`` with its commands on an argparse subparsers object."""
    train = subparsers.add_parser(
        "train",
        help="train a judge: the recipe of the served judge (judge, verdict, ship-judge, ...) "
        "or the paper's GRPO recipe (build-data, grpo, ...)",
    )
    commands = train.add_subparsers(dest="train_command", required=True)
    _add_build(commands)
    _add_grpo(commands)
    _add_warmup(commands)
    _add_check(commands)
    _add_judge(commands)
    _add_verdict(commands)
    _add_ship(commands)
    _add_heldout(commands)
    _add_states(commands)
    _add_pool_split(commands)
    _add_readouts(commands)
    _add_marker_layer(commands)
    return train


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

    from reflectrm_harness.evaluation import vs_length

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


Command = Callable[[argparse.Namespace], int]


def _friendly(command: Command) -> Command:
    """A bad input (a wrong path, a refused checkpoint, a bad setting) is a one-line error and
    exit code 2, not a traceback, whichever CLI calls the command."""

    @functools.wraps(command)
    def run(args: argparse.Namespace) -> int:
        try:
            return command(args)
        except (CheckpointError, ValueError, OSError) as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2

    return run


def _build_config(args: argparse.Namespace) -> BuildConfig:
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
    )


@_friendly
def run_build(args: argparse.Namespace) -> int:
    settings = get_settings(model=args.model or None)
    # the items are rendered in the template the service is set to (REFLECTRM_TEMPLATE_VERSION),
    # whether the judgments are made now or read back
    config = BuildConfig(
        **{**_build_config(args).__dict__, "template_version": settings.template_version}
    )
    if args.from_judgments:
        stats = rebuild(args.from_judgments, config, args.out)
    else:
        if not args.data:
            raise SystemExit("build-data needs --data (or --from-judgments)")
        pairs = load_pairs(args.data, args.split, args.limit)
        stats = asyncio.run(_build_with_engine(settings, pairs, config, args.out))
    print(json.dumps({k: v for k, v in stats.__dict__.items() if k != "extra"}, indent=2))
    return 0


async def _build_with_engine(settings: Any, pairs: Any, config: BuildConfig, out: Path) -> Any:
    async with open_engine(settings.engine_config()) as engine:
        return await build(engine, pairs, config, out)


@_friendly
def run_grpo(args: argparse.Namespace) -> int:
    from reflectrm_harness.training.grpo.train import train

    overrides = parse_overrides(args.overrides, GRPOSettings)
    if args.output_dir:
        overrides["output_dir"] = args.output_dir
    cfg = load_settings(args.config, overrides)
    folder = train(cfg, args.data)
    print(folder)
    return 0


@_friendly
def run_warmup(args: argparse.Namespace) -> int:
    from reflectrm_harness.training.grpo.warmup import WarmupSettings, warmup

    overrides = parse_overrides(args.overrides, WarmupSettings)
    if args.output_dir:
        overrides["output_dir"] = args.output_dir
    print(warmup(make_settings(WarmupSettings, overrides), args.judgments))
    return 0


@_friendly
def run_check(args: argparse.Namespace) -> int:
    from reflectrm_harness.training.grpo.check import CheckConfig
    from reflectrm_harness.training.grpo.export import add_evaluation

    settings = get_settings(model=args.model or None)
    pairs = load_pairs(args.pairs, limit=args.limit)
    config = CheckConfig(
        max_tokens=args.max_tokens,
        enforce_format=args.enforce_format,
        template_version=settings.template_version,
    )
    summary = asyncio.run(_check_with_engine(settings, pairs, config))
    text = json.dumps(summary, indent=2)
    print(text)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text + "\n")
    if args.record:
        # the manifest keeps the figures; the per-judgment verdicts stay in --out
        add_evaluation(
            Path(args.model), args.record, {k: v for k, v in summary.items() if k != "verdicts"}
        )
    return 0


async def _check_with_engine(settings: Any, pairs: Any, config: Any) -> dict[str, object]:
    from reflectrm_harness.training.grpo.check import check

    async with open_engine(settings.engine_config()) as engine:
        result = await check(engine, pairs, config)
    return {"model": settings.model, **result.summary()}


@_friendly
def run_judge(args: argparse.Namespace) -> int:
    from reflectrm_harness.training.judge.model import base_model_dir
    from reflectrm_harness.training.judge.sft import JudgeTrainConfig, train_judge
    from reflectrm_harness.training.judge.split import (
        make_split,
        read_sources,
        read_split,
        training_pairs,
        write_split,
    )

    config = make_settings(JudgeTrainConfig, parse_overrides(args.overrides, JudgeTrainConfig))
    sources = read_sources(args.data)
    if args.split.is_file():
        split = read_split(args.split)
    else:
        split = make_split(sources, args.holdout_fraction, config.seed)
        write_split(split, args.split)
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


@_friendly
def run_verdict(args: argparse.Namespace) -> int:
    from reflectrm_harness.training.judge import verdict_layer
    from reflectrm_harness.training.judge.model import base_model_dir
    from reflectrm_harness.training.judge.split import read_sources, read_split, training_pairs

    settings = verdict_layer.VerdictConfig
    config = make_settings(settings, parse_overrides(args.overrides, settings))
    pairs = training_pairs(read_split(args.split), read_sources(args.data))
    report = verdict_layer.run_verdict(
        base_model_dir(), args.run, pairs, args.out, config, args.resume
    )
    if report.get("finished"):
        print(json.dumps({"scale": report["scale"], "development": report["development"]}))
    return 0


@_friendly
def run_ship(args: argparse.Namespace) -> int:
    from reflectrm_harness.training.judge.ship import ship_judge

    heldout = json.loads(args.heldout.read_text()) if args.heldout else None
    manifest = ship_judge(
        args.run,
        args.data,
        args.split,
        args.to,
        args.name,
        args.command,
        heldout,
        args.verdict,
    )
    print(json.dumps(manifest["files"], indent=1))
    return 0


@_friendly
def run_heldout(args: argparse.Namespace) -> int:
    from reflectrm_harness.training.judge.heldout import export_heldout
    from reflectrm_harness.training.judge.split import read_sources, read_split

    n = export_heldout(read_split(args.split), read_sources(args.data), args.out)
    print(f"{n} held-out pairs written to {args.out}")
    return 0


@_friendly
def run_states(args: argparse.Namespace) -> int:
    from reflectrm_harness.training.judge.pool import states_pass
    from reflectrm_harness.training.judge.states import StatesConfig

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


@_friendly
def run_pool_split(args: argparse.Namespace) -> int:
    import gzip

    from reflectrm_harness.training.judge.pool import PoolConfig, read_pool, role_rows

    config = PoolConfig()
    pool = read_pool(args.data, args.benchmark, config)
    caps = {k: int(v) for k, v in (c.split("=", 1) for c in args.cap)}
    rows = role_rows(pool, args.role, caps, config)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    opener = gzip.open if args.out.suffix == ".gz" else open
    with opener(args.out, "wt") as f:
        for row in rows:
            f.write(json.dumps(row, ensure_ascii=False) + "\n")
    print(f"{len(rows)} {args.role} pairs written to {args.out}")
    print(json.dumps(pool.sources, indent=1))
    return 0


@_friendly
def run_readouts(args: argparse.Namespace) -> int:
    from reflectrm_harness.training.judge.readout import readouts

    rep = readouts(args.states, train_sources=args.train_source)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(rep, indent=1) + "\n")
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


@_friendly
def run_marker_layer(args: argparse.Namespace) -> int:
    from reflectrm_harness.training.judge.marker_layer import (
        LayerConfig,
        fit_layer,
        plain,
        write_artifact,
    )
    from reflectrm_harness.training.judge.states import PLAN

    sources = tuple(args.source) if args.source else None
    config = LayerConfig(sources=sources, refit_on_dev=args.refit_on_dev)
    report = fit_layer(args.states, args.model, config)
    info = json.loads((args.states / PLAN).read_text())["info"]
    write_artifact(args.out, report, args.model, config, info, args.command, args.name)
    if args.report:
        body = {k: v for k, v in report.items() if k != "parts"}
        args.report.parent.mkdir(parents=True, exist_ok=True)
        args.report.write_text(json.dumps(body, indent=1, default=plain) + "\n")
    chosen = {"chosen": report["chosen"], "development": report["development"]}
    print(json.dumps(chosen, indent=1, default=plain))
    return 0


@_friendly
def run_vs_length(args: argparse.Namespace) -> int:
    """``reflectrm eval vs-length``, kept as ``train vs-length``."""
    from reflectrm_harness.evaluation import vs_length

    return vs_length.run(args)


def main(argv: Sequence[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    parser = argparse.ArgumentParser(prog="reflectrm")
    add_parser(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    return run_command(lambda: int(args.func(args)))


if __name__ == "__main__":
    sys.exit(main())
