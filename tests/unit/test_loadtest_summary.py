"""The load runner's classification and summary, on hand-made locust output; its request plan."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from loadtests import run, scenarios
from loadtests.summary import (
    classify,
    format_summary,
    percentile,
    read_failures,
    read_stats,
    retry_after_ok,
    summarize,
)

FAILURES_HEADER = "Method,Name,Error,Occurrences,First Seen,Last Seen\n"


def entry(name: str, response_times: dict[int, int], failures: int = 0, **extra) -> dict:
    """One entry as locust's --json-file writes it (response-time keys become strings)."""
    count = sum(response_times.values())
    return {
        "name": name,
        "method": "POST",
        "last_request_timestamp": 1000.0 + count,
        "start_time": 1000.0,
        "num_requests": count,
        "num_none_requests": 0,
        "num_failures": failures,
        "total_response_time": sum(ms * n for ms, n in response_times.items()),
        "max_response_time": max(response_times) + 0.4,
        "min_response_time": min(response_times),
        "total_content_length": 100 * count,
        "response_times": {str(ms): n for ms, n in response_times.items()},
        "num_reqs_per_sec": {},
        "num_fail_per_sec": {},
        **extra,
    }


def write_run(tmp_path: Path, entries: list[dict], failures_csv: str = "") -> tuple[Path, Path]:
    stats = tmp_path / "locust_stats.json"
    stats.write_text(json.dumps(entries))
    failures = tmp_path / "locust_failures.csv"
    failures.write_text(FAILURES_HEADER + failures_csv)
    return stats, failures


@pytest.mark.parametrize(
    ("status", "retry_after", "label"),
    [
        (200, None, "200"),
        (429, "5", "429"),
        (503, "Wed, 21 Oct 2026 07:28:00 GMT", "503"),
        (429, None, "429 without Retry-After"),
        (503, "", "503 without Retry-After"),
        (429, "soon", "429 without Retry-After"),
        (500, None, "500"),
        (504, "5", "504"),
        (413, None, "413"),
        (0, None, "lost"),
    ],
)
def test_classify(status, retry_after, label):
    assert classify(status, retry_after) == label


def test_retry_after_needs_seconds_or_a_date():
    assert retry_after_ok("0")
    assert retry_after_ok(" 120 ")
    assert not retry_after_ok("-1")
    assert not retry_after_ok("1.5")
    assert not retry_after_ok(None)


def test_percentile_follows_locusts_rule():
    # locust.stats.calculate_response_time_percentile gives the same values.
    assert percentile({100: 6, 200: 3, 900: 1}, 0.50) == 100
    assert percentile({100: 5, 200: 4, 900: 1}, 0.50) == 200
    assert percentile({100: 6, 200: 3, 900: 1}, 0.95) == 900
    assert percentile({100: 98, 200: 2}, 0.99) == 200
    assert percentile({}, 0.5) is None


def test_a_clean_run_with_refusals_passes(tmp_path):
    stats, failures = write_run(
        tmp_path,
        [
            entry("reflect 200", {9000: 3, 12000: 1}),
            entry("single 200", {1000: 2}),
            entry("reflect 429", {10: 5}, failures=5),
            entry("vote 503", {5: 1}, failures=1),
        ],
        "POST,reflect 429,\"CatchResponseError('refused: HTTP 429, Retry-After: 5')\",5,x,y\n"
        "POST,vote 503,\"CatchResponseError('refused: HTTP 503, Retry-After: 5')\",1,x,y\n",
    )
    counts = {"sent": 12, "first_sent": 1000.0, "last_done": 1012.0, "stopped_by": "request bound"}
    s = summarize(read_stats(stats), read_failures(failures), counts)

    assert s["ok"]
    assert s["problems"] == []
    assert s["sent"] == 12
    assert s["recorded"] == 12
    assert s["answered"] == {"200": 6, "429": 5, "503": 1}
    assert s["refused"] == {"429": 5, "503": 1}
    assert s["lost"] == {"total": 0, "no_response": 0, "unrecorded": 0}
    assert s["judgments"] == 6
    assert s["judgments_per_s"] == pytest.approx(0.5)
    # Percentiles over every answered judgment (both modes' histograms merged), and by mode.
    assert s["latency_ms"] == {"count": 6, "p50": 9000, "p95": 12000, "p99": 12000, "max": 12000.4}
    assert s["latency_ms_by_mode"]["single"]["p50"] == 1000
    assert s["latency_ms_by_mode"]["reflect"]["count"] == 4
    assert s["failures"][0] == {
        "name": "reflect 429",
        "error": "refused: HTTP 429, Retry-After: 5",
        "occurrences": 5,
    }
    text = format_summary(s)
    assert "requests sent:   12" in text
    assert "answered:        200: 6, 429: 5, 503: 1" in text
    assert "result: OK" in text


