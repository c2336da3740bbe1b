"""docs/performance.md's tables of the judging benchmark (``python -m loadtests.bench``),
rendered from its saved run under docs/records/bench-service-vs-engine-limit/ (the run's own
``report.md`` and ``summary.json``; the dtype comparison's under ``dtype/``). Each table sits
between the page's markers ``<!-- performance-<name>: start -->`` and ``<!--
performance-<name>: end -->``; tests/unit/test_performance_tables.py fails when one no longer
matches its record. (The reward benchmark's tables are scripts/rewards_bench_results.py's.)

    .venv/bin/python -m scripts.performance_tables [--write]
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from scripts.generated import page_markers, report_rows, table_row, write_tables

ROOT = Path(__file__).resolve().parents[1]
RECORD = ROOT / "docs" / "records" / "bench-service-vs-engine-limit"
PAGE = ROOT / "docs" / "performance.md"
LEVELS = "| c | contender | judgments |"  # the start of the report's first table
CPU = "| c | contender | CPU s/judgment"
RATIOS = "| ratio (judgments/s)"
DTYPES = {"service": "bfloat16 (`auto`)", "service-f32": "float32"}


def markers(name: str) -> tuple[str, str]:
    return page_markers("performance", name)


def _by_header(rows: list[list[str]]) -> list[dict[str, str]]:
    return [dict(zip(rows[0], r, strict=True)) for r in rows[2:]]


def _table(head: list[str], rules: list[str], rows: list[list[str]]) -> str:
    return "\n".join(table_row(r) for r in [head, rules, *rows]) + "\n"


def dtype(record: Path = RECORD / "dtype") -> str:
    """bf16 (the service as ``auto`` picks) and float32, per level: the report's throughput and
    p50, and the engine processes' CPU seconds per judgment."""
    levels = _by_header(report_rows(record / "report.md", LEVELS))
    cpu = {(r["c"], r["contender"]): r for r in _by_header(report_rows(record / "report.md", CPU))}
    rows = [
        [
            r["c"],
            DTYPES.get(r["contender"], r["contender"]),
            r["judgments/s"],
            r["generated tok/s"],
            r["prompt tok/s"],
            r["p50 s"],
            cpu[(r["c"], r["contender"])]["engine processes"],
        ]
        for r in levels
    ]
    head = [
        "in flight",
        "dtype",
        "judgments/s",
        "generated tokens/s",
        "prompt tokens/s",
        "p50 s",
        "engine CPU s per judgment",
    ]
    return _table(head, ["---:", "---"] + ["---:"] * 5, rows)


def levels(record: Path = RECORD) -> str:
    """Per level and contender: throughput, latency and early exits (of the judgments; "–"
    for a peer, which has no early exit)."""
    run = json.loads((record / "summary.json").read_text())["run"]
    peers = {c["name"] for c in run["contenders"] if c["kind"] == "peer"}
    rows = [
        [
            r["c"],
            r["contender"],
            r["judgments/s"],
            r["generated tok/s"],
            r["prompt tok/s"],
            r["p50 s"],
            r["p95 s"],
            "–" if r["contender"] in peers else f"{r['early exits']} of {r['judgments']}",
        ]
        for r in _by_header(report_rows(record / "report.md", LEVELS))
    ]
    head = [
        "c",
        "contender",
        "judgments/s",
        "generated tok/s",
        "prompt tok/s",
        "p50 s",
        "p95 s",
        "early exits",
    ]
    return _table(head, ["---:", "---"] + ["---:"] * 6, rows)


def ratios(record: Path = RECORD) -> str:
    """The report's ratios of judgments/s between contenders, per level."""
    rows = report_rows(record / "report.md", RATIOS)
    return "\n".join(table_row(r) for r in rows) + "\n"


def cpu(record: Path = RECORD, level: str = "16") -> str:
    """CPU seconds per judgment at the top level: the serving process, every process under it
    (the engine) and the client."""
    rows = [
        [
            r["c"],
            r["contender"],
            r["CPU s/judgment: server process"],
            r["engine processes"],
            r["client"],
        ]
        for r in _by_header(report_rows(record / "report.md", CPU))
        if r["c"] == level
    ]
    head = ["c", "contender", "server process", "engine processes", "client"]
    return _table(head, ["---:", "---"] + ["---:"] * 3, rows)


def targets(record: Path = RECORD) -> str:
    """The run's targets (``summary.json``): the measured value, and by how much it fell short."""
    found = json.loads((record / "summary.json").read_text())["targets"]
    rows = [
        [
            t["target"],
            f"{t['value']:.4g}",
            "yes" if t["met"] else f"no, {t['short_by']:.2g} short",
        ]
        for t in found
    ]
    return _table(["target", "measured", "met"], ["---", "---:", "---"], rows)


TABLES: dict[str, Callable[[], str]] = {
    "dtype": dtype,
    "levels": levels,
    "ratios": ratios,
    "cpu": cpu,
    "targets": targets,
}


def main() -> None:
    write_tables(__doc__, PAGE, markers, TABLES)


if __name__ == "__main__":
    main()
