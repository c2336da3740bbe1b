"""Fair shares and retries, measured on the real service (its vLLM engine, the default model).

Starts ``reflectrm serve`` on a free loopback port (or uses ``--url``), runs bounded phases, writes
``fairness.json`` and ``fairness.md`` (a table made from the JSON) to ``--out``, and stops the
service (SIGINT first, by its pid):

- ``alone``: the light tenant ("eval") sends ``--light`` judgments one after another, nothing else
  running: its latency without a flood.
- ``fair``: the heavy tenant ("trainer") sends ``--flood`` judgments at once; once they are queued,
  "eval" sends its ``--light`` judgments one after another, under its own tenant name. Fair queuing
  serves it within a round however much "trainer" has queued.
- ``fifo`` (unless ``--no-fifo``): the same, but "eval" sends under the name "trainer", so that both
  share one first-come-first-served queue: what the light tenant would get without fair queuing.
- ``retries_once``: ``--retry-calls`` distinct judgments, each sent once, all at once.
- ``retries_racing``: as many other distinct judgments, each sent ``--copies`` times at once (a
  trainer's retries racing the first try); identical calls in flight are joined.
- ``retries_repeat``: ``retries_once``'s calls sent again after they were answered (the cache).

Light latencies are client-side; the per-tenant gauges (``reflectrm_tenant_judgments_queued`` and
``_in_flight``) are sampled from ``/metrics`` during the flood phases, and every phase records the
change of the judge's counters (engine requests by stage, reused answers, admissions by tenant,
queue waits). Every call's status is counted; the run is good when all are 200.

    flock /tmp/reflectrm-engine.lock env PYTHONPATH=service .venv/bin/python -m loadtests.fairness \
        --out docs/records/tenant-fairness
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import json
import os
import sys
import time
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import httpx

if __package__ in (None, ""):  # run as a script: make the repo importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from loadtests.common.metrics import by_label, parse_metrics
from loadtests.common.process import RunError, served
from loadtests.summary import latency_summary

ROOT = Path(__file__).resolve().parents[1]
PAIR = {
    "prompt": "What is the capital of France?",
    "responses": ["The capital of France is Paris.", "The capital of France is Berlin."],
}
HEAVY, LIGHT = "trainer", "eval"
TENANT_HEADER = "X-Reflectrm-Tenant"
# Seeds per phase: no call of one phase is identical to a call of another (the answer cache
# would answer it), except retries_repeat, which repeats retries_once on purpose.
SEED_BASE = {
    "warmup": 0,
    "alone": 1000,
    "fair_flood": 2000,
    "fair_light": 3000,
    "fifo_flood": 4000,
    "fifo_light": 5000,
    "retries_once": 6000,
    "retries_racing": 7000,
}
# The judge's counters whose change each phase records.
COUNTERS = (
    "reflectrm_engine_requests_total",
    "reflectrm_reused_answers_total",
    "reflectrm_tenant_judgments_admitted_total",
    "reflectrm_refusals_total",
    "reflectrm_queue_wait_seconds_sum",
    "reflectrm_queue_wait_seconds_count",
)

# --- pure helpers (unit-tested) -------------------------------------------------------------


def delta(after: Mapping[str, float], before: Mapping[str, float]) -> dict[str, float]:
    """Change of each of the COUNTERS' series between two scrapes (zeros left out)."""
    out = {}
    for series, value in after.items():
        if series.partition("{")[0] not in COUNTERS:
            continue
        change = round(value - before.get(series, 0.0), 6)
        if change:
            out[series] = change
    return out


def queued_seconds(samples: Sequence[Mapping[str, Any]], tenant: str) -> float:
    """Time the tenant had at least one judgment queued, from gauge samples ``{"t": seconds,
    "queued": {tenant: n}}`` in time order: each interval counts when the sample opening it
    showed one queued (so the estimate is good to about one sampling interval per wait)."""
    total = 0.0
    for here, there in itertools.pairwise(samples):
        if here["queued"].get(tenant, 0) >= 1:
            total += there["t"] - here["t"]
    return round(total, 2)


