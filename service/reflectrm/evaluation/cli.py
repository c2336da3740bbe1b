"""``reflectrm eval``: judge benchmark pairs, append per-judgment results, write the report."""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import logging
import sys
from dataclasses import dataclass
from pathlib import Path, PurePath
from typing import Any

from reflectrm.engines import EngineConfig, open_engine, resolve
from reflectrm.evaluation import records
from reflectrm.evaluation.benchmarks import (
    BENCHMARKS,
    DATA_DIR_ENV,
    JUDGEBENCH,
    Benchmark,
    DatasetError,
    canonical_name,
    default_data_dir,
    interleave,
    load_dataset,
    local_benchmarks,
    sample,
)
from reflectrm.evaluation.runner import (
    MODES,
    EngineBackend,
    HttpBackend,
    Progress,
    RunSummary,
    Unit,
    pending,
    plan,
    run_units,
)
from reflectrm.interrupts import run_command
from reflectrm.judging.judge import Judge
from reflectrm.runtime import engine_config, judge_config, settings_for

log = logging.getLogger(__name__)

RESULTS_NAME = "results.jsonl"
DEFAULT_OUT_DIR = Path("runs") / "eval"


@dataclass(frozen=True)
class Preset:
    help: str
    datasets: tuple[str, ...] | None  # None: every local benchmark
    limits: dict[str, int | None]  # benchmark -> pairs; "*" for the rest
    both_orders: bool


PRESETS = {
    "consistency": Preset(
        "the paper's positional-consistency protocol: all of JudgeBench and 1,000 random pairs "
        "of each other benchmark, both orders",
        None,
        {JUDGEBENCH: None, "*": 1000},
        True,
    ),
    "main": Preset(
        "the paper's main accuracy: every pair of every benchmark, one seeded random order",
        None,
        {"*": None},
        False,
    ),
    "small": Preset(
        "a sample for small machines: 200 RewardBench, 200 RMB and 100 JudgeBench pairs, "
        "both orders",
        ("rewardbench", "rmb", "judgebench"),
        {"rewardbench": 200, "rmb": 200, JUDGEBENCH: 100},
        True,
    ),
}


class UsageError(ValueError):
    """Options that cannot work together; the message says which."""


# --- options --------------------------------------------------------------------------------


