"""The reward benchmark's tables (``python -m loadtests.bench rewards``), rendered from its saved
summary: the run's own report.md, and docs/performance.md's section between its
``rewards-bench`` markers from the copy under docs/records/bench-rewards/.
tests/unit/test_rewards_bench_results.py fails when the page no longer holds them.

    .venv/bin/python -m scripts.rewards_bench_results [--write]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from loadtests.rewards_report import render
from scripts.generated import replace_between

ROOT = Path(__file__).resolve().parents[1]
RECORD = ROOT / "docs" / "records" / "bench-rewards"
PAGE = ROOT / "docs" / "performance.md"
START, END = "<!-- rewards-bench: start -->", "<!-- rewards-bench: end -->"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--write", action="store_true", help="replace the page's section")
    args = p.parse_args()
    body = render(json.loads((RECORD / "summary.json").read_text()))
    if args.write:
        replace_between(PAGE, START, END, body)
    else:
        print(body, end="")


if __name__ == "__main__":
    main()