def gauge_summary(samples: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Per tenant: the most queued and in flight seen, and the time with one queued or more."""
    tenants = sorted({t for s in samples for t in (*s["queued"], *s["in_flight"])})
    return {
        "samples": len(samples),
        "interval_s": round((samples[-1]["t"] - samples[0]["t"]) / (len(samples) - 1), 3)
        if len(samples) > 1
        else None,
        "tenants": {
            t: {
                "max_queued": max(s["queued"].get(t, 0) for s in samples),
                "max_in_flight": max(s["in_flight"].get(t, 0) for s in samples),
                "seconds_with_one_queued": queued_seconds(samples, t),
            }
            for t in tenants
        },
    }


def engine_requests(change: Mapping[str, float]) -> int:
    return int(sum(by_label(change, "reflectrm_engine_requests_total", "stage").values()))


def reused(change: Mapping[str, float]) -> dict[str, int]:
    found = by_label(change, "reflectrm_reused_answers_total", "how")
    return {how: int(found.get(how, 0)) for how in ("joined", "cached")}


def statuses(calls: Iterable[Mapping[str, Any]]) -> dict[str, int]:
    """Calls by status ("lost" for a call that got no HTTP answer)."""
    return dict(sorted(Counter(str(c.get("status") or "lost") for c in calls).items()))


def _ratio(a: float | None, b: float | None) -> float | None:
    return round(a / b, 1) if a is not None and b else None


def headline(report: Mapping[str, Any]) -> dict[str, Any]:
    """The figures the docs quote, from a report's phases."""
    phases = report["phases"]
    alone = phases["alone"]["light"]["latency"]
    out: dict[str, Any] = {"light_alone": {k: alone[k] for k in ("p50_s", "max_s")}}
    for name in ("fair", "fifo"):
        if name not in phases:
            continue
        phase = phases[name]
        during = phase["light"]["during_flood"]
        out[f"light_{name}"] = {
            "p50_s": during["p50_s"],
            "max_s": during["max_s"],
            "calls_during_flood": during["n"],
            "p50_vs_alone": _ratio(during["p50_s"], alone["p50_s"]),
            "flood_judgments_per_s": phase["flood"]["judgments_per_s"],
        }
    for name in ("retries_once", "retries_racing", "retries_repeat"):
        if name in phases:
            out[f"engine_requests_per_call_{name.removeprefix('retries_')}"] = phases[name][
                "engine_requests_per_answered_call"
            ]
    out["statuses"] = report["statuses"]
    out["all_200"] = report["all_200"]
    return out


def _s(value: float | None) -> str:
    return "–" if value is None else f"{value:g} s"


def _n(value: float | None) -> str:
    return "–" if value is None else f"{value:g}"


def markdown(report: Mapping[str, Any]) -> str:
    """The report as two Markdown tables and a line of statuses."""
    sizes, phases = report["sizes"], report["phases"]
    lines = [
        "# Fair shares and retries, measured",
        "",
        f"Generated by `loadtests/fairness.py` from `fairness.json`. Machine: "
        f"{report['machine']['cpus']} CPU cores (shared); model {report.get('model') or '?'}; "
        f"mode {sizes['mode']}, max_tokens {sizes['max_tokens']}, "
        f"REFLECTRM_MAX_CONCURRENT_JUDGMENTS={sizes['max_concurrent_judgments']}.",
        "",
        f"Light tenant `{LIGHT}`: {sizes['light']} judgments one after another; heavy tenant "
        f"`{HEAVY}`: {sizes['flood']} judgments at once. Light latency is client-side, over the "
        "light calls that started while the flood was unanswered.",
        "",
        "| phase | light calls during flood | light p50 | light max | p50 vs alone "
        "| light queued (gauge, s per call) | flood answered | flood wall | flood judgments/s |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    alone = phases["alone"]["light"]["latency"]
    lines.append(
        f"| alone (no flood) | – ({alone['n']} calls) | {_s(alone['p50_s'])} "
        f"| {_s(alone['max_s'])} | 1 | – | – | – | – |"
    )
    for name, label in (
        ("fair", "flood, own tenant (fair)"),
        ("fifo", "flood, same tenant (FIFO)"),
    ):
        if name not in phases:
            continue
        p = phases[name]
        during, flood = p["light"]["during_flood"], p["flood"]
        per_call = p["light"].get("queued_s_per_call")
        lines.append(
            f"| {label} | {during['n']} of {p['light']['latency']['n']} | {_s(during['p50_s'])} "
            f"| {_s(during['max_s'])} | {_n(_ratio(during['p50_s'], alone['p50_s']))} "
            f"| {_n(per_call)} | {flood['answered']} of {flood['sent']} | {_s(flood['seconds'])} "
            f"| {_n(flood['judgments_per_s'])} |"
        )
    lines += [
        "",
        f"Retries: {sizes['retry_calls']} distinct judgments; racing sends each "
        f"{sizes['copies']} times at once; repeat sends the first set again after it was answered.",
        "",
        "| phase | calls sent | answered 200 | engine requests | joined | cached "
        "| engine requests per answered call | wall |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name in ("retries_once", "retries_racing", "retries_repeat"):
        if name not in phases:
            continue
        p = phases[name]
        lines.append(
            f"| {name.removeprefix('retries_')} | {p['sent']} | {p['statuses'].get('200', 0)} "
            f"| {p['engine_requests']} | {p['reused']['joined']} | {p['reused']['cached']} "
            f"| {_n(p['engine_requests_per_answered_call'])} | {_s(p['seconds'])} |"
        )
    status_text = ", ".join(f"{k}: {v}" for k, v in report["statuses"].items())
    lines += [
        "",
        f"Statuses of every call: {status_text} (all 200: {'yes' if report['all_200'] else 'no'}). "
        f"Service ready after {_s(report.get('ready_after_s'))}; "
        f"phases took {_s(report.get('phases_seconds'))}.",
        "",
    ]
    return "\n".join(lines)


# --- the run ----------------------------------------------------------------------------------


class Runner:
    def __init__(self, client: httpx.AsyncClient, body: Mapping[str, Any]) -> None:
        self.client = client
        self.body = dict(body)
        self.origin = time.monotonic()

    def now(self) -> float:
        return round(time.monotonic() - self.origin, 3)

    async def call(self, tenant: str, seed: int, tag: str) -> dict[str, Any]:
        started = time.monotonic()
        out: dict[str, Any] = {"tenant": tenant, "seed": seed, "start": self.now()}
        try:
            r = await self.client.post(
                "/v1/judge",
                json={**self.body, "seed": seed},
                headers={TENANT_HEADER: tenant, "X-Request-ID": f"{tag}-{seed}"},
            )
        except httpx.HTTPError as exc:
            out.update(status=None, error=type(exc).__name__, seconds=time.monotonic() - started)
            return out
        out.update(status=r.status_code, seconds=round(time.monotonic() - started, 3))
        out["end"] = self.now()
        if r.status_code == 200:
            answer = r.json()
            out.update(
                winner=answer.get("winner"),
                scores=answer.get("scores"),
                outcome=answer.get("outcome"),
                server_latency_ms=answer.get("latency_ms"),
                model=answer.get("model"),
            )
        else:
            out["detail"] = r.text[:300]
        return out

    async def metrics(self) -> dict[str, float]:
        r = await self.client.get("/metrics")
        r.raise_for_status()
        return parse_metrics(r.text, "reflectrm_")

    async def sequence(self, tenant: str, seeds: Iterable[int], tag: str) -> list[dict[str, Any]]:
        return [await self.call(tenant, seed, tag) for seed in seeds]

    async def sample(self, interval_s: float, stop: asyncio.Event) -> list[dict[str, Any]]:
        """The tenant gauges every ``interval_s`` until ``stop`` is set."""
        samples = []
        while not stop.is_set():
            t = self.now()
            try:
                m = await self.metrics()
            except httpx.HTTPError:
                m = None
            if m is not None:
                samples.append(
                    {
                        "t": t,
                        "queued": {
                            k: int(v)
                            for k, v in by_label(
                                m, "reflectrm_tenant_judgments_queued", "tenant"
                            ).items()
                            if v
                        },
                        "in_flight": {
                            k: int(v)
                            for k, v in by_label(
                                m, "reflectrm_tenant_judgments_in_flight", "tenant"
                            ).items()
                            if v
                        },
                    }
                )
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), interval_s)
        return samples


def _light_report(calls: list[dict[str, Any]], flood_end: float | None) -> dict[str, Any]:
    ok = [c for c in calls if c.get("status") == 200]
    during = [c for c in ok if flood_end is not None and c["start"] < flood_end]
    return {
        "latency": latency_summary(c["seconds"] for c in ok),
        "during_flood": latency_summary(c["seconds"] for c in during),
        "calls": calls,
    }


async def alone_phase(run: Runner, light: int) -> dict[str, Any]:
    started = time.monotonic()
    calls = await run.sequence(
        LIGHT, range(SEED_BASE["alone"], SEED_BASE["alone"] + light), "alone"
    )
    return {
        "light": _light_report(calls, None),
        "seconds": round(time.monotonic() - started, 1),
        "statuses": statuses(calls),
    }


async def flood_phase(
    run: Runner, name: str, flood: int, light: int, light_tenant: str, interval_s: float
) -> dict[str, Any]:
    """``flood`` judgments of the heavy tenant at once, and the light sequence once they are
    queued; the tenant gauges sampled throughout."""
    before = await run.metrics()
    stop = asyncio.Event()
    sampler = asyncio.create_task(run.sample(interval_s, stop))
    phase_start = run.now()
    base = SEED_BASE[f"{name}_flood"]
    flood_tasks = [
        asyncio.create_task(run.call(HEAVY, seed, f"{name}-flood"))
        for seed in range(base, base + flood)
    ]
    # The light sequence starts once the flood is queued (bounded wait).
    queued_at_light_start = 0.0
    wait_until = time.monotonic() + 60
    while time.monotonic() < wait_until:
        m = await run.metrics()
        queued_at_light_start = by_label(m, "reflectrm_judgments_queued", "").get("", 0.0)
        if queued_at_light_start >= flood // 2:
            break
        await asyncio.sleep(0.2)
    light_start = run.now()
    base = SEED_BASE[f"{name}_light"]
    light_calls = await run.sequence(light_tenant, range(base, base + light), f"{name}-light")
    flood_calls = await asyncio.gather(*flood_tasks)
    stop.set()
    samples = await sampler
    after = await run.metrics()
    ends = [c["end"] for c in flood_calls if "end" in c]
    flood_end = max(ends) if ends else None
    ok = [c for c in flood_calls if c.get("status") == 200]
    flood_seconds = round(flood_end - phase_start, 2) if flood_end is not None else None
    light_report = _light_report(light_calls, flood_end)
    gauges = gauge_summary(samples)
    during_n = light_report["during_flood"]["n"]
    if light_tenant == LIGHT and during_n and LIGHT in gauges["tenants"]:
        light_report["queued_s_per_call"] = round(
            gauges["tenants"][LIGHT]["seconds_with_one_queued"] / during_n, 2
        )
    change = delta(after, before)
    return {
        "light_tenant_name": light_tenant,
        "light_started_at_s": round(light_start - phase_start, 2),
        "queued_when_light_started": int(queued_at_light_start),
        "flood": {
            "sent": flood,
            "answered": len(ok),
            "seconds": flood_seconds,
            "judgments_per_s": round(len(ok) / flood_seconds, 3) if flood_seconds else None,
            "latency": latency_summary(c["seconds"] for c in ok),
        },
        "light": light_report,
        "gauges": gauges,
        "gauge_samples": samples,
        "metrics_change": change,
        "engine_requests": engine_requests(change),
        "statuses": statuses([*flood_calls, *light_calls]),
    }


async def retry_phase(run: Runner, name: str, seeds: Sequence[int], copies: int) -> dict[str, Any]:
    before = await run.metrics()
    started = time.monotonic()
    calls = await asyncio.gather(
        *[run.call(HEAVY, seed, f"{name}-{k}") for seed in seeds for k in range(copies)]
    )
    seconds = round(time.monotonic() - started, 2)
    after = await run.metrics()
    change = delta(after, before)
    answered = sum(c.get("status") == 200 for c in calls)
    answers: dict[int, set[str]] = {}
    for c in calls:
        if c.get("status") == 200:
            answers.setdefault(c["seed"], set()).add(json.dumps([c["winner"], c["scores"]]))
    n_engine = engine_requests(change)
    return {
        "sent": len(calls),
        "distinct": len(seeds),
        "copies": copies,
        "seconds": seconds,
        "latency": latency_summary(c["seconds"] for c in calls if c.get("status") == 200),
        "engine_requests": n_engine,
        "reused": reused(change),
        "engine_requests_per_answered_call": round(n_engine / answered, 3) if answered else None,
        "copies_agree": all(len(v) == 1 for v in answers.values()),
        "metrics_change": change,
        "statuses": statuses(calls),
    }


async def measure(url: str, args: argparse.Namespace) -> dict[str, Any]:
    body = {**PAIR, "mode": args.mode, "max_tokens": args.max_tokens}
    limits = httpx.Limits(max_connections=args.flood + 3 * args.retry_calls * args.copies + 16)
    timeout = httpx.Timeout(args.request_timeout, connect=30)
    phases: dict[str, Any] = {}
    async with httpx.AsyncClient(base_url=url, timeout=timeout, limits=limits) as client:
        run = Runner(client, body)
        warm = await run.sequence("warmup", range(SEED_BASE["warmup"], 2), "warmup")
        started = time.monotonic()
        print("phase alone ...", flush=True)
        phases["alone"] = await alone_phase(run, args.light)
        print("phase fair ...", flush=True)
        phases["fair"] = await flood_phase(
            run, "fair", args.flood, args.light, LIGHT, args.sample_interval
        )
        if not args.no_fifo:
            print("phase fifo ...", flush=True)
            phases["fifo"] = await flood_phase(
                run, "fifo", args.flood, args.light, HEAVY, args.sample_interval
            )
        once = list(range(SEED_BASE["retries_once"], SEED_BASE["retries_once"] + args.retry_calls))
        racing = [s - SEED_BASE["retries_once"] + SEED_BASE["retries_racing"] for s in once]
        print("phases retries ...", flush=True)
        phases["retries_once"] = await retry_phase(run, "once", once, 1)
        phases["retries_racing"] = await retry_phase(run, "racing", racing, args.copies)
        phases["retries_repeat"] = await retry_phase(run, "repeat", once, 1)
        phases_seconds = round(time.monotonic() - started, 1)
    totals: Counter[str] = Counter()
    for phase in phases.values():
        totals.update(phase["statuses"])
    return {
        "phases": phases,
        "warmup_statuses": statuses(warm),
        "statuses": dict(sorted(totals.items())),
        "all_200": set(totals) == {"200"},
        "phases_seconds": phases_seconds,
        "model": next((c["model"] for c in warm if c.get("model")), None),
    }


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m loadtests.fairness", description=__doc__.split("\n")[0]
    )
    p.add_argument("--url", help="a running service (default: start `reflectrm serve`)")
    p.add_argument("--out", type=Path, default=ROOT / "runs" / "fairness")
    p.add_argument("--flood", type=int, default=120, help="the heavy tenant's judgments at once")
    p.add_argument("--light", type=int, default=8, help="the light tenant's, one at a time")
    p.add_argument("--retry-calls", type=int, default=24, help="distinct calls per retry phase")
    p.add_argument("--copies", type=int, default=3, help="copies of each call when racing")
    p.add_argument("--mode", default="single")
    p.add_argument("--max-tokens", type=int, default=24)
    p.add_argument(
        "--max-concurrent", type=int, default=4, help="REFLECTRM_MAX_CONCURRENT_JUDGMENTS"
    )
    p.add_argument("--no-fifo", action="store_true", help="skip the fifo phase")
    p.add_argument("--sample-interval", type=float, default=0.25, help="gauge sampling, seconds")
    p.add_argument("--request-timeout", type=float, default=600.0, help="seconds per call")
    p.add_argument("--ready-timeout", type=float, default=900.0)
    args = p.parse_args(argv)
    for name in ("flood", "light", "retry_calls", "copies", "max_tokens", "max_concurrent"):
        if getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be at least 1")
    return args


