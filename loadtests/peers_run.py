"""What a forwarded cohort member costs between peer replicas, on the real engine (the default
model), both arms side by side in one run.

Two ``reflectrm serve`` replicas start on free loopback ports, each with its own vLLM engine,
both with ``REFLECTRM_PEERS`` listing both and ``REFLECTRM_PEER_URL`` its own. Each replica is
warmed with one cohort it owns, then ``--rounds`` rounds follow, one after another. A round is
two cohorts of the same shape (its group size and debias, cycling over ``--group-sizes`` and
``--debias``; mode ``--mode``; ``--max-tokens``), on two distinct prompts (no judgment shared),
each with its own seed, judged one after the other:

- arm ``local``: every member posted to the cohort's owner;
- arm ``forwarded``: every member posted to the other replica, which forwards it to the owner.

The arm that goes first alternates from round to round, so drift and noise hit both alike. The
owner is the service's own: ``serving.ownership.owner`` over the peers' list, of the cohort's
name as the service builds it (``serving.service.cohort_name`` of the tenant and the member,
``member_asks``: a ``/get_reward`` member's cohort is its prompt's conversation). A cohort's
members are posted at once as OpenRLHF posts them (``POST /get_reward?group_size=N``, one
sample each). Per call: status, seconds, reward, ``judge_cohort_split``. Both replicas'
``/metrics`` are read before and after each cohort: ``reflectrm_peer_forward_total`` by outcome
and ``reflectrm_engine_requests_total``, so a forwarded cohort's non-owner must show its members
forwarded ``ok`` and no engine request of its own. Writes ``peers_run.json`` and ``peers_run.md``
to ``--out`` and stops both replicas (SIGINT first, by pid). Exit code 1 when a call is not 200,
a forwarded member fell back locally (split, or ``fallback_local`` counted), a non-owner's engine
did work, or a cohort came back cut; 2 when the run could not be made.

    flock /tmp/reflectrm-engine.lock env PYTHONPATH=service .venv/bin/python \
        -m loadtests.peers_run --out docs/records/peer-forward-cost
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import time
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import httpx

if __package__ in (None, ""):  # run as a script: make the repo importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from loadtests.cohort_run import PROMPTS as COHORT_PROMPTS
from loadtests.cohort_run import chat_prompt
from loadtests.common.metrics import by_label, parse_metrics
from loadtests.common.process import RunError, peer_set
from loadtests.summary import latency_summary

ROOT = Path(__file__).resolve().parents[1]
ARMS = ("local", "forwarded")
# cohort_run's short questions, and as many more of the same kind: two distinct prompts a round.
PROMPTS: tuple[tuple[str, tuple[str, ...]], ...] = (
    *COHORT_PROMPTS,
    ("What is the boiling point of water in Celsius?", ("100.", "90.", "100 degrees.", "0.")),
    ("How many days are in a week?", ("Seven.", "Five.", "7", "Eight.")),
    ("What colour is the sky on a clear day?", ("Blue.", "Green.", "It is blue.", "Red.")),
    ("What is 12 divided by 3?", ("4", "3", "12 / 3 = 4.", "It is 6.")),
    ("Which animal says moo?", ("A cow.", "A dog.", "Cows do.", "A cat.")),
    ("What is the opposite of hot?", ("Cold.", "Warm.", "It is cold.", "Wet.")),
    ("How many continents are there?", ("Seven.", "Five.", "7", "Nine.")),
    ("What metal is liquid at room temperature?", ("Mercury.", "Iron.", "Hg.", "Gold.")),
)
WARMUP_QUESTION = "Warm-up {k}: what is 1 plus 1?"
WARMUP_ROLLOUTS = ("2", "3")
ENGINE = "reflectrm_engine_requests_total"
FORWARDS = "reflectrm_peer_forward_total"
OUTCOMES = ("ok", "error", "fallback_local")


@dataclass(frozen=True)
class Cohort:
    """One cohort of the run: its round, arm, prompt, rollouts and judging settings."""

    index: int
    round: int
    arm: str
    question: str
    rollouts: tuple[str, ...]
    group_size: int
    debias: str
    seed: int


def plan_cohorts(
    rounds: int,
    group_sizes: Sequence[int] = (2, 3, 4),
    debiases: Sequence[str] = ("none", "swap"),
    seed: int = 7,
    prompts: Sequence[tuple[str, Sequence[str]]] = PROMPTS,
) -> list[Cohort]:
    """Two cohorts a round, in the order they are judged: round r's group size is
    ``group_sizes[r % len]``, its debias ``debiases[r % len]``; the local arm goes first in even
    rounds, the forwarded arm in odd ones; the first of a round takes prompt 2r, the second
    prompt 2r + 1 (every cohort its own prompt), and cohort k has seed ``seed + k``."""
    if rounds < 1 or 2 * rounds > len(prompts):
        raise ValueError(f"rounds must be 1 to {len(prompts) // 2}")
    out: list[Cohort] = []
    for r in range(rounds):
        group_size = group_sizes[r % len(group_sizes)]
        debias = debiases[r % len(debiases)]
        order = ARMS if r % 2 == 0 else ARMS[::-1]
        for j, arm in enumerate(order):
            question, rollouts = prompts[2 * r + j]
            k = len(out)
            out.append(
                Cohort(
                    index=k,
                    round=r,
                    arm=arm,
                    question=question,
                    rollouts=tuple(rollouts[:group_size]),
                    group_size=group_size,
                    debias=debias,
                    seed=seed + k,
                )
            )
    return out


def cohort_of(question: str, rollout: str, group_size: int) -> str:
    """The cohort name the service gives a /get_reward member (tenant ``default``: no keys)."""
    from reflectrm.serving.admission import DEFAULT_TENANT
    from reflectrm.serving.service import cohort_name, member_asks
    from reflectrm.serving.types import SampleAsk, SampleOptions

    prompt = chat_prompt(question)
    [ask] = member_asks(
        [SampleAsk(query=prompt + rollout, prompt=prompt, label=None)],
        SampleOptions(group_size=group_size),
    )
    return cohort_name(DEFAULT_TENANT, ask)


def owner_of(urls: Sequence[str], question: str, rollout: str, group_size: int) -> str:
    """The replica (of ``urls``) that owns the cohort, by the service's own ownership."""
    from reflectrm.serving.ownership import owner
    from reflectrm.settings import normal_url

    return owner([normal_url(u) for u in urls], cohort_of(question, rollout, group_size))


