"""How each response is classified, and the run's summary from locust's CSV files.

Every request must end in a 200, or in a deliberate refusal: 429 (too many judgments in flight)
or 503 (engine loading or stopped) carrying a usable Retry-After. The locustfile names each
request's stats row ``"<mode> <label>"`` with the label from :func:`classify`, so locust's
``*_stats.csv`` alone tells the outcomes apart; ``*_failures.csv`` adds the error texts, and the
locustfile's counts file (requests sent, recorded, still in flight when locust stopped) tells
what never got an outcome.

Nothing here imports locust.
"""

from __future__ import annotations

import csv
import email.utils
import json
import re
import statistics
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

LOST = "lost"
NO_RETRY_AFTER = "without Retry-After"
REFUSALS = (429, 503)
PERCENTILES = (0.50, 0.95, 0.99)


def retry_after_ok(value: str | None) -> bool:
    """A Retry-After a client can act on: delay-seconds, or an HTTP date."""
    if value is None or not value.strip():
        return False
    text = value.strip()
    if text.isdigit():
        return True
    try:
        return email.utils.parsedate_to_datetime(text) is not None
    except (TypeError, ValueError):
        return False


def retry_after_seconds(value: str | None, default: float) -> float:
    """The wait a Retry-After asks for, or ``default`` where it is not delay-seconds."""
    if value is not None and value.strip().isdigit():
        return float(value.strip())
    return default


def classify(status: int, retry_after: str | None) -> str:
    """The outcome label of one response; status 0 is locust's "no response"."""
    if status == 0:
        return LOST
    if status in REFUSALS and not retry_after_ok(retry_after):
        return f"{status} {NO_RETRY_AFTER}"
    return str(status)


def row_name(mode: str, label: str) -> str:
    return f"{mode} {label}"


@dataclass(frozen=True)
class Entry:
    """One stats entry of locust's ``--json-file`` output: one locustfile row name."""

    name: str
    count: int
    failures: int
    # Response time (ms, rounded as locust rounds it) -> number of requests.
    response_times: Mapping[int, int]
    start_time: float | None = None
    last_request_timestamp: float | None = None
    max_ms: float | None = None

    @property
    def mode(self) -> str:
        return self.name.split(" ", 1)[0]

    @property
    def label(self) -> str:
        parts = self.name.split(" ", 1)
        return parts[1] if len(parts) == 2 else ""

    @property
    def status(self) -> int | None:
        """The HTTP status, None for a lost request or a name not in the locustfile's format."""
        head = self.label.split(" ", 1)[0]
        return int(head) if head.isdigit() and len(head) == 3 else None


def read_stats(path: Path) -> list[Entry]:
    """The entries of locust's ``--json-file`` output (written when locust shuts down)."""
    return [
        Entry(
            name=str(e["name"]),
            count=int(e["num_requests"]),
            failures=int(e["num_failures"]),
            response_times={int(k): int(v) for k, v in (e.get("response_times") or {}).items()},
            start_time=e.get("start_time"),
            last_request_timestamp=e.get("last_request_timestamp"),
            max_ms=e.get("max_response_time"),
        )
        for e in json.loads(path.read_text())
    ]


def percentile(response_times: Mapping[int, int], fraction: float) -> float | None:
    """Locust's own percentile rule (``stats.calculate_response_time_percentile``), over a
    histogram that may merge several entries."""
    total = sum(response_times.values())
    if not total:
        return None
    below = int(total * fraction)
    seen = 0
    for ms in sorted(response_times, reverse=True):
        seen += response_times[ms]
        if total - seen <= below:
            return float(ms)
    return 0.0


def latency(entries: Iterable[Entry]) -> dict[str, Any]:
    """Count, p50/p95/p99 (locust's rounded response times) and max, over ``entries`` merged."""
    entries = list(entries)
    merged: dict[int, int] = {}
    for e in entries:
        for ms, n in e.response_times.items():
            merged[ms] = merged.get(ms, 0) + n
    out: dict[str, Any] = {"count": sum(merged.values())}
    out.update({f"p{round(q * 100)}": percentile(merged, q) for q in PERCENTILES})
    maxima = [
        e.max_ms if e.max_ms is not None else max(e.response_times, default=0) for e in entries
    ]
    out["max"] = round(float(max(maxima)), 1) if maxima else None
    return out