def configure(p: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """Add every ``reflectrm eval`` option to a parser."""
    data = p.add_argument_group("benchmarks")
    data.add_argument(
        "--dataset",
        action="append",
        metavar="SPEC",
        help="a benchmark to run (repeatable): a benchmark name (rewardbench, rm-bench, rmb, "
        "judgebench, ppe) looked up in --data-dir, a JSONL file (gzip or plain) in the shared "
        "schema, or a Hugging Face dataset id for users who are online (allenai/reward-bench, "
        "THU-KEG/RM-Bench, ilgee/RMB-Pairwise, ScalerLab/JudgeBench, "
        "lmarena-ai/PPE-Human-Preference-V1). Prefix NAME= to say which benchmark a file holds. "
        "Default: every benchmark file found in --data-dir",
    )
    data.add_argument(
        "--data-dir",
        metavar="DIR",
        type=Path,
        help=f"where benchmark names are looked up (benchmarks/<name>.jsonl.gz); default "
        f"${DATA_DIR_ENV} or ../shared/data",
    )
    data.add_argument(
        "--limit",
        action="append",
        metavar="[NAME=]N",
        help="judge a deterministic random sample of N pairs per benchmark, or only of NAME "
        "(repeatable, e.g. --limit 200 --limit judgebench=100). Default: every pair",
    )
    data.add_argument(
        "--sample-seed",
        metavar="S",
        type=int,
        default=0,
        help="seed of the --limit sample (the same seed gives the same pairs; default 0)",
    )
    data.add_argument(
        "--preset",
        choices=sorted(PRESETS),
        help="; ".join(f"{name}: {p.help}" for name, p in PRESETS.items())
        + ". --dataset, --limit and --one-order override a preset",
    )
    judging = p.add_argument_group("judging")
    judging.add_argument(
        "--mode",
        action="append",
        choices=[*MODES, "all"],
        help="a row to run (repeatable; default all): single = one greedy judgment; vote = "
        "majority of N samples; vote_matched = majority of 2N-1 samples (ReflectRM's compute); "
        "reflect = ReflectRM; random_anchor, random_winners, anchor_only = its ablations",
    )
    orders = judging.add_mutually_exclusive_group()
    orders.add_argument(
        "--both-orders",
        dest="both_orders",
        action="store_true",
        default=None,
        help="judge every pair in both response orders (needed for positional consistency; "
        "the default)",
    )
    orders.add_argument(
        "--one-order",
        dest="both_orders",
        action="store_false",
        help="judge every pair once, in its seeded random order (accuracy only, half the cost)",
    )
    judging.add_argument(
        "--num-candidates",
        metavar="N",
        type=int,
        help="N, the stage-1 samples of vote and ReflectRM (default REFLECTRM_NUM_CANDIDATES or 8)",
    )
    judging.add_argument(
        "--max-tokens",
        metavar="N",
        type=int,
        help="generation limit per output (default REFLECTRM_MAX_TOKENS or 1024, the paper's)",
    )
    judging.add_argument(
        "--seed",
        metavar="S",
        type=int,
        default=0,
        help="seeds each pair's random response order and its judging seed (default 0)",
    )
    judging.add_argument(
        "--concurrency",
        metavar="C",
        type=int,
        default=8,
        help="judgments in flight at once, so the engine batches them (default 8)",
    )
    backend = p.add_argument_group("where to judge")
    backend.add_argument(
        "--url",
        metavar="URL",
        help="judge through a running service (POST URL/v1/judge) instead of an own engine; the "
        "ablation modes need an own engine",
    )
    backend.add_argument(
        "--model",
        metavar="MODEL",
        help="in-process only: 'default', a checkpoint folder or a hub id (default "
        "REFLECTRM_MODEL); other engine settings come from REFLECTRM_* variables",
    )
    backend.add_argument(
        "--timeout",
        metavar="SECONDS",
        type=float,
        default=1800.0,
        help="with --url: seconds to wait for one judgment (default 1800)",
    )
    out = p.add_argument_group("output")
    out.add_argument(
        "--out-dir",
        metavar="DIR",
        type=Path,
        default=DEFAULT_OUT_DIR,
        help=f"where {RESULTS_NAME} (one line per judgment, appended as they finish) and "
        f"report.json, report.md, report.png go (default {DEFAULT_OUT_DIR}). Rerunning the "
        "same command resumes: judgments already in the file are not redone",
    )
    out.add_argument(
        "--score-only",
        action="store_true",
        help=f"judge nothing: re-score {RESULTS_NAME} in --out-dir and rewrite the report",
    )
    out.add_argument(
        "--bootstrap",
        metavar="B",
        type=int,
        default=1000,
        help="bootstrap resamples for the 95%% intervals (default 1000)",
    )
    out.add_argument("--no-progress", action="store_true", help="no progress bar")
    return p


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Register ``eval`` on the ``reflectrm`` command's subparsers; it calls ``run(args)``."""
    p = subparsers.add_parser(
        "eval",
        help="benchmark accuracy and positional consistency, in the paper's layout",
        description="Judge benchmark pairs with the service's judging code (own engine or "
        "--url), append each judgment to OUT_DIR/results.jsonl as it finishes (a rerun "
        "resumes), and write report.json, report.md (the paper's Tables 1, 2 and 5) and "
        "report.png.",
    )
    configure(p)
    p.set_defaults(func=run)
    return p


def main(argv: list[str] | None = None) -> int:
    parser = configure(argparse.ArgumentParser(prog="reflectrm eval"))
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    args = parser.parse_args(argv)
    args.argv = sys.argv[1:] if argv is None else list(argv)
    return run_command(lambda: run(args))


# --- resolving the options ------------------------------------------------------------------


def parse_limits(values: list[str] | None, preset: Preset | None) -> dict[str, int | None]:
    limits: dict[str, int | None] = dict(preset.limits) if preset else {}
    for value in values or []:
        name, sep, number = value.rpartition("=")
        try:
            n = int(number)
        except ValueError:
            raise UsageError(f"--limit {value!r}: expected N or NAME=N") from None
        if n < 1:
            raise UsageError(f"--limit {value!r}: N must be at least 1")
        limits[canonical_name(name) if sep else "*"] = n
    return limits


def limit_for(limits: dict[str, int | None], benchmark: str) -> int | None:
    return limits.get(benchmark, limits.get("*"))


def load_benchmarks(args: argparse.Namespace, preset: Preset | None) -> list[Benchmark]:
    data_dir = args.data_dir or default_data_dir()
    specs = args.dataset or (list(preset.datasets) if preset and preset.datasets else None)
    if not specs:
        specs = local_benchmarks(data_dir)
        if not specs:
            raise DatasetError(
                f"no benchmark files in {data_dir}/benchmarks; pass --data-dir or --dataset"
            )
    loaded = [load_dataset(spec, data_dir) for spec in specs]
    names = [b.name for b in loaded]
    if len(set(names)) != len(names):
        raise UsageError(f"a benchmark is given twice: {names}")
    return sorted(loaded, key=lambda b: BENCHMARKS.index(b.name))


def selected_modes(args: argparse.Namespace) -> list[str]:
    chosen = args.mode or ["all"]
    names = list(MODES) if "all" in chosen else list(dict.fromkeys(chosen))
    if args.url:
        ablations = [m for m in names if MODES[m].ablation != "none"]
        if ablations and args.mode:
            raise UsageError(
                f"{', '.join(ablations)} need an own engine: the service API has no ablation "
                "field; drop --url or these modes"
            )
        if ablations:
            print(
                f"skipping {', '.join(ablations)}: the service API has no ablation field",
                file=sys.stderr,
            )
        names = [m for m in names if MODES[m].ablation == "none"]
    return names


# --- the command ----------------------------------------------------------------------------


def run(args: argparse.Namespace) -> int:
    out_dir: Path = args.out_dir
    results_path = out_dir / RESULTS_NAME
    try:
        if not args.score_only:
            try:
                summary = judge_all(args, results_path)
            except KeyboardInterrupt:
                done = len(records.load(results_path).records)
                print(
                    f"\ninterrupted: {done} judgments are saved in {results_path}; rerun the "
                    "same command to resume",
                    file=sys.stderr,
                )
                return 130
            if summary is not None and summary.retry_later:
                print(
                    f"{summary.retry_later} judgments failed transiently and were not recorded; "
                    "rerun the same command to retry them",
                    file=sys.stderr,
                )
        return write_report(results_path, out_dir, args.bootstrap, args.seed)
    except (DatasetError, UsageError, records.ResultsMismatchError) as exc:
        print(f"reflectrm eval: {exc}", file=sys.stderr)
        return 2


def write_report(results_path: Path, out_dir: Path, resamples: int, seed: int) -> int:
    # Imported here so that `reflectrm --help` works without the eval extra (numpy).
    from reflectrm.evaluation import report

    loaded = records.load(results_path)
    if not loaded.records:
        print(f"reflectrm eval: no results in {results_path} to score", file=sys.stderr)
        return 1
    built = report.build(loaded, results_path, resamples=resamples, seed=seed)
    paths = report.write(built, out_dir)
    print(report.markdown(built))
    for kind, path in paths.items():
        print(f"{kind}: {path}")
    return 0


def judge_all(args: argparse.Namespace, results_path: Path) -> RunSummary | None:
    preset = PRESETS[args.preset] if args.preset else None
    both_orders = (
        args.both_orders
        if args.both_orders is not None
        else (preset.both_orders if preset else True)
    )
    if args.concurrency < 1:
        raise UsageError("--concurrency must be at least 1")
    settings = settings_for(args.model)
    n = args.num_candidates or settings.num_candidates
    max_tokens = args.max_tokens or settings.max_tokens
    modes = selected_modes(args)
    limits = parse_limits(args.limit, preset)
    benchmarks = load_benchmarks(args, preset)
    sampled = [sample(b.pairs, limit_for(limits, b.name), args.sample_seed) for b in benchmarks]
    units = plan(interleave(sampled), modes, both_orders, args.seed, n, max_tokens)

    header: dict[str, Any] = {
        "type": "run",
        "started": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "argv": getattr(args, "argv", None) or sys.argv[1:],
        "datasets": {b.name: {"source": b.source, "pairs": len(b.pairs)} for b in benchmarks},
        "sampled": {b.name: len(s) for b, s in zip(benchmarks, sampled, strict=True)},
        "sample_seed": args.sample_seed,
        "modes": modes,
        "both_orders": both_orders,
        "concurrency": args.concurrency,
        "max_tokens": max_tokens,
        "num_candidates": n,
        "seed": args.seed,
    }
    existing = records.load(results_path)
    todo = pending(units, (r.key for r in existing.records))
    print(
        f"{len(units)} judgments planned ({sum(len(s) for s in sampled)} pairs x "
        f"{2 if both_orders else 1} orders x {len(modes)} modes); "
        f"{len(units) - len(todo)} already in {results_path}; {len(todo)} to judge",
        file=sys.stderr,
    )
    if args.url:
        return asyncio.run(_judge_http(args, header, existing, results_path, todo))
    engine = resolve(engine_config(settings))  # resolved once, before judging and for the header
    header.update(_engine_fingerprint(settings, engine))
    records.check_compatible(existing, header, results_path)
    if not todo:
        return None
    return asyncio.run(_judge_in_process(args, settings, engine, header, results_path, todo))


def _engine_fingerprint(settings: Any, engine: EngineConfig) -> dict[str, Any]:
    path = engine.model
    return {
        "backend": "in-process",
        "model": settings.served_model_name or PurePath(path).name or path,
        "model_path": path,
        "template_version": settings.template_version,
        "temperature": settings.temperature,
        "enforce_format": settings.enforce_format,
        "early_exit": settings.early_exit,
    }


def _finish(writer: records.Writer, summary: RunSummary) -> None:
    writer.write(
        {
            "type": "run_end",
            "finished": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
            "judged": summary.judged,
            "errors": summary.errors,
            "retry_later": summary.retry_later,
            "seconds": round(summary.seconds, 1),
            "generated_tokens": summary.generated_tokens,
        }
    )


async def _judge_in_process(
    args: argparse.Namespace,
    settings: Any,
    engine_cfg: EngineConfig,
    header: dict[str, Any],
    results_path: Path,
    todo: list[Unit],
) -> RunSummary:
    async with open_engine(engine_cfg) as engine:
        backend = EngineBackend(Judge(engine, judge_config(settings)))
        with records.Writer(results_path) as writer:
            writer.write(header)
            progress = Progress(len(todo), enabled=not args.no_progress)
            summary = await run_units(todo, backend, writer, args.concurrency, progress)
            _finish(writer, summary)
    return summary


async def _judge_http(
    args: argparse.Namespace,
    header: dict[str, Any],
    existing: records.Loaded,
    results_path: Path,
    todo: list[Unit],
) -> RunSummary | None:
    import httpx

    timeout = httpx.Timeout(args.timeout, connect=10.0)
    limits = httpx.Limits(max_connections=args.concurrency + 2)
    async with httpx.AsyncClient(timeout=timeout, limits=limits) as client:
        ready = await client.get(args.url.rstrip("/") + "/ready")
        if ready.status_code != 200:
            raise UsageError(f"{args.url}/ready answered {ready.status_code}: {ready.text[:300]}")
        header.update({"backend": "http", "url": args.url, "model": ready.json().get("model")})
        records.check_compatible(existing, header, results_path)
        if not todo:
            return None
        with records.Writer(results_path) as writer:
            writer.write(header)
            progress = Progress(len(todo), enabled=not args.no_progress)
            backend = HttpBackend(client, args.url)
            summary = await run_units(todo, backend, writer, args.concurrency, progress)
            _finish(writer, summary)
    return summary
