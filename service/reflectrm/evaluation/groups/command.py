"""``reflectrm eval --groups``: group rewards per design on group benchmarks (best-of-N,
Kendall tau, every chosen above every rejected, engine work per group), resumable, in-process
or over ``--url``. See ``group_run`` for the pooled and direct paths."""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import sys
from pathlib import Path, PurePath
from typing import Any, cast

from reflectrm.evaluation import records
from reflectrm.evaluation.groups.data import Group, load_groups, sample_groups
from reflectrm.evaluation.groups.runner import (
    GroupSettings,
    HttpGroups,
    InProcessGroups,
    Unit,
    design_plan,
    load_rows,
    pending,
    pool_plan,
    run_group_units,
)
from reflectrm.judging.debias import Debias
from reflectrm.judging.groups import STRATEGIES, Strategy
from reflectrm.pairs import DatasetError

GROUP_RESULTS = "group-results.jsonl"
GROUP_MODES = ("single", "vote", "reflect")
# Settings a group results file holds one value of (a rerun must match them to add to it).
GROUP_FINGERPRINT = (*records.FINGERPRINT_KEYS, "mode")


def _say(*parts: object, file: Any = None) -> None:
    """A line for the user (stderr unless told): what the command prints is its output."""
    (file or sys.stderr).write(" ".join(map(str, parts)) + "\n")