def latency_summary(seconds: Iterable[float]) -> dict[str, Any]:
    """Count, median, mean, least and most of latencies in seconds (rounded to 0.01 s)."""
    values = sorted(seconds)
    if not values:
        return {"n": 0, "p50_s": None, "mean_s": None, "max_s": None, "min_s": None}
    return {
        "n": len(values),
        "p50_s": round(statistics.median(values), 2),
        "mean_s": round(statistics.fmean(values), 2),
        "min_s": round(values[0], 2),
        "max_s": round(values[-1], 2),
    }


def _error_text(error: str) -> str:
    """The locustfile's own text, without locust's ``CatchResponseError('...')`` around it."""
    match = re.fullmatch(r"CatchResponseError\((['\"])(.*)\1\)", error, flags=re.DOTALL)
    return match.group(2) if match else error


def read_failures(path: Path) -> list[dict[str, Any]]:
    """The rows of locust's ``*_failures.csv``: stats row name, error text, occurrences."""
    if not path.is_file():
        return []
    with path.open(newline="") as f:
        return [
            {
                "name": r["Name"],
                "error": _error_text(r["Error"]),
                "occurrences": int(r["Occurrences"]),
            }
            for r in csv.DictReader(f)
        ]


def _add(counter: dict[str, int], key: str, n: int) -> None:
    counter[key] = counter.get(key, 0) + n