def test_lost_requests_server_errors_and_bare_refusals_fail_the_run(tmp_path):
    stats, failures = write_run(
        tmp_path,
        [
            entry("reflect 200", {9000: 2}),
            entry("reflect lost", {600000: 1}, failures=1),
            entry("reflect 500", {50: 1}, failures=1),
            entry("reflect 504", {900000: 1}, failures=1),
            entry("reflect 503", {5: 1}, failures=1),
            entry("reflect 429 without Retry-After", {5: 2}, failures=2),
            entry("single 413", {5: 1}, failures=1),
        ],
        "POST,reflect lost,\"ReadTimeout('Read timed out. (read timeout=600.0)')\",1,x,y\n",
    )
    # Two more were sent than locust recorded: cut off when the run stopped.
    counts = {"sent": 11, "first_sent": 1000.0, "last_done": 1010.0}
    s = summarize(read_stats(stats), read_failures(failures), counts)

    assert not s["ok"]
    assert s["lost"] == {"total": 3, "no_response": 1, "unrecorded": 2}
    assert s["answered"] == {"200": 2, "413": 1, "429": 2, "500": 1, "503": 1, "504": 1}
    assert s["refused_without_retry_after"] == {"429": 2}
    problems = "\n".join(s["problems"])
    assert "3 request(s) lost" in problems
    assert "server errors other than 503: 1 x 500, 1 x 504" in problems
    assert "refusals without a usable Retry-After: 2 x 429" in problems
    assert "1 x 413" in problems
    assert "x 503" not in problems  # a 503 with Retry-After is a deliberate refusal
    assert s["failures"][0]["error"] == "ReadTimeout('Read timed out. (read timeout=600.0)')"
    assert "result: FAIL" in format_summary(s)


def test_a_run_without_counts_or_requests_fails(tmp_path):
    stats, _ = write_run(tmp_path, [entry("reflect 200", {100: 1})])
    s = summarize(read_stats(stats), counts=None)
    assert not s["ok"]
    assert "unknown" in s["problems"][0]
    # Without the counts file, the elapsed time comes from locust's own timestamps.
    assert s["judgments_per_s"] == pytest.approx(1.0)
    assert not summarize([], counts={"sent": 0})["ok"]


def test_a_row_not_in_the_locustfiles_format_fails(tmp_path):
    stats, _ = write_run(tmp_path, [entry("/v1/judge", {100: 1})])
    s = summarize(read_stats(stats), counts={"sent": 1})
    assert s["unclassified"] == {"/v1/judge": 1}
    assert not s["ok"]


def test_request_bodies_are_a_function_of_their_number():
    pairs = scenarios.load_pairs(None, max_chars=1500, seed=3)
    modes = scenarios.SCENARIOS["mixed"].modes
    first = [scenarios.request_body(i, pairs, modes, 32, seed=3) for i in range(6)]
    again = [scenarios.request_body(i, pairs, modes, 32, seed=3) for i in range(6)]
    assert first == again
    assert [b["mode"] for b in first] == ["reflect", "single", "vote"] * 2
    assert [b["seed"] for b in first] == [3, 4, 5, 6, 7, 8]
    assert all(b["max_tokens"] == 32 and len(b["responses"]) == 2 for b in first)
    assert all(("prompt" in b) != ("messages" in b) for b in first)


def test_pairs_fall_back_to_built_in_ones_where_the_data_is_absent(tmp_path, monkeypatch):
    monkeypatch.setattr(scenarios, "DEFAULT_PAIRS", tmp_path / "absent.jsonl.gz")
    pairs = scenarios.load_pairs(None, max_chars=1500, seed=0)
    assert pairs.source == "built-in"
    assert len(pairs.rows) == len(scenarios.BUILTIN_PAIRS)
    body = scenarios.request_body(2, pairs, ("single",), 16, seed=0)
    assert sorted(body["responses"]) == sorted([pairs.rows[2]["chosen"], pairs.rows[2]["rejected"]])
    with pytest.raises(FileNotFoundError):
        scenarios.load_pairs(tmp_path / "missing.jsonl", max_chars=1500, seed=0)


def test_pairs_keep_only_short_ones(tmp_path):
    rows = [
        {"id": "a", "prompt": "q", "chosen": "x" * 10, "rejected": "y"},
        {"id": "b", "prompt": "q", "chosen": "x" * 5000, "rejected": "y"},
        {"id": "c", "prompt": "q", "chosen": " ", "rejected": "y"},  # empty after strip
    ]
    file = tmp_path / "pairs.jsonl"
    file.write_text("".join(json.dumps(r) + "\n" for r in rows))
    pairs = scenarios.load_pairs(file, max_chars=100, seed=0)
    assert [r["id"] for r in pairs.rows] == ["a"]
    with pytest.raises(ValueError, match="max-pair-chars"):
        scenarios.load_pairs(file, max_chars=5, seed=0)


@pytest.mark.parametrize("url", ["http://10.0.0.5:8000", "http://judge.example.com"])
def test_the_runner_refuses_a_remote_url_without_allow_remote(url):
    with pytest.raises(SystemExit):
        run.parse_args(["--url", url])
    assert run.parse_args(["--url", url, "--allow-remote"]).url == url
    assert run.parse_args(["--url", "http://127.0.0.1:8000"]).url == "http://127.0.0.1:8000"
