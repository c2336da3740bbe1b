"""The load runner (loadtests/run.py, locust headless) against the live service: a handful of
judgments in every mode, each judged by the engine and answered 200."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import httpx

from loadtests.common.metrics import parse_metrics

ROOT = Path(__file__).resolve().parents[2]
SENT = 4


def counters(url: str) -> dict[str, float]:
    """The service's judgment requests by outcome and the engine's work so far, from /metrics."""
    text = httpx.get(f"{url}/metrics", timeout=30).text
    out: dict[str, float] = {}
    for (name, labels), value in parse_metrics(text, by="labels").items():
        if name == "reflectrm_judgments_total":
            key = f"judgments:{dict(labels)['outcome']}"
        elif name in (
            "reflectrm_engine_requests_total",
            "vllm:prompt_tokens_total",
            "vllm:generation_tokens_total",
        ):
            key = name
        else:
            continue
        out[key] = out.get(key, 0.0) + value
    return out


def test_load_runner_answers_every_request(live, tmp_path):
    before = counters(live.url)
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
        str(SENT),
        "--max-tokens",
        "32",  # the least the enforced format holds (23-24 tokens), with room for the analysis
        # Bodies no other test sends to the shared service: an identical call would be
        # answered from its cache, with no engine work to count.
        "--seed",
        "4242",
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
    assert summary["sent"] == SENT
    assert summary["recorded"] == SENT
    assert summary["lost"]["total"] == 0
    # Two users against a service that admits 64 at once: nothing is refused, every answer is a
    # judgment (a refusal with Retry-After is fine for the runner, not for this test).
    assert summary["answered"] == {"200": SENT}, report
    assert summary["judgments"] == SENT
    assert summary["refused_without_retry_after"] == {}
    # And the engine did the work: the service counted each as judged (a verdict or none) and
    # completed at least one engine request per judgment, which prefilled and generated tokens.
    after = counters(live.url)
    delta = {k: after[k] - before.get(k, 0.0) for k in after}
    judged = delta.get("judgments:verdict", 0) + delta.get("judgments:no_verdict", 0)
    assert judged == SENT, delta
    assert delta["reflectrm_engine_requests_total"] >= SENT, delta
    assert delta["vllm:prompt_tokens_total"] > 0, delta
    assert delta["vllm:generation_tokens_total"] > 0, delta
    assert summary["run"]["url"] == live.url
    assert not summary["run"]["started_service"]
    # locust's own files are kept beside the summary.
    for name in ("locust_stats.csv", "locust_failures.csv", "locust_stats.json", "locust.log"):
        assert (out / name).is_file(), name
    assert "requests sent:   4" in done.stdout
