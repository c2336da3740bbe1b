"""The pairwise workload of ``reflectrm eval``: judge benchmark pairs (or any pairwise file),
append per-judgment results, write the report."""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import logging
import os
import sys
from dataclasses import dataclass
from pathlib import Path, PurePath
from typing import Any

from reflectrm.engines import EngineConfig, open_engine, resolve
from reflectrm.evaluation import records
from reflectrm.evaluation.benchmarks import (
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
from reflectrm.evaluation.pairwise.runner import (
    EVAL_MODES,
    CountingEngine,
    EngineBackend,
    EngineWork,
    HttpBackend,
    Progress,
    RunSummary,
    ServiceRefusedError,
    Unit,
    pending,
    plan,
    refusal,
    run_units,
)
from reflectrm.judging.judge import Judge
from reflectrm.settings import get_settings

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


def quiet_libraries(verbose: bool) -> None:
    """Unless ``verbose``, only reflectrm's own informational lines: other libraries (httpx logs
    every request at INFO, vLLM its engine statistics) show warnings and errors only."""
    if verbose:
        return
    root = logging.getLogger()
    if root.getEffectiveLevel() < logging.WARNING:
        logging.getLogger("reflectrm").setLevel(root.getEffectiveLevel())
        root.setLevel(logging.WARNING)
    # vLLM configures its own logger when imported (the engine's processes inherit this).
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")


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
    print(f"skipping {', '.join(ablations)}: {why}", file=sys.stderr)
    return [m for m in modes if m not in ablations]


# --- the command ----------------------------------------------------------------------------


def run(args: argparse.Namespace) -> int:
    quiet_libraries(getattr(args, "verbose", False))
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
    except (
        DatasetError,
        UsageError,
        records.ResultsMismatchError,
        ServiceRefusedError,
    ) as exc:
        print(f"reflectrm eval: {exc}", file=sys.stderr)
        return 2


def write_report(results_path: Path, out_dir: Path, resamples: int, seed: int) -> int:
    # Imported here so that `reflectrm --help` works without the eval extra (numpy).
    from reflectrm.evaluation.pairwise import report

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
        "share_samples": share,
        "max_tokens": max_tokens,
        "num_candidates": n,
        "seed": args.seed,
    }
    existing = records.load(results_path)

    def todo_for(run_modes: list[str]) -> list[Unit]:
        header["modes"] = run_modes
        units = plan(interleave(sampled), run_modes, both_orders, args.seed, n, max_tokens)
        todo = pending(units, (r.key for r in existing.records))
        print(
            f"{len(units)} judgments planned ({sum(len(s) for s in sampled)} pairs x "
            f"{2 if both_orders else 1} orders x {len(run_modes)} modes); "
            f"{len(units) - len(todo)} already in {results_path}; {len(todo)} to judge",
            file=sys.stderr,
        )
        refused = {u.pair.id: refusal(u) for u in todo if refusal(u)}
        if refused:
            first_id, why = next(iter(refused.items()))
            print(
                f"{len(refused)} pair(s) will be recorded as errors without judging, e.g. "
                f"{first_id!r}: {why}. The service refuses empty texts (HTTP 422) and the "
                "in-process judge applies the same rule; they score as no verdict",
                file=sys.stderr,
            )
        return todo

    if args.url:
        return asyncio.run(_judge_http(args, header, existing, results_path, modes, todo_for))
    todo = todo_for(modes)
    engine = resolve(settings.engine_config())  # resolved once, before judging and for the header
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


def _finish(
    writer: records.Writer, summary: RunSummary, share: bool, work: EngineWork | None = None
) -> None:
    row: dict[str, Any] = {
        "type": "run_end",
        "finished": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "judged": summary.judged,
        "errors": summary.errors,
        "retry_later": summary.retry_later,
        "seconds": round(summary.seconds, 1),
        "generated_tokens": summary.generated_tokens,
        "share_samples": share,
    }
    if work is not None:
        # What the engine was really asked for; the records' costs are each judgment's own.
        row["engine_work"] = work.as_dict()
    writer.write(row)


async def _judge_in_process(
    args: argparse.Namespace,
    settings: Any,
    engine_cfg: EngineConfig,
    header: dict[str, Any],
    results_path: Path,
    todo: list[Unit],
) -> RunSummary:
    share = bool(header["share_samples"])
    async with open_engine(engine_cfg) as engine:
        work = EngineWork()
        backend = EngineBackend(Judge(CountingEngine(engine, work), settings.judge_config()))
        with records.Writer(results_path) as writer:
            writer.write(header)
            progress = Progress(len(todo), enabled=not args.no_progress)
            summary = await run_units(todo, backend, writer, args.concurrency, progress, share)
            _finish(writer, summary, share, work)
    return summary


# The smallest real ablation judgment: one sample of at most 16 tokens, no reflection.
ABLATION_PROBE = {
    "prompt": "Is this request accepted?",
    "responses": ["Yes.", "No."],
    "mode": "reflect",
    "ablation": "anchor_only",
    "num_candidates": 1,
    "max_tokens": 16,
    "seed": 0,
}


async def served_model(client: Any, url: str) -> Any:
    """The model a running service at ``url`` serves (its GET /ready); UsageError when it cannot
    be reached or is not ready."""
    import httpx

    try:
        ready = await client.get(url.rstrip("/") + "/ready")
    except httpx.TransportError as exc:
        raise UsageError(f"cannot reach {url} ({type(exc).__name__}: {exc})") from None
    if ready.status_code != 200:
        raise UsageError(f"{url}/ready answered {ready.status_code}: {ready.text[:300]}")
    return ready.json().get("model")


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
    import httpx

    timeout = httpx.Timeout(args.timeout, connect=10.0)
    limits = httpx.Limits(max_connections=args.concurrency + 2)
    async with httpx.AsyncClient(timeout=timeout, limits=limits) as client:
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
            writer.write(header)
            progress = Progress(len(todo), enabled=not args.no_progress)
            backend = HttpBackend(client, args.url)
            summary = await run_units(todo, backend, writer, args.concurrency, progress)
            _finish(writer, summary, share=False)
    return summary