def summarize(
    entries: Iterable[Entry],
    failures: Iterable[Mapping[str, Any]] = (),
    counts: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The run's outcome: requests sent, answered by status, lost, judgments/s, latencies of the
    answered judgments (all, and by mode), and the problems that make the run fail.

    ``counts`` is the locustfile's counts file: requests sent, and the wall-clock times of the
    first request sent and the last one done.
    """
    entries = list(entries)
    by_status: dict[str, int] = {}
    without_retry_after: dict[str, int] = {}
    unclassified: dict[str, int] = {}
    no_response = 0
    for e in entries:
        if e.label == LOST:
            no_response += e.count
        elif e.status is None:
            _add(unclassified, e.name, e.count)
        else:
            _add(by_status, str(e.status), e.count)
            if e.label.endswith(NO_RETRY_AFTER):
                _add(without_retry_after, str(e.status), e.count)
    answered = [e for e in entries if e.status == 200]
    recorded = sum(e.count for e in entries)
    sent = int(counts["sent"]) if counts and counts.get("sent") is not None else None
    unrecorded = max(0, sent - recorded) if sent is not None else 0
    judgments = by_status.get("200", 0)
    elapsed = _elapsed(counts, entries)
    summary: dict[str, Any] = {
        "sent": sent,
        "recorded": recorded,
        "answered": dict(sorted(by_status.items())),
        "refused": {s: n for s, n in sorted(by_status.items()) if int(s) in REFUSALS},
        "refused_without_retry_after": without_retry_after,
        "lost": {
            "total": no_response + unrecorded,
            "no_response": no_response,
            "unrecorded": unrecorded,
        },
        "unclassified": unclassified,
        "judgments": judgments,
        "elapsed_s": elapsed,
        "judgments_per_s": judgments / elapsed if elapsed else None,
        "latency_ms": latency(answered) if answered else None,
        "latency_ms_by_mode": {
            mode: latency(e for e in answered if e.mode == mode)
            for mode in sorted({e.mode for e in answered})
        },
        "failures": [dict(f) for f in failures],
        "stopped_by": (counts or {}).get("stopped_by"),
    }
    summary["problems"] = problems(summary)
    summary["ok"] = not summary["problems"]
    return summary


def _elapsed(counts: Mapping[str, Any] | None, entries: list[Entry]) -> float | None:
    """Seconds from the first request sent to the last one done: from the counts file, else
    from locust's entries."""
    if counts and counts.get("first_sent") is not None and counts.get("last_done") is not None:
        start, end = float(counts["first_sent"]), float(counts["last_done"])
    else:
        starts = [e.start_time for e in entries if e.start_time is not None]
        ends = [e.last_request_timestamp for e in entries if e.last_request_timestamp is not None]
        if not starts or not ends:
            return None
        start, end = min(starts), max(ends)
    return end - start if end > start else None


def problems(summary: Mapping[str, Any]) -> list[str]:
    """Why the run fails; empty when every request ended in 200 or a deliberate refusal."""
    out = []
    if summary["sent"] is None:
        out.append("the locustfile wrote no request counts: how many requests were sent is unknown")
    elif summary["sent"] == 0:
        out.append("no request was sent")
    lost = summary["lost"]
    if lost["total"]:
        out.append(
            f"{lost['total']} request(s) lost: {lost['no_response']} without a response "
            f"(connection error or timeout), {lost['unrecorded']} sent but never recorded "
            "(cut off when the run stopped)"
        )
    answered = summary["answered"]
    server_errors = {s: n for s, n in answered.items() if s.startswith("5") and s != "503"}
    if server_errors:
        out.append(f"server errors other than 503: {_counts(server_errors)}")
    if summary["refused_without_retry_after"]:
        counted = _counts(summary["refused_without_retry_after"])
        out.append(f"refusals without a usable Retry-After: {counted}")
    others = {
        s: n
        for s, n in summary["answered"].items()
        if s != "200" and int(s) not in REFUSALS and not s.startswith("5")
    }
    if others:
        out.append(
            f"answers other than 200 or a refusal: {_counts(others)} (the load test's requests "
            "should all be valid; see the 'not 200' lines)"
        )
    if summary["unclassified"]:
        out.append(f"stats rows not in the locustfile's format: {_counts(summary['unclassified'])}")
    return out


def _counts(counter: Mapping[str, int]) -> str:
    return ", ".join(f"{n} x {k}" for k, n in counter.items())


def _fmt_ms(value: float | None) -> str:
    return "-" if value is None else f"{value:,.0f}"


def format_summary(summary: Mapping[str, Any], header: Iterable[str] = ()) -> str:
    """The summary as the runner prints it."""
    lines = list(header)
    sent = summary["sent"]
    lines.append(f"requests sent:   {'unknown' if sent is None else sent}")
    answered = summary["answered"]
    text = ", ".join(f"{s}: {n}" for s, n in answered.items()) or "none"
    lines.append(f"answered:        {text}")
    if summary["refused_without_retry_after"]:
        lines.append(
            f"  of which refusals without Retry-After: "
            f"{_counts(summary['refused_without_retry_after'])}"
        )
    lost = summary["lost"]
    lines.append(
        f"lost:            {lost['total']} (no response {lost['no_response']}, "
        f"never recorded {lost['unrecorded']})"
    )
    per_s = summary["judgments_per_s"]
    elapsed = summary["elapsed_s"]
    lines.append(
        f"judgments/s:     {'-' if per_s is None else f'{per_s:.3f}'}"
        f" ({summary['judgments']} judgments"
        + ("" if elapsed is None else f" in {elapsed:.1f} s")
        + ")"
    )
    if summary["latency_ms"]:
        lines.append("latency of answered judgments (ms):")
        rows = [("all", summary["latency_ms"])]
        if len(summary["latency_ms_by_mode"]) > 1:
            rows += list(summary["latency_ms_by_mode"].items())
        for name, lat in rows:
            lines.append(
                f"  {name:<8} n={lat['count']:<4} p50 {_fmt_ms(lat['p50'])}  "
                f"p95 {_fmt_ms(lat['p95'])}  p99 {_fmt_ms(lat['p99'])}  max {_fmt_ms(lat['max'])}"
            )
    for f in summary["failures"]:
        lines.append(f"not 200: {f['occurrences']} x {f['name']}: {f['error']}")
    if summary["ok"]:
        lines.append("result: OK, every request answered 200 or refused with Retry-After")
    else:
        lines.extend(f"result: FAIL, {p}" for p in summary["problems"])
    return "\n".join(lines)