def median_or_none(values: Iterable[float]) -> float | None:
    values = list(values)
    return round(statistics.median(values), 3) if values else None


def summarize(calls: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Per arm, the 200 calls' latency summary; the difference (forwarded - local) and ratio of
    the medians; per round, the difference of the two cohorts' median call times. The
    difference is called within noise when the rounds' differences do not all have one sign
    (some rounds the forwarded arm was the faster), or when there is one round only."""
    arms = {
        arm: latency_summary(c["seconds"] for c in calls if c["arm"] == arm and c["status"] == 200)
        for arm in ARMS
    }
    local, forwarded = arms["local"]["p50_s"], arms["forwarded"]["p50_s"]
    rounds: dict[int, dict[str, float | None]] = {}
    for r in sorted({c["round"] for c in calls}):
        per = {
            arm: median_or_none(
                c["seconds"]
                for c in calls
                if c["round"] == r and c["arm"] == arm and c["status"] == 200
            )
            for arm in ARMS
        }
        a, b = per["local"], per["forwarded"]
        rounds[r] = {**per, "difference_s": None if a is None or b is None else round(b - a, 3)}
    diffs = [d["difference_s"] for d in rounds.values() if d["difference_s"] is not None]
    both = local is not None and forwarded is not None
    return {
        "arms": arms,
        "median_difference_s": round(forwarded - local, 3) if both else None,
        "median_ratio": round(forwarded / local, 3) if both and local else None,
        "rounds": rounds,
        "round_differences_s": {
            "min": min(diffs) if diffs else None,
            "median": median_or_none(diffs),
            "max": max(diffs) if diffs else None,
        },
        "within_noise": len(diffs) < 2 or (min(diffs) <= 0 <= max(diffs)),
    }


def check(
    calls: Sequence[Mapping[str, Any]], cohorts: Sequence[Mapping[str, Any]]
) -> dict[str, Any]:
    """What must hold: every call 200; no forwarded member split; every cohort whole; per
    forwarded cohort, its members forwarded ok by the non-owner and none fell back; no cohort
    costs its non-owner's engine a request."""
    forwarded = [c for c in calls if c["arm"] == "forwarded"]
    return {
        "all_200": all(c["status"] == 200 for c in calls),
        "not_200": sum(1 for c in calls if c["status"] != 200),
        "forwarded_calls": len(forwarded),
        "forwarded_marked_split": sum(1 for c in forwarded if c.get("split") != 0.0),
        "local_marked_split": sum(
            1 for c in calls if c["arm"] == "local" and c.get("split") != 0.0
        ),
        "cut_answers": sum(1 for c in calls if c.get("cut") not in (None, 0.0)),
        "forwards_ok_expected": sum(k["group_size"] for k in cohorts if k["arm"] == "forwarded"),
        "forwards_ok": sum(k["forwards"]["ok"] for k in cohorts),
        "forwards_fallback_local": sum(k["forwards"]["fallback_local"] for k in cohorts),
        "forwards_error": sum(k["forwards"]["error"] for k in cohorts),
        "non_owner_engine_requests": sum(k["engine_requests"]["non_owner"] for k in cohorts),
        "owner_engine_requests": sum(k["engine_requests"]["owner"] for k in cohorts),
    }


def good(checks: Mapping[str, Any]) -> bool:
    return bool(
        checks["all_200"]
        and checks["forwarded_marked_split"] == 0
        and checks["local_marked_split"] == 0
        and checks["cut_answers"] == 0
        and checks["forwards_fallback_local"] == 0
        and checks["forwards_error"] == 0
        and checks["forwards_ok"] == checks["forwards_ok_expected"]
        and checks["non_owner_engine_requests"] == 0
    )


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--out", type=Path, default=ROOT / "docs" / "peers-run")
    p.add_argument("--rounds", type=int, default=6, help=f"at most {len(PROMPTS) // 2}")
    p.add_argument("--group-sizes", type=int, nargs="+", default=[2, 3, 4])
    p.add_argument("--debias", nargs="+", default=["none", "swap"])
    p.add_argument("--mode", default="single")
    p.add_argument(
        "--max-tokens", type=int, default=32, help="single mode needs 23 with the default model"
    )
    p.add_argument("--cohort-timeout", type=float, default=30.0)
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--kv-cache-gib", default="1", help="each replica's")
    p.add_argument("--ready-timeout", type=float, default=900.0)
    args = p.parse_args(argv)
    if not 1 <= args.rounds <= len(PROMPTS) // 2:
        p.error(f"--rounds must be 1 to {len(PROMPTS) // 2}")
    if not all(2 <= g <= 4 for g in args.group_sizes):
        p.error("--group-sizes must be 2 to 4")
    if args.max_tokens < 16:
        p.error("--max-tokens must be at least 16 (the service's lower bound)")
    return args


def replica_settings(args: argparse.Namespace, urls: Sequence[str], me: str) -> dict[str, str]:
    return {
        "PYTHONPATH": str(ROOT / "service"),
        "REFLECTRM_KV_CACHE_GIB": str(args.kv_cache_gib),
        "REFLECTRM_MAX_MODEL_LEN": "4096",
        "REFLECTRM_SWAP_CHECK_FRACTION": "0",  # no background engine work in the counts
        "REFLECTRM_PEERS": ",".join(urls),
        "REFLECTRM_PEER_URL": me,
    }


async def scrape(http: httpx.AsyncClient, url: str) -> dict[str, float]:
    text = (await http.get(f"{url}/metrics")).text
    return parse_metrics(text, names=[ENGINE, FORWARDS])


def counts(values: Mapping[str, float]) -> dict[str, float]:
    forwards = by_label(values, FORWARDS, "outcome")
    return {
        "engine_requests": sum(by_label(values, ENGINE, "stage").values()),
        **{outcome: forwards.get(outcome, 0.0) for outcome in OUTCOMES},
    }


def change(after: Mapping[str, float], before: Mapping[str, float]) -> dict[str, float]:
    return {k: round(v - before.get(k, 0.0), 3) for k, v in after.items()}


async def post_cohort(
    http: httpx.AsyncClient,
    url: str,
    question: str,
    rollouts: Sequence[str],
    params: dict[str, Any],
) -> list[dict[str, Any]]:
    """A cohort's members posted to ``url`` at once, one sample per call, as OpenRLHF does."""
    prompt = chat_prompt(question)

    async def one(text: str) -> dict[str, Any]:
        body = {"query": [prompt + text], "prompts": [prompt], "labels": [None]}
        started = time.monotonic()
        r = await http.post(f"{url}/get_reward", params=params, json=body)
        call: dict[str, Any] = {
            "response": text,
            "status": r.status_code,
            "seconds": round(time.monotonic() - started, 3),
        }
        if r.status_code == 200:
            out = r.json()
            logs = out["extra_logs"]
            call.update(
                reward=out["rewards"][0],
                split=logs.get("judge_cohort_split", [None])[0],
                arrived=logs["judge_cohort_arrived"][0],
                cut=logs["judge_cohort_cut"][0],
                cohort_wait_s=logs["judge_cohort_wait_s"][0],
            )
        else:
            call["detail"] = r.text[:300]
        return call

    return list(await asyncio.gather(*(one(t) for t in rollouts)))


async def measure(urls: Sequence[str], args: argparse.Namespace) -> dict[str, Any]:
    plan = plan_cohorts(args.rounds, args.group_sizes, args.debias, args.seed)
    base = {
        "mode": args.mode,
        "max_tokens": args.max_tokens,
        "cohort_timeout_s": args.cohort_timeout,
    }
    limits = httpx.Limits(max_connections=16)
    async with httpx.AsyncClient(timeout=600, limits=limits, trust_env=False) as http:
        # Warm each engine with a cohort of two it owns, posted to it: not counted.
        warm: list[tuple[str, str]] = []
        for url in urls:
            k = 0
            while owner_of(urls, WARMUP_QUESTION.format(k=k), WARMUP_ROLLOUTS[0], 2) != url:
                k += 1
            warm.append((url, WARMUP_QUESTION.format(k=k)))
        started = time.monotonic()
        warm_params = {**base, "group_size": 2, "debias": "none", "seed": args.seed}
        warm_calls = await asyncio.gather(
            *(post_cohort(http, u, q, WARMUP_ROLLOUTS, warm_params) for u, q in warm)
        )
        warmup = {
            "seconds": round(time.monotonic() - started, 1),
            "statuses": dict(Counter(str(c["status"]) for cs in warm_calls for c in cs)),
        }
        print(f"warm-up: {warmup}", flush=True)
        refused = [c for cs in warm_calls for c in cs if c["status"] != 200]
        if refused:  # settings the service refuses: no point in measuring
            raise RunError(f"a warm-up call answered {refused[0]['status']}: {refused[0]}")

        first = {u: counts(await scrape(http, u)) for u in urls}
        calls: list[dict[str, Any]] = []
        cohorts: list[dict[str, Any]] = []
        wall = time.monotonic()
        for cohort in plan:
            own = owner_of(urls, cohort.question, cohort.rollouts[0], cohort.group_size)
            other = next(u for u in urls if u != own)
            target = own if cohort.arm == "local" else other
            params = {
                **base,
                "group_size": cohort.group_size,
                "debias": cohort.debias,
                "seed": cohort.seed,
            }
            before = {u: counts(await scrape(http, u)) for u in urls}
            t0 = time.monotonic()
            replies = await post_cohort(http, target, cohort.question, cohort.rollouts, params)
            cohort_s = time.monotonic() - t0
            after = {u: counts(await scrape(http, u)) for u in urls}
            delta = {u: change(after[u], before[u]) for u in urls}
            record = {
                **asdict(cohort),
                "owner": own,
                "posted_to": target,
                "seconds": round(cohort_s, 3),
                "engine_requests": {
                    "owner": delta[own]["engine_requests"],
                    "non_owner": delta[other]["engine_requests"],
                },
                "forwards": {o: sum(delta[u][o] for u in urls) for o in OUTCOMES},
            }
            cohorts.append(record)
            for reply in replies:
                calls.append(
                    {
                        "cohort": cohort.index,
                        "round": cohort.round,
                        "arm": cohort.arm,
                        **reply,
                    }
                )
            print(
                f"cohort {cohort.index} (round {cohort.round}, {cohort.arm}, "
                f"group {cohort.group_size}, {cohort.debias}): "
                f"{[r['status'] for r in replies]} in {cohort_s:.2f} s, "
                f"engine requests owner/non-owner {record['engine_requests']}, "
                f"forwards {record['forwards']}",
                flush=True,
            )
        wall_s = time.monotonic() - wall
        last = {u: counts(await scrape(http, u)) for u in urls}
    per_replica = {
        u: {"name": f"replica-{i}", **change(last[u], first[u])} for i, u in enumerate(urls)
    }
    for arm in ARMS:
        for u in urls:
            per_replica[u][f"engine_requests_owning_{arm}"] = sum(
                k["engine_requests"]["owner"]
                for k in cohorts
                if k["arm"] == arm and k["owner"] == u
            )
            per_replica[u][f"engine_requests_not_owning_{arm}"] = sum(
                k["engine_requests"]["non_owner"]
                for k in cohorts
                if k["arm"] == arm and k["owner"] != u
            )
    return {
        "params": {**base, "group_sizes": args.group_sizes, "debias": args.debias},
        "warmup": warmup,
        "cohorts": cohorts,
        "calls": calls,
        "statuses": dict(Counter(str(c["status"]) for c in calls)),
        "wall_s": round(wall_s, 1),
        "replicas": per_replica,
        "summary": summarize(calls),
        "checks": check(calls, cohorts),
    }


def markdown(report: Mapping[str, Any]) -> str:
    s, checks, p = report["summary"], report["checks"], report["params"]
    local, fwd = s["arms"]["local"], s["arms"]["forwarded"]
    rd = s["round_differences_s"]
    noise = (
        "within noise: the rounds' differences do not all have one sign"
        if s["within_noise"]
        else "not within noise: every round's difference has the same sign"
    )
    lines = [
        "# What a forwarded cohort member costs between peers",
        "",
        f"`{report['command']}`",
        "",
        f"Two `reflectrm serve` replicas on loopback, each with its own engine (the default "
        f"model), peers of each other; {len(report['cohorts'])} cohorts in "
        f"{len(s['rounds'])} rounds, judged one after another, per-sample `/get_reward` calls "
        f"(group sizes {p['group_sizes']}, debias {p['debias']}, mode {p['mode']}, max_tokens "
        f"{p['max_tokens']}); in each round one cohort's members all posted to its owner "
        f"(local), the other's all to the non-owner (forwarded), which arm first alternating. "
        f"{report['machine']['cpus']} CPUs, load average at start "
        f"{[round(x, 2) for x in report['machine']['load_average_at_start']]}.",
        "",
        "| figure | local | forwarded |",
        "|---|---:|---:|",
        f"| calls (200) | {local['n']} | {fwd['n']} |",
        f"| call time, median | {local['p50_s']} s | {fwd['p50_s']} s |",
        f"| call time, max | {local['max_s']} s | {fwd['max_s']} s |",
        f"| call time, min | {local['min_s']} s | {fwd['min_s']} s |",
        "",
        f"Medians: forwarded - local = {s['median_difference_s']} s, forwarded / local = "
        f"{s['median_ratio']}. Per round (forwarded cohort's median - local cohort's): "
        f"min {rd['min']} s, median {rd['median']} s, max {rd['max']} s; {noise}.",
        "",
        "| check | value |",
        "|---|---:|",
        f"| statuses | {report['statuses']} |",
        f"| forwarded calls marked split | {checks['forwarded_marked_split']} |",
        f"| cut answers | {checks['cut_answers']} |",
        f"| forwards ok (expected) | {checks['forwards_ok']} ({checks['forwards_ok_expected']}) |",
        f"| forwards fallback_local / error | {checks['forwards_fallback_local']} / "
        f"{checks['forwards_error']} |",
        f"| engine requests, owners / non-owners | {checks['owner_engine_requests']} / "
        f"{checks['non_owner_engine_requests']} |",
        "",
        "| replica | engine requests | owning local / forwarded cohorts | not owning | "
        "forwards ok / fallback_local / error |",
        "|---|---:|---:|---:|---:|",
    ]
    for r in report["replicas"].values():
        lines.append(
            f"| {r['name']} | {r['engine_requests']} | {r['engine_requests_owning_local']} / "
            f"{r['engine_requests_owning_forwarded']} | "
            f"{r['engine_requests_not_owning_local'] + r['engine_requests_not_owning_forwarded']}"
            f" | {r['ok']} / {r['fallback_local']} / {r['error']} |"
        )
    lines += ["", "| round | group size | debias | local median | forwarded median | difference |"]
    lines.append("|---:|---:|---|---:|---:|---:|")
    shapes = {k["round"]: (k["group_size"], k["debias"]) for k in report["cohorts"]}
    for r, d in s["rounds"].items():
        g, debias = shapes[int(r)]
        lines.append(
            f"| {r} | {g} | {debias} | {d['local']} s | {d['forwarded']} s | "
            f"{d['difference_s']} s |"
        )
    lines += ["", f"Wall time {report['wall_s']} s (after a warm-up cohort on each replica).", ""]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    report: dict[str, Any] = {
        "command": " ".join(["python -m loadtests.peers_run", *(argv or sys.argv[1:])]),
        "machine": {"cpus": os.cpu_count(), "load_average_at_start": os.getloadavg()},
    }
    try:
        with peer_set(
            2,
            args.out,
            lambda urls, me: replica_settings(args, urls, me),
            args.ready_timeout,
            report,
        ) as services:
            report.update(asyncio.run(measure([s.url for s in services], args)))
    except RunError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    (args.out / "peers_run.json").write_text(json.dumps(report, indent=2) + "\n")
    (args.out / "peers_run.md").write_text(markdown(report))
    print(markdown(report))
    return 0 if good(report["checks"]) else 1


if __name__ == "__main__":
    raise SystemExit(main())
