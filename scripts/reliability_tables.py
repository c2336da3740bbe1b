"""The Markdown tables of docs/reliability.md, rendered from the JSON the runs saved in
docs/records/reliability-runs/ (a fuzz report: tests/fuzzing.py's Tally; overload reports:
loadtests/overload.py; a keep-alive report: loadtests/keepalive.py; SIGKILL fault reports:
loadtests/faults.py), or taken from the Markdown report a run wrote beside its JSON
(studies/hostile_text.py, loadtests/fairness.py), never typed by hand.
tests/unit/test_reliability_tables.py fails when the page no longer holds them.

    .venv/bin/python -m scripts.reliability_tables [--write]
    .venv/bin/python -m scripts.reliability_tables fuzz FILE...
    .venv/bin/python -m scripts.reliability_tables overload FILE...

Without a kind, every table of the page is printed, each under its marker name; with
``--write`` each replaces the one between its markers in the page
(``<!-- reliability-NAME: start -->`` / ``end -->``). With a kind, the table of the given
files is printed (a new run, before it is saved and named in ``TABLES``).
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from scripts.generated import replace_between, report_table, table_row

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "reliability.md"
RUNS = ROOT / "docs" / "records" / "reliability-runs"


def counts(statuses: Mapping[str, Any]) -> str:
    """``{"429": 28, "200": 12}`` as "200 × 12, 429 × 28" (numbers in numeric order)."""

    def key(item: tuple[str, Any]) -> tuple[int, str]:
        return (int(item[0]), "") if item[0].isdigit() else (1 << 30, item[0])

    return ", ".join(f"{s} × {n}" for s, n in sorted(statuses.items(), key=key)) or "none"


def fuzz_table(report: Mapping[str, Any]) -> str:
    rows = ["| operation (generation mode) | cases | statuses |", "|---|---:|---|"]
    totals: dict[str, int] = {}
    for key, statuses in report["statuses"].items():
        rows.append(table_row([f"`{key}`", str(sum(statuses.values())), counts(statuses)]))
        for s, n in statuses.items():
            totals[s] = totals.get(s, 0) + n
    rows.append(table_row(["**all**", f"**{report['cases']}**", counts(totals)]))
    return "\n".join(rows)


def overload_row(r: Mapping[str, Any]) -> str:
    settings = ", ".join(s.replace("max_", "").replace("_judgments", "") for s in r["settings"])
    lost = r["lost"]
    if r.get("lost_reasons"):
        lost = f"{lost} ({', '.join(r['lost_reasons'])})"
    latency = r["latency_200_s"]
    wait = r["queue_wait"]
    mean = "–" if wait["mean_s"] is None else f"{wait['mean_s']} s"
    return table_row(
        [
            settings or "defaults",
            str(r["sent"]),
            str(r["retries"]),
            counts(r["first_attempt_statuses"]),
            counts(r["final_statuses"]),
            str(lost),
            str(r["attempts"]),
            counts(r["retry_after_seen"]),
            f"{r['seconds']} s",
            f"{latency['p50']} / {latency['max']} s",
            f"{wait['admitted']} ({wait['waited_0s']} at 0 s), mean {mean}",
        ]
    )


def overload_table(reports: Sequence[Mapping[str, Any]]) -> str:
    rows = [
        "| limits | sent | retries | first answers | final answers | lost | attempts "
        "| Retry-After (s × times) | wall | 200 latency p50 / max "
        "| admitted (at once), mean wait |",
        "|---|---:|---:|---|---|---:|---:|---|---:|---|---|",
    ]
    rows.extend(overload_row(r) for r in reports)
    return "\n".join(rows)


def keepalive_table(report: Mapping[str, Any]) -> str:
    """One column per wait: the requests that got no answer, of all sent after that wait."""
    by_wait: Mapping[str, Mapping[str, int]] = report["by_wait"]
    lost = {
        w: {k: n for k, n in a.items() if k.startswith("no answer")} for w, a in by_wait.items()
    }
    reasons = sorted({k.removeprefix("no answer: ") for a in lost.values() for k in a})
    sent = {sum(a.values()) for a in by_wait.values()}
    of = f", of {sent.pop()}" if len(sent) == 1 else ""
    label = "requests with no answer" + (
        f" ({', '.join(f'`{r}`' for r in reasons)})" if reasons else ""
    )
    waits = list(by_wait)
    rows = [
        table_row(["wait", *(f"{float(w):g} s" for w in waits)]),
        "|---|" + "---:|" * len(waits),
        table_row([label + of, *(str(sum(lost[w].values())) for w in waits)]),
    ]
    return "\n".join(rows)


# process kinds of a SIGKILL fault report, as (row label, what its name contains); the killed
# process itself is the first one the report lists
SIGKILL_ROWS = (
    ("`VLLM::Worker`", "VLLM::Worker"),
    ("`VLLM::EngineCore`", "VLLM::EngineCore"),
    ("multiprocessing's resource tracker", "resource_tracker"),
    ("the reaper (it exits last)", "reaper.py"),
)


def sigkill_table(reports: Sequence[Mapping[str, Any]]) -> str:
    """One column per fault report (loadtests/faults.py sigkill-*): the seconds each process
    was last seen alive after the SIGKILL, and when all had ended."""

    def lived(report: Mapping[str, Any], part: str) -> str:
        found = [s for k, s in report["after_kill"]["lived_on_s"].items() if part in k]
        return f"{max(found):.1f}" if found else "–"

    rows = [
        table_row(
            [
                "seconds after the SIGKILL, last seen alive",
                *(f"`{r['fault'].removeprefix('sigkill-')}`" for r in reports),
            ]
        ),
        "|---|" + "---:|" * len(reports),
        table_row(
            [
                "the killed process",
                *(lived(r, r["processes_at_kill"][0]["name"]) for r in reports),
            ]
        ),
    ]
    rows += [table_row([label, *(lived(r, part) for r in reports)]) for label, part in SIGKILL_ROWS]
    rows.append(
        table_row(
            [
                "**all ended within**",
                *(f"**{r['after_kill']['all_ended_within_s']:.1f}**" for r in reports),
            ]
        )
    )
    return "\n".join(rows)


def _fuzz(reports: Sequence[Mapping[str, Any]]) -> str:
    return "\n\n".join(fuzz_table(r) for r in reports)


def _keepalive(reports: Sequence[Mapping[str, Any]]) -> str:
    return "\n\n".join(keepalive_table(r) for r in reports)


KINDS: dict[str, Callable[[Sequence[Mapping[str, Any]]], str]] = {
    "fuzz": _fuzz,
    "overload": overload_table,
    "keepalive": _keepalive,
    "sigkill": sigkill_table,
}
# The page's tables: marker name -> (kind, the saved reports in docs/records/reliability-runs/)
TABLES: dict[str, tuple[str, tuple[str, ...]]] = {
    "fuzz-api": ("fuzz", ("fuzz-api.json",)),
    "fuzz-e2e": ("fuzz", ("fuzz-e2e.json",)),
    "overload": (
        "overload",
        (
            "overload-defaults-80.json",
            "overload-4-8.json",
            *(f"overload-4-8-retries-{n}.json" for n in (1, 2, 3, 4)),
        ),
    ),
    "keepalive": ("keepalive", ("keepalive.json",)),
    "sigkill": ("sigkill", ("sigkill-judge.json", "sigkill-serve.json")),
}
# Tables the runs wrote themselves, in their own Markdown reports (each made from the run's JSON
# beside it): marker name -> (the report under docs/records/, the line the table follows)
REPORTS: dict[str, tuple[str, str]] = {
    "hostile-text": ("hostile-text-verdict-moves/hostile_text.md", "SmolLM2-135M-Instruct"),
    "fairness-shares": ("tenant-fairness/fairness.md", "Light tenant `eval`"),
    "fairness-retries": ("tenant-fairness/fairness.md", "Retries:"),
}


def markers(name: str) -> tuple[str, str]:
    return f"<!-- reliability-{name}: start -->", f"<!-- reliability-{name}: end -->"


def _load(files: Sequence[Path]) -> list[Mapping[str, Any]]:
    return [json.loads(f.read_text()) for f in files]


def render(name: str) -> str:
    """The table between the markers of ``name``, from its saved reports."""
    if name in REPORTS:
        report, heading = REPORTS[name]
        return report_table(RUNS.parent / report, heading)
    kind, files = TABLES[name]
    return KINDS[kind](_load([RUNS / f for f in files])) + "\n"


def write(page: Path = PAGE) -> None:
    for name in [*TABLES, *REPORTS]:
        start, end = markers(name)
        replace_between(page, start, end, render(name))


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("kind", nargs="?", choices=sorted(KINDS))
    parser.add_argument("files", nargs="*", type=Path)
    parser.add_argument("--write", action="store_true", help=f"replace the tables in {PAGE.name}")
    args = parser.parse_args()
    if args.kind:
        if args.write or not args.files:
            parser.error("a kind takes files to print, and no --write")
        print(KINDS[args.kind](_load(args.files)))
    elif args.write:
        write()
    else:
        names = [*TABLES, *REPORTS]
        print("\n\n".join(f"{markers(n)[0]}\n{render(n)}" for n in names), end="")


if __name__ == "__main__":
    main()
