"""The Markdown tables of docs/reliability.md from the JSON the runs wrote: a fuzz report
(tests/fuzzing.py's Tally) or overload reports (loadtests/overload.py), printed to stdout.

    .venv/bin/python scripts/reliability_tables.py fuzz docs/records/reliability-runs/fuzz-api.json
    .venv/bin/python scripts/reliability_tables.py overload \\
        docs/records/reliability-runs/overload-*.json
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any


def counts(statuses: Mapping[str, Any]) -> str:
    """``{"429": 28, "200": 12}`` as "200 × 12, 429 × 28" (numbers in numeric order)."""

    def key(item: tuple[str, Any]) -> tuple[int, str]:
        return (int(item[0]), "") if item[0].isdigit() else (1 << 30, item[0])

    return ", ".join(f"{s} × {n}" for s, n in sorted(statuses.items(), key=key)) or "none"


def fuzz_table(report: Mapping[str, Any]) -> str:
    rows = ["| operation (generation mode) | cases | statuses |", "|---|---:|---|"]
    totals: dict[str, int] = {}
    for key, statuses in report["statuses"].items():
        rows.append(f"| `{key}` | {sum(statuses.values())} | {counts(statuses)} |")
        for s, n in statuses.items():
            totals[s] = totals.get(s, 0) + n
    rows.append(f"| **all** | **{report['cases']}** | {counts(totals)} |")
    return "\n".join(rows)


def overload_row(r: Mapping[str, Any]) -> str:
    settings = ", ".join(s.replace("max_", "").replace("_judgments", "") for s in r["settings"])
    lost = r["lost"]
    if r.get("lost_reasons"):
        lost = f"{lost} ({', '.join(r['lost_reasons'])})"
    latency = r["latency_200_s"]
    wait = r["queue_wait"]
    mean = "–" if wait["mean_s"] is None else f"{wait['mean_s']} s"
    return (
        f"| {settings or 'defaults'} | {r['sent']} | {r['retries']} | "
        f"{counts(r['first_attempt_statuses'])} | {counts(r['final_statuses'])} | {lost} | "
        f"{r['attempts']} | {counts(r['retry_after_seen'])} | {r['seconds']} s | "
        f"{latency['p50']} / {latency['max']} s | {wait['admitted']} ({wait['waited_0s']} at 0 s), "
        f"mean {mean} |"
    )


def overload_table(reports: list[Mapping[str, Any]]) -> str:
    rows = [
        "| limits | sent | retries | first answers | final answers | lost | attempts "
        "| Retry-After (s × times) | wall | 200 latency p50 / max "
        "| admitted (at once), mean wait |",
        "|---|---:|---:|---|---|---:|---:|---|---:|---|---|",
    ]
    rows.extend(overload_row(r) for r in reports)
    return "\n".join(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("kind", choices=["fuzz", "overload"])
    parser.add_argument("files", nargs="+", type=Path)
    args = parser.parse_args()
    reports = [json.loads(f.read_text()) for f in args.files]
    if args.kind == "fuzz":
        text = "\n\n".join(fuzz_table(r) for r in reports)
    else:
        text = overload_table(reports)
    print(text)


if __name__ == "__main__":
    main()
