"""The pairwise workload of ``reflectrm eval``: judge benchmark pairs (or any pairwise file),
append per-judgment results, write the report."""

from __future__ import annotations

import argparse
import asyncio
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from reflectrm.engines import EngineConfig
from reflectrm.settings import get_settings
from reflectrm_harness.evaluation import records
from reflectrm_harness.evaluation.benchmarks import (
    BENCHMARKS,
    JUDGEBENCH,
    Benchmark,
    DatasetError,
    dataset_name,
    default_data_dir,
    interleave,
    load_dataset,
    local_benchmarks,
    sample,
)
from reflectrm_harness.evaluation.common import (
    Progress,
    RunSummary,
    UsageError,
    counted_judge,
    engine_config,
    engine_fingerprint,
    http_client,
    pending,
    run_end,
    run_header,
    run_workload,
    say,
    served_model,
)
from reflectrm_harness.evaluation.pairwise.runner import (
    EVAL_MODES,
    EngineBackend,
    HttpBackend,
    Unit,
    plan,
    refusal,
    run_units,
)
from reflectrm_harness.portable import portable

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
        limits[dataset_name(name) if sep else "*"] = n
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
        raise UsageError(
            f"two datasets have the same name: {names}; label them: --dataset NAME=PATH"
        )
    # Known benchmarks in display order, then datasets of the user's own in the order given.
    return sorted(loaded, key=lambda b: BENCHMARKS.index(b.name) if not b.generic else 99)


def selected_modes(args: argparse.Namespace) -> list[str]:
    chosen = args.mode or ["all"]
    return list(EVAL_MODES) if "all" in chosen else list(dict.fromkeys(chosen))


def service_modes(args: argparse.Namespace, modes: list[str], allowed: bool, why: str) -> list[str]:
    """The modes a service can run: without ablations allowed, ``--mode all`` skips them and an
    ablation named with --mode is an error (before anything is judged)."""
    ablations = [m for m in modes if EVAL_MODES[m].ablation != "none"]
    if not ablations or allowed:
        return modes
    if args.mode and "all" not in args.mode:
        raise UsageError(f"{', '.join(ablations)}: {why}; or drop --url or these modes")
    say(f"skipping {', '.join(ablations)}: {why}")
    return [m for m in modes if m not in ablations]


# --- the command ----------------------------------------------------------------------------


def run(args: argparse.Namespace) -> int:
    out_dir: Path = args.out_dir
    results_path = out_dir / RESULTS_NAME

    def judge() -> None:
        summary = judge_all(args, results_path)
        if summary is not None and summary.retry_later:
            say(
                f"{summary.retry_later} judgments failed transiently and were not recorded; "
                "rerun the same command to retry them"
            )

    def interrupted() -> str:
        done = len(records.load(results_path).records)
        return (
            f"\ninterrupted: {done} judgments are saved in {results_path}; rerun the same "
            "command to resume"
        )

    return run_workload(
        args.score_only,
        judge,
        lambda: write_report(results_path, out_dir, args.bootstrap, args.seed),
        interrupted,
    )


