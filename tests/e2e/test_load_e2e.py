"""The load runner (loadtests/run.py, locust headless) against the live service: a handful of
judgments in every mode, each answered."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_load_runner_answers_every_request(live, tmp_path):
    out = tmp_path / "load"
    command = [
        sys.executable,
        "-m",
        "loadtests.run",
        "--url",
        live.url,
        "--scenario",
        "mixed",  # reflect, single and vote
        "--users",
        "2",
        "--requests",
        "4",
        "--max-tokens",
        "16",
        "--duration",
        "300",
        "--request-timeout",
        "300",
        "--out",
        str(out),
    ]
    # A bound on the whole run, not a timed assertion.
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=1200)
    report = done.stdout + done.stderr
    assert done.returncode == 0, report

    summary = json.loads((out / "summary.json").read_text())
    assert summary["ok"], report
    assert summary["problems"] == [], report
    assert summary["sent"] == 4
    assert summary["recorded"] == 4
    assert summary["lost"]["total"] == 0
    assert sum(summary["answered"].values()) == 4
    assert all(s == "200" or s in ("429", "503") for s in summary["answered"]), report
    assert summary["refused_without_retry_after"] == {}
    assert summary["run"]["url"] == live.url
    assert not summary["run"]["started_service"]
    # locust's own files are kept beside the summary.
    for name in ("locust_stats.csv", "locust_failures.csv", "locust_stats.json", "locust.log"):
        assert (out / name).is_file(), name
    assert "requests sent:   4" in done.stdout
