"""The group workload of ``reflectrm eval --groups``: group rewards per design on group
benchmarks (best-of-N, Kendall tau, every chosen above every rejected, engine work per group),
resumable, in-process or over ``--url``. See ``runner`` for the pooled and direct paths."""

from __future__ import annotations

import argparse
import asyncio
import functools
import sys
from pathlib import Path
from typing import Any, cast

from reflectrm.judging.debias import Debias
from reflectrm.judging.groups import STRATEGIES, Strategy
from reflectrm_harness.evaluation import records
from reflectrm_harness.evaluation.common import (
    Progress,
    RunSummary,
    ServiceRefusedError,
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
from reflectrm_harness.evaluation.groups.data import Group, load_groups, sample_groups
from reflectrm_harness.evaluation.groups.runner import (
    GroupSettings,
    HttpGroups,
    Unit,
    design_plan,
    in_process_groups,
    load_rows,
    pool_plan,
    run_group_units,
)
from reflectrm_harness.portable import portable

GROUP_RESULTS = "group-results.jsonl"
GROUP_MODES = ("single", "vote", "reflect")
# Settings a group results file holds one value of (a rerun must match them to add to it).
GROUP_FINGERPRINT = (*records.FINGERPRINT_KEYS, "mode")
# One row of a group file (docs/schemas/groups.schema.json), as --help shows it.
EXAMPLE_ROW = (
    '{"id": "primes-1", "prompt": "Name a prime number larger than 10.", '
    '"completions": ["13", "12", "Eleven is prime, and so is 13."], "best": 2}'
)


def configure(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group(
        "group rewards (--groups)",
        "Evaluate group designs instead of pairs: --dataset names group files (rm-bench: its "
        "items regrouped, 3 chosen and 3 rejected styles each; a JSONL of rows with "
        "`completions` and `best` (an index) or `ranks` (one integer per completion, lower is "
        "better), `prompt` or `messages`, optional `id`, `reference`, `subset`, `meta`; RMB "
        "best-of-N files). A row: " + EXAMPLE_ROW + " (the schema: "
        "docs/schemas/groups.schema.json). --limit N takes N groups, --mode one of single, "
        "vote, reflect (default reflect).",
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
        raise UsageError(f"--groups takes one --mode of {', '.join(GROUP_MODES)}")
    return modes[0] if modes else "reflect"


def load_all(args: argparse.Namespace) -> tuple[dict[str, Any], list[Group]]:
    specs = args.dataset or ["rm-bench"]
    limit = None
    for value in args.limit or []:  # the last one counts
        try:
            limit = int(value.rpartition("=")[2])
        except ValueError:
            raise UsageError(f"--limit {value!r}: expected N") from None
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
    out_dir: Path = args.out_dir
    path = out_dir / GROUP_RESULTS

    @functools.cache
    def loaded() -> tuple[dict[str, Any], list[Group]]:
        return load_all(args)  # every group checked, before anything is judged

    return run_workload(
        args.score_only,
        lambda: judge_groups(args, path, *loaded()),
        lambda: write_report(path, out_dir, loaded()[1], args),
        lambda: f"\ninterrupted: records are saved in {path}; rerun to resume",
        # Any ValueError: a group file's own JSON, a setting the group options cannot take.
        (ValueError, ServiceRefusedError),
    )


def write_report(path: Path, out_dir: Path, groups: list[Group], args: argparse.Namespace) -> int:
    from reflectrm_harness.evaluation.groups import report as group_report

    runs, rows = load_rows(path)
    if not rows:
        say(f"reflectrm eval: no group records in {path}")
        return 1
    seed = int(next((r["seed"] for r in runs if r.get("type") == "run"), args.seed))
    built = group_report.build(groups, runs, rows, seed, args.bootstrap, 0)
    built["results_file"] = str(path)
    paths = group_report.write(built, out_dir)
    say(group_report.markdown(built), file=sys.stdout)
    for kind, p in paths.items():
        say(f"{kind}: {p}", file=sys.stdout)
    return 0


def judge_groups(
    args: argparse.Namespace, path: Path, sources: dict[str, Any], groups: list[Group]
) -> None:
    from reflectrm.settings import get_settings

    if args.concurrency < 1:
        raise UsageError("--concurrency must be at least 1")
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
        raise UsageError(
            "strategy reference is scored with --direct only (the pool holds completion pairs)"
        )
    runs, rows = load_rows(path)
    todo = pending(units, rows)
    header = run_header(
        args,
        what="groups",
        path="direct" if args.direct else "pooled",
        datasets=sources,
        sample_seed=args.sample_seed,
        designs=designs if args.direct else "all (scored from the pool)",
        debias=debiases,
        mode=gs.mode,
        num_candidates=gs.num_candidates,
        max_tokens=gs.max_tokens,
        seed=gs.seed,
        concurrency=args.concurrency,
    )
    kind = "designs served" if args.direct else "pool judgments"
    say(
        f"{len(units)} {kind} planned for {len(groups)} groups; {len(units) - len(todo)} "
        f"already in {path}; {len(todo)} to do"
    )
    if args.url:
        asyncio.run(_over_http(args, header, runs, path, gs, todo))
        return
    engine_cfg = engine_config(settings)
    header.update(engine_fingerprint(settings, engine_cfg, model_path=False))
    records.check_compatible(runs, header, path, GROUP_FINGERPRINT)
    if todo:
        asyncio.run(_in_process(args, settings, engine_cfg, header, path, gs, todo))


def _counts(summary: RunSummary) -> dict[str, Any]:
    """What a group ``run_end`` row counts; a transient failure is said, not recorded."""
    if summary.retry_later:
        say(f"{summary.retry_later} failed transiently and were not recorded; rerun to retry")
    return {
        "recorded": summary.recorded,
        "errors": summary.errors,
        "retry_later": summary.retry_later,
        "seconds": round(summary.seconds, 1),
    }


async def _in_process(
    args: argparse.Namespace,
    settings: Any,
    engine_cfg: Any,
    header: dict[str, Any],
    path: Path,
    gs: GroupSettings,
    todo: list[Unit],
) -> None:
    async with (
        counted_judge(engine_cfg, settings) as (judge, work),
        in_process_groups(settings, judge.engine) as backend,
    ):
        with records.Writer(path) as writer:
            writer.write(portable(header, Path.cwd()))
            progress = Progress(len(todo), not args.no_progress, unit="record")
            summary = await run_group_units(
                todo, backend, gs, writer.write, args.concurrency, progress
            )
            writer.write(run_end(_counts(summary), work))


async def _over_http(
    args: argparse.Namespace,
    header: dict[str, Any],
    runs: list[dict[str, Any]],
    path: Path,
    gs: GroupSettings,
    todo: list[Unit],
) -> None:
    async with http_client(args.timeout, args.concurrency) as client:
        model = await served_model(client, args.url)
        header.update({"backend": "http", "url": args.url, "model": model})
        records.check_compatible(runs, header, path, GROUP_FINGERPRINT)
        if not todo:
            return
        with records.Writer(path) as writer:
            writer.write(portable(header, Path.cwd()))
            progress = Progress(len(todo), not args.no_progress, unit="record")
            summary = await run_group_units(
                todo, HttpGroups(client, args.url), gs, writer.write, args.concurrency, progress
            )
            writer.write(run_end(_counts(summary)))