def configure(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group(
        "group rewards (--groups)",
        "Evaluate group designs instead of pairs: --dataset names group files (rm-bench: its "
        "items regrouped, 3 chosen and 3 rejected styles each; a JSONL of rows with "
        "`completions` and `best` or `ranks`; RMB best-of-N files). --limit N takes N groups, "
        "--mode one of single, vote, reflect (default reflect).",
    )
    g.add_argument("--groups", action="store_true", help="evaluate group rewards per design")
    g.add_argument(
        "--design",
        action="append",
        choices=[*STRATEGIES, "all"],
        help="a group design to score (repeatable; default all). reference needs groups with a "
        "`reference` answer and --direct",
    )
    g.add_argument(
        "--debias",
        choices=["none", "swap", "both"],
        default="both",
        help="group debias setting(s) to score (default both)",
    )
    g.add_argument(
        "--direct",
        action="store_true",
        help="run every design as the service serves it (own engine work per design) instead "
        "of scoring every design from one pool of pairwise judgments per group (every pair in "
        "both orders: round robin with swap, judged once)",
    )


def _designs(args: argparse.Namespace) -> list[Strategy]:
    chosen = args.design or ["all"]
    return (
        list(STRATEGIES) if "all" in chosen else cast(list[Strategy], list(dict.fromkeys(chosen)))
    )


def _debiases(args: argparse.Namespace) -> list[Debias]:
    return ["none", "swap"] if args.debias == "both" else [cast(Debias, args.debias)]


def _mode(args: argparse.Namespace) -> str:
    modes = [m for m in (args.mode or []) if m != "all"]
    if len(modes) > 1 or (modes and modes[0] not in GROUP_MODES):
        raise ValueError(f"--groups takes one --mode of {', '.join(GROUP_MODES)}")
    return modes[0] if modes else "reflect"


def load_all(args: argparse.Namespace) -> tuple[dict[str, Any], list[Group]]:
    specs = args.dataset or ["rm-bench"]
    limit = None
    for value in args.limit or []:
        limit = int(value.rpartition("=")[2])
    sources: dict[str, Any] = {}
    groups: list[Group] = []
    for spec in specs:
        source, loaded = load_groups(spec, args.data_dir)
        drawn = sample_groups(loaded, limit, args.sample_seed)
        sources[loaded[0].benchmark] = {
            "source": source,
            "groups": len(loaded),
            "sampled": len(drawn),
        }
        groups += drawn
    return sources, groups


def run(args: argparse.Namespace) -> int:
    from reflectrm.evaluation.pairwise.command import quiet_libraries
    from reflectrm.evaluation.pairwise.runner import ServiceRefusedError

    quiet_libraries(getattr(args, "verbose", False))
    out_dir: Path = args.out_dir
    path = out_dir / GROUP_RESULTS
    try:
        sources, groups = load_all(args)
        if not args.score_only:
            try:
                judge_groups(args, path, sources, groups)
            except KeyboardInterrupt:
                _say(
                    f"\ninterrupted: records are saved in {path}; rerun to resume", file=sys.stderr
                )
                return 130
        return write_report(path, out_dir, groups, args)
    except (DatasetError, ValueError, ServiceRefusedError) as exc:
        _say(f"reflectrm eval: {exc}")
        return 2


def write_report(path: Path, out_dir: Path, groups: list[Group], args: argparse.Namespace) -> int:
    from reflectrm.evaluation.groups import report as group_report

    runs, rows = load_rows(path)
    if not rows:
        _say(f"reflectrm eval: no group records in {path}")
        return 1
    seed = int(next((r["seed"] for r in runs if r.get("type") == "run"), args.seed))
    built = group_report.build(groups, runs, rows, seed, args.bootstrap, 0)
    built["results_file"] = str(path)
    paths = group_report.write(built, out_dir)
    _say(group_report.markdown(built), file=sys.stdout)
    for kind, p in paths.items():
        _say(f"{kind}: {p}", file=sys.stdout)
    return 0


def _check(existing: list[dict[str, Any]], header: dict[str, Any], path: Path) -> None:
    starts = [r for r in existing if r.get("type") == "run"]
    if not starts:
        return
    before = starts[0]
    diff = {
        k: (before.get(k), header.get(k))
        for k in GROUP_FINGERPRINT
        if before.get(k) is not None and header.get(k) is not None and before[k] != header[k]
    }
    if diff:
        shown = ", ".join(f"{k}: {a!r} in the file, {b!r} now" for k, (a, b) in diff.items())
        raise records.ResultsMismatchError(
            f"{path} was written with other settings ({shown}); use another --out-dir"
        )


def judge_groups(
    args: argparse.Namespace, path: Path, sources: dict[str, Any], groups: list[Group]
) -> None:
    from reflectrm.settings import get_settings

    if args.concurrency < 1:
        raise ValueError("--concurrency must be at least 1")
    # No background swap checks: the evaluation asks for exactly the judgments it records.
    settings = get_settings(model=args.model or None, swap_check_fraction=0.0)
    gs = GroupSettings(
        mode=_mode(args),  # type: ignore[arg-type]
        num_candidates=args.num_candidates or settings.num_candidates,
        max_tokens=args.max_tokens or settings.max_tokens,
        seed=args.seed,
    )
    designs, debiases = _designs(args), _debiases(args)
    units: list[Unit] = (
        list(design_plan(groups, designs, debiases))
        if args.direct
        else list(pool_plan(groups, gs.seed))
    )
    if not args.direct and "reference" in designs and len(designs) == 1:
        raise ValueError(
            "strategy reference is scored with --direct only (the pool holds completion pairs)"
        )
    runs, rows = load_rows(path)
    todo = pending(units, rows)
    header: dict[str, Any] = {
        "type": "run",
        "started": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "argv": getattr(args, "argv", None) or sys.argv[1:],
        "what": "groups",
        "path": "direct" if args.direct else "pooled",
        "datasets": sources,
        "sample_seed": args.sample_seed,
        "designs": designs if args.direct else "all (scored from the pool)",
        "debias": debiases,
        "mode": gs.mode,
        "num_candidates": gs.num_candidates,
        "max_tokens": gs.max_tokens,
        "seed": gs.seed,
        "concurrency": args.concurrency,
    }
    kind = "designs served" if args.direct else "pool judgments"
    _say(
        f"{len(units)} {kind} planned for {len(groups)} groups; {len(units) - len(todo)} "
        f"already in {path}; {len(todo)} to do",
        file=sys.stderr,
    )
    if args.url:
        asyncio.run(_over_http(args, header, runs, path, gs, todo))
        return
    from reflectrm.engines import resolve

    engine_cfg = resolve(settings.engine_config())
    header.update(
        {
            "backend": "in-process",
            "model": settings.served_model_name or PurePath(engine_cfg.model).name,
            "template_version": settings.template_version,
            "temperature": settings.temperature,
            "enforce_format": settings.enforce_format,
            "early_exit": settings.early_exit,
        }
    )
    _check(runs, header, path)
    if todo:
        asyncio.run(_in_process(args, settings, engine_cfg, header, path, gs, todo))


def _finish(writer: records.Writer, counts: Any, work: Any = None) -> None:
    row: dict[str, Any] = {
        "type": "run_end",
        "finished": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "recorded": counts.recorded,
        "errors": counts.errors,
        "retry_later": counts.retry_later,
        "seconds": round(counts.seconds, 1),
    }
    if work is not None:
        row["engine_work"] = work.as_dict()
    writer.write(row)
    if counts.retry_later:
        _say(
            f"{counts.retry_later} failed transiently and were not recorded; rerun to retry",
        )


def _progress(total: int, enabled: bool) -> Any:
    from tqdm import tqdm

    return tqdm(total=total, disable=not enabled, dynamic_ncols=True, mininterval=30.0)


async def _in_process(
    args: argparse.Namespace,
    settings: Any,
    engine_cfg: Any,
    header: dict[str, Any],
    path: Path,
    gs: GroupSettings,
    todo: list[Unit],
) -> None:
    from reflectrm.engines import open_engine
    from reflectrm.evaluation.pairwise.runner import CountingEngine, EngineWork
    from reflectrm.judging.judge import Judge
    from reflectrm.serving.service import JudgingService

    async with open_engine(engine_cfg) as engine:
        work = EngineWork()
        service = JudgingService(settings)
        service.serve_with(Judge(CountingEngine(engine, work), settings.judge_config()))
        try:
            with records.Writer(path) as writer:
                writer.write(header)
                progress = _progress(len(todo), not args.no_progress)
                counts = await run_group_units(
                    todo, InProcessGroups(service), gs, writer.write, args.concurrency, progress
                )
                progress.close()
                _finish(writer, counts, work)
        finally:
            await service.close("evaluation finished")


async def _over_http(
    args: argparse.Namespace,
    header: dict[str, Any],
    runs: list[dict[str, Any]],
    path: Path,
    gs: GroupSettings,
    todo: list[Unit],
) -> None:
    import httpx

    from reflectrm.evaluation.pairwise.command import served_model

    timeout = httpx.Timeout(args.timeout, connect=10.0)
    limits = httpx.Limits(max_connections=args.concurrency + 2)
    async with httpx.AsyncClient(timeout=timeout, limits=limits) as client:
        model = await served_model(client, args.url)
        header.update({"backend": "http", "url": args.url, "model": model})
        _check(runs, header, path)
        if not todo:
            return
        with records.Writer(path) as writer:
            writer.write(header)
            progress = _progress(len(todo), not args.no_progress)
            counts = await run_group_units(
                todo, HttpGroups(client, args.url), gs, writer.write, args.concurrency, progress
            )
            progress.close()
            _finish(writer, counts)
