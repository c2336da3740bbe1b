"""``reflectrm eval``: its options and which workload runs them (benchmark pairs, or group designs
with ``--groups``)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from reflectrm.interrupts import run_command
from reflectrm.judging import defaults
from reflectrm_harness.evaluation import vs_length
from reflectrm_harness.evaluation.benchmarks import DATA_DIR_ENV
from reflectrm_harness.evaluation.common import configure_logging, quiet_libraries
from reflectrm_harness.evaluation.groups import command as groups
from reflectrm_harness.evaluation.pairwise import command as pairwise
from reflectrm_harness.evaluation.pairwise.command import DEFAULT_OUT_DIR, PRESETS, RESULTS_NAME
from reflectrm_harness.evaluation.pairwise.runner import EVAL_MODES


def configure(p: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """Add every ``reflectrm eval`` option to a parser."""
    data = p.add_argument_group("datasets")
    data.add_argument(
        "--dataset",
        action="append",
        metavar="SPEC",
        help="a dataset to run (repeatable): a benchmark name (rewardbench, rm-bench, rmb, "
        "judgebench, ppe) looked up in --data-dir, a JSONL file (gzip or plain) in the shared "
        "schema, or a Hugging Face dataset id for users who are online (allenai/reward-bench, "
        "THU-KEG/RM-Bench, ilgee/RMB-Pairwise, ScalerLab/JudgeBench, "
        "lmarena-ai/PPE-Human-Preference-V1). Prefix NAME= to say which benchmark a file holds "
        "(its official metric); any other NAME labels a dataset of your own, scored "
        "generically: accuracy overall and per `subset`, positional consistency and, for rows "
        "sharing a `group_id`, the group metric. A file that is no known benchmark is such a "
        "dataset under its file name. Every row is checked before judging starts. "
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
        help="judge a deterministic random sample of N pairs per dataset, or only of NAME (a "
        "benchmark or a label; repeatable, e.g. --limit 200 --limit judgebench=100). "
        "Default: every pair",
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
        choices=[*EVAL_MODES, "all"],
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
        help="N, the stage-1 samples of vote and ReflectRM (default REFLECTRM_NUM_CANDIDATES or "
        f"{defaults.NUM_CANDIDATES})",
    )
    judging.add_argument(
        "--max-tokens",
        metavar="N",
        type=int,
        help="generation limit per output (default REFLECTRM_MAX_TOKENS or "
        f"{defaults.MAX_TOKENS}, the paper's)",
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
        help="judgments in flight at once, so the engine batches them; with shared samples, "
        "pairs-in-one-order in flight, each with all its modes (default 8)",
    )
    judging.add_argument(
        "--no-share-samples",
        dest="share_samples",
        action="store_false",
        help="in-process only: sample stage 1 once per mode instead of once per pair and order. "
        "By default vote, vote_matched, ReflectRM and its ablations on the same pair and order "
        "start from one seeded stage-1 request (the largest N asked; the engine seeds sample i "
        "with seed+i, so smaller N are its first samples): the same results, less engine work",
    )
    backend = p.add_argument_group("where to judge")
    backend.add_argument(
        "--url",
        metavar="URL",
        help="judge through a running service (POST URL/v1/judge) instead of an own engine. "
        "Over HTTP each mode samples on its own (the API takes no precomputed samples), and "
        "the ablation modes need a service started with REFLECTRM_ALLOW_ABLATIONS=true (the "
        "API refuses them otherwise: they are for evaluation, not for serving); without it, "
        "--mode all skips them and naming one is an error before anything is judged",
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
    groups.configure(p)
    commands = p.add_subparsers(
        dest="eval_command",
        metavar="{vs-length}",
        help="vs-length: an evaluation's judge against length rules on the same pairs (longer "
        "wins; with --rule-from, the per-source rule fitted on training pairs), paired bootstrap "
        "over pairs. Without a command, judge and report",
    )
    vs_length.configure(
        commands.add_parser(
            "vs-length",
            help="an evaluation's judge against length rules on the same pairs",
            description=vs_length.__doc__,
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
    )
    out.add_argument(
        "-v",
        "--verbose",
        action="store_true",
        help="also show the libraries' informational logs (HTTP requests, the engine's)",
    )
    return p


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Register ``eval`` on the ``reflectrm`` command's subparsers; it calls ``run(args)``."""
    p = subparsers.add_parser(
        "eval",
        help="benchmark accuracy and positional consistency, in the paper's layout",
        description="Judge benchmark pairs, or any pairwise file in the shared schema, with the "
        "service's judging code (own engine or --url), append each judgment to "
        "OUT_DIR/results.jsonl as it finishes (a rerun resumes), and write report.json, "
        "report.md (the paper's Tables 1, 2 and 5; a table per dataset of your own; "
        "swap-debiased rows beside the plain ones) and report.png. A pair with an empty turn or "
        "response is not judged: the service refuses it (422), and in-process evaluation "
        "follows the same rule; it is recorded as an error and scored as no verdict.",
    )
    configure(p)
    p.set_defaults(func=run)
    return p


def main(argv: list[str] | None = None) -> int:
    parser = configure(argparse.ArgumentParser(prog="reflectrm eval"))
    configure_logging()
    args = parser.parse_args(argv)
    args.argv = sys.argv[1:] if argv is None else list(argv)
    return run_command(lambda: run(args))


def run(args: argparse.Namespace) -> int:
    """``reflectrm eval``: ``vs-length``, group designs with ``--groups``, benchmark pairs
    otherwise."""
    quiet_libraries(getattr(args, "verbose", False))
    if getattr(args, "eval_command", None) == "vs-length":
        return vs_length.run(args)
    if getattr(args, "groups", False):
        return groups.run(args)
    return pairwise.run(args)
