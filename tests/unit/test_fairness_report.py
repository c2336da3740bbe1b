"""The fairness load script's pure pieces: metrics parsing, counter changes, gauge summaries, the
headline and the Markdown table, on hand-made input."""

from __future__ import annotations

from loadtests.common.metrics import by_label, parse_metrics
from loadtests.fairness import (
    delta,
    engine_requests,
    gauge_summary,
    headline,
    markdown,
    queued_seconds,
    reused,
    statuses,
)
from loadtests.summary import latency_summary

SCRAPE = """\
# HELP reflectrm_engine_requests_total Completed engine requests.
# TYPE reflectrm_engine_requests_total counter
reflectrm_engine_requests_total{stage="rollouts"} 30.0
reflectrm_engine_requests_total{stage="reflections"} 4.0
reflectrm_reused_answers_total{how="joined"} 2.0
reflectrm_reused_answers_total{how="cached"} 0.0
reflectrm_judgments_queued 7.0
reflectrm_tenant_judgments_queued{tenant="eval"} 1.0
reflectrm_tenant_judgments_queued{tenant="trainer"} 96.0
vllm:num_requests_running{engine="0"} 4.0
"""


def test_parse_metrics_keeps_the_judges_series_as_written():
    m = parse_metrics(SCRAPE, "reflectrm_")
    assert m['reflectrm_engine_requests_total{stage="rollouts"}'] == 30.0
    assert m["reflectrm_judgments_queued"] == 7.0
    assert not any(k.startswith("vllm:") for k in m)
    assert by_label(m, "reflectrm_tenant_judgments_queued", "tenant") == {
        "eval": 1.0,
        "trainer": 96.0,
    }
    assert by_label(m, "reflectrm_judgments_queued", "") == {"": 7.0}


def test_delta_counts_engine_requests_and_reuse_between_scrapes():
    before = parse_metrics(SCRAPE, "reflectrm_")
    after = dict(before)
    after['reflectrm_engine_requests_total{stage="rollouts"}'] = 54.0
    after['reflectrm_reused_answers_total{how="joined"}'] = 50.0
    after["reflectrm_judgments_queued"] = 0.0  # a gauge: not a counter, left out
    change = delta(after, before)
    assert change == {
        'reflectrm_engine_requests_total{stage="rollouts"}': 24.0,
        'reflectrm_reused_answers_total{how="joined"}': 48.0,
    }
    assert engine_requests(change) == 24
    assert reused(change) == {"joined": 48, "cached": 0}


def test_queued_seconds_and_gauge_summary_from_samples():
    samples = [
        {"t": 0.0, "queued": {"trainer": 116}, "in_flight": {"trainer": 4}},
        {"t": 0.5, "queued": {"trainer": 115, "eval": 1}, "in_flight": {"trainer": 4}},
        {"t": 1.0, "queued": {"trainer": 115}, "in_flight": {"trainer": 3, "eval": 1}},
        {"t": 1.5, "queued": {"eval": 1}, "in_flight": {"trainer": 4}},
        {"t": 2.0, "queued": {}, "in_flight": {}},
    ]
    assert queued_seconds(samples, "eval") == 1.0
    assert queued_seconds(samples, "nobody") == 0.0
    g = gauge_summary(samples)
    assert g["samples"] == 5
    assert g["interval_s"] == 0.5
    assert g["tenants"]["eval"] == {
        "max_queued": 1,
        "max_in_flight": 1,
        "seconds_with_one_queued": 1.0,
    }
    assert g["tenants"]["trainer"]["max_queued"] == 116


def test_latency_summary_and_statuses():
    assert latency_summary([3.0, 1.0, 2.0]) == {
        "n": 3,
        "p50_s": 2.0,
        "mean_s": 2.0,
        "min_s": 1.0,
        "max_s": 3.0,
    }
    assert latency_summary([])["p50_s"] is None
    calls = [{"status": 200}, {"status": 200}, {"status": 429}, {"status": None}]
    assert statuses(calls) == {"200": 2, "429": 1, "lost": 1}


def report() -> dict:
    def light(p50: float, mx: float, n: int) -> dict:
        return {"n": n, "p50_s": p50, "mean_s": p50, "min_s": p50, "max_s": mx}

    def flood(per_s: float) -> dict:
        return {
            "sent": 120,
            "answered": 120,
            "seconds": 100.0,
            "judgments_per_s": per_s,
            "latency": light(50.0, 100.0, 120),
        }

    def retries(sent: int, engine: int, joined: int, cached: int) -> dict:
        return {
            "sent": sent,
            "seconds": 10.0,
            "engine_requests": engine,
            "reused": {"joined": joined, "cached": cached},
            "engine_requests_per_answered_call": round(engine / sent, 3),
            "statuses": {"200": sent},
        }

    return {
        "machine": {"cpus": 2},
        "model": "m",
        "sizes": {
            "flood": 120,
            "light": 8,
            "retry_calls": 24,
            "copies": 3,
            "mode": "single",
            "max_tokens": 24,
            "max_concurrent_judgments": 4,
        },
        "phases": {
            "alone": {"light": {"latency": light(1.0, 1.5, 8)}},
            "fair": {
                "light": {
                    "latency": light(2.0, 3.0, 8),
                    "during_flood": light(2.0, 3.0, 8),
                    "queued_s_per_call": 0.5,
                },
                "flood": flood(1.2),
            },
            "fifo": {
                "light": {"latency": light(1.0, 90.0, 8), "during_flood": light(90.0, 90.0, 1)},
                "flood": flood(1.25),
            },
            "retries_once": retries(24, 24, 0, 0),
            "retries_racing": retries(72, 24, 48, 0),
            "retries_repeat": retries(24, 0, 0, 24),
        },
        "statuses": {"200": 400},
        "all_200": True,
        "ready_after_s": 100.0,
        "phases_seconds": 300.0,
    }


def test_headline_compares_the_light_tenant_with_its_latency_alone():
    h = headline(report())
    assert h["light_alone"] == {"p50_s": 1.0, "max_s": 1.5}
    assert h["light_fair"]["p50_vs_alone"] == 2.0
    assert h["light_fifo"]["p50_vs_alone"] == 90.0
    assert h["light_fifo"]["calls_during_flood"] == 1
    assert h["engine_requests_per_call_once"] == 1.0
    assert h["engine_requests_per_call_racing"] == 0.333
    assert h["engine_requests_per_call_repeat"] == 0.0
    assert h["all_200"] is True


def test_headline_without_the_fifo_phase():
    r = report()
    del r["phases"]["fifo"]
    assert "light_fifo" not in headline(r)


def test_markdown_has_a_row_per_phase():
    text = markdown(report())
    rows = [line for line in text.splitlines() if line.startswith("| ")]
    assert rows[1].startswith("| alone (no flood) | – (8 calls) | 1 s | 1.5 s | 1 |")
    assert rows[2].startswith("| flood, own tenant (fair) | 8 of 8 | 2 s | 3 s | 2 | 0.5 |")
    assert rows[3].startswith("| flood, same tenant (FIFO) | 1 of 8 | 90 s | 90 s | 90 | – |")
    assert "| racing | 72 | 72 | 24 | 48 | 0 | 0.333 | 10 s |" in rows
    assert "| repeat | 24 | 24 | 0 | 0 | 24 | 0 | 10 s |" in rows
    assert "all 200: yes" in text