def service_settings(args: argparse.Namespace) -> dict[str, str]:
    """The served process's settings: small, beside other work on a 2-core machine; this
    checkout's code first on its path."""
    path = os.pathsep.join(p for p in (str(ROOT / "service"), os.environ.get("PYTHONPATH")) if p)
    return {
        "PYTHONPATH": path,
        "REFLECTRM_KV_CACHE_GIB": "2",
        "REFLECTRM_MAX_MODEL_LEN": "4096",
        "REFLECTRM_MAX_CONCURRENT_JUDGMENTS": str(args.max_concurrent),
        "REFLECTRM_SWAP_CHECK_FRACTION": "0",  # no background engine work in the counts
    }


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    wall = time.monotonic()
    report: dict[str, Any] = {
        "command": " ".join(["python -m loadtests.fairness", *(argv or sys.argv[1:])]),
        "machine": {"cpus": os.cpu_count(), "load_average_at_start": os.getloadavg()},
        "sizes": {
            "flood": args.flood,
            "light": args.light,
            "retry_calls": args.retry_calls,
            "copies": args.copies,
            "mode": args.mode,
            "max_tokens": args.max_tokens,
            "max_concurrent_judgments": args.max_concurrent,
        },
    }
    settings = service_settings(args)
    if not args.url:
        report["service_settings"] = {
            k: v for k, v in settings.items() if k.startswith("REFLECTRM_")
        }
    try:
        with served(
            args.url, args.out / "service.log", settings, args.ready_timeout, report
        ) as url:
            report.update(asyncio.run(measure(url, args)))
    except RunError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    report["run_seconds"] = round(time.monotonic() - wall, 1)
    report["headline"] = headline(report)
    (args.out / "fairness.json").write_text(json.dumps(report, indent=2) + "\n")
    (args.out / "fairness.md").write_text(markdown(report))
    print(json.dumps(report["headline"], indent=2))
    print(f"wrote {args.out / 'fairness.json'} and {args.out / 'fairness.md'}")
    return 0 if report["all_200"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