def write_report(results_path: Path, out_dir: Path, resamples: int, seed: int) -> int:
    # Imported here so that `reflectrm --help` works without the eval extra (numpy).
    from reflectrm_harness.evaluation.pairwise import report

    loaded = records.load(results_path)
    if not loaded.records:
        say(f"reflectrm eval: no results in {results_path} to score")
        return 1
    built = report.build(loaded, results_path, resamples=resamples, seed=seed)
    paths = report.write(built, out_dir)
    say(report.markdown(built), file=sys.stdout)
    for kind, path in paths.items():
        say(f"{kind}: {path}", file=sys.stdout)
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
    settings = get_settings(model=args.model or None)
    n = args.num_candidates or settings.num_candidates
    max_tokens = args.max_tokens or settings.max_tokens
    modes = selected_modes(args)
    limits = parse_limits(args.limit, preset)
    # Every row of every dataset is read and checked here, before an engine or a service is used.
    benchmarks = load_benchmarks(args, preset)
    named = {dataset_name(v.rpartition("=")[0]) for v in args.limit or [] if "=" in v}
    unknown = sorted(named - {b.name for b in benchmarks})
    if unknown:
        raise UsageError(
            f"--limit names {', '.join(unknown)}, which is not among the datasets run "
            f"({', '.join(b.name for b in benchmarks)})"
        )
    sampled = [sample(b.pairs, limit_for(limits, b.name), args.sample_seed) for b in benchmarks]
    share = bool(getattr(args, "share_samples", True)) and not args.url
    header = run_header(
        args,
        datasets={b.name: {"source": b.source, "pairs": len(b.pairs)} for b in benchmarks},
        sampled={b.name: len(s) for b, s in zip(benchmarks, sampled, strict=True)},
        sample_seed=args.sample_seed,
        modes=modes,
        both_orders=both_orders,
        concurrency=args.concurrency,
        share_samples=share,
        max_tokens=max_tokens,
        num_candidates=n,
        seed=args.seed,
    )
    existing = records.load(results_path)

    def todo_for(run_modes: list[str]) -> list[Unit]:
        header["modes"] = run_modes
        units = plan(interleave(sampled), run_modes, both_orders, args.seed, n, max_tokens)
        todo = pending(units, (r.key for r in existing.records))
        say(
            f"{len(units)} judgments planned ({sum(len(s) for s in sampled)} pairs x "
            f"{2 if both_orders else 1} orders x {len(run_modes)} modes); "
            f"{len(units) - len(todo)} already in {results_path}; {len(todo)} to judge"
        )
        refused = {u.pair.id: refusal(u) for u in todo if refusal(u)}
        if refused:
            first_id, why = next(iter(refused.items()))
            say(
                f"{len(refused)} pair(s) will be recorded as errors without judging, e.g. "
                f"{first_id!r}: {why}. The service refuses empty texts (HTTP 422) and the "
                "in-process judge applies the same rule; they score as no verdict"
            )
        return todo

    if args.url:
        return asyncio.run(_judge_http(args, header, existing, results_path, modes, todo_for))
    todo = todo_for(modes)
    engine = engine_config(settings)
    header.update(engine_fingerprint(settings, engine))
    records.check_compatible(existing, header, results_path)
    if not todo:
        return None
    return asyncio.run(_judge_in_process(args, settings, engine, header, results_path, todo))


async def _judge_in_process(
    args: argparse.Namespace,
    settings: Any,
    engine_cfg: EngineConfig,
    header: dict[str, Any],
    results_path: Path,
    todo: list[Unit],
) -> RunSummary:
    share = bool(header["share_samples"])
    async with counted_judge(engine_cfg, settings) as (judge, work):
        with records.Writer(results_path) as writer:
            writer.write(portable(header, Path.cwd()))
            progress = Progress(len(todo), enabled=not args.no_progress)
            backend = EngineBackend(judge)
            summary = await run_units(todo, backend, writer, args.concurrency, progress, share)
            writer.write(run_end(_counts(summary, share), work))
    return summary


# The smallest real ablation judgment: one candidate of at most 16 tokens, no reflection.
ABLATION_PROBE = {
    "prompt": "Is this request accepted?",
    "responses": ["Yes.", "No."],
    "mode": "reflect",
    "ablation": "anchor_only",
    "num_candidates": 1,
    "max_tokens": 16,
    "seed": 0,
}


async def _ablations_allowed(client: Any, url: str) -> tuple[bool, str]:
    """Whether the service runs ablations, asked with one tiny ablation judgment."""
    r = await client.post(url.rstrip("/") + "/v1/judge", json=ABLATION_PROBE)
    if r.status_code == 200:
        return True, ""
    try:
        detail = str(r.json().get("detail", r.text))[:300]
    except ValueError:
        detail = r.text[:300]
    return False, f"the service at {url} refuses ablations ({r.status_code}: {detail})"


async def _judge_http(
    args: argparse.Namespace,
    header: dict[str, Any],
    existing: records.Loaded,
    results_path: Path,
    modes: list[str],
    todo_for: Any,
) -> RunSummary | None:
    async with http_client(args.timeout, args.concurrency) as client:
        model = await served_model(client, args.url)
        if any(EVAL_MODES[m].ablation != "none" for m in modes):
            allowed, why = await _ablations_allowed(client, args.url)
            modes = service_modes(args, modes, allowed, why)
        todo = todo_for(modes)
        header.update({"backend": "http", "url": args.url, "model": model})
        records.check_compatible(existing, header, results_path)
        if not todo:
            return None
        with records.Writer(results_path) as writer:
            writer.write(portable(header, Path.cwd()))
            progress = Progress(len(todo), enabled=not args.no_progress)
            backend = HttpBackend(client, args.url)
            summary = await run_units(todo, backend, writer, args.concurrency, progress)
            writer.write(run_end(_counts(summary, share=False)))
    return summary


def _counts(summary: RunSummary, share: bool) -> dict[str, Any]:
    """What a pairwise ``run_end`` row counts."""
    return {
        "judged": summary.recorded,
        "errors": summary.errors,
        "retry_later": summary.retry_later,
        "seconds": round(summary.seconds, 1),
        "generated_tokens": summary.generated_tokens,
        "share_samples": share,
    }
