"""Group evaluation on the real engine: a few RM-Bench groups, two designs, served in-process
(the service's own ``group_rewards``) and over HTTP (``POST /v1/rewards``): the same records."""

from __future__ import annotations

import asyncio
import math

import httpx

from reflectrm_harness.evaluation.groups import report as group_report
from reflectrm_harness.evaluation.groups.data import Group, load_groups
from reflectrm_harness.evaluation.groups.runner import (
    GroupSettings,
    HttpGroups,
    design_plan,
    in_process_groups,
    run_group_units,
)
from tests.conftest import SHARED_DATA, needs
from tests.e2e.conftest import E2E_MAX_TOKENS

pytestmark = needs(
    (SHARED_DATA / "benchmarks").is_dir(),
    f"the shared benchmark files are absent ({SHARED_DATA}/benchmarks)",
)

# Two stage-1 samples, one engine request per judgment: short, and still seeded sampling.
SETTINGS = GroupSettings(mode="vote", num_candidates=2, max_tokens=E2E_MAX_TOKENS, seed=0)


# The two shortest RM-Bench groups and what each design costs them, by hand from the design
# definitions (reflectrm/judging/groups.py): chat-622 has 6 distinct completions;
# safety-refuse-3542 has 5 (its 4th and 6th completions are one text, judged once). A knockout
# of N entries is N - 1 comparisons in ceil(log2 N) rounds (a bracket of 8 with byes for both
# here: 3 rounds); a circular design is N comparisons; debias swap judges each comparison in
# both orders. (judgments, rounds) per (group, strategy):
EXPECTED = {
    ("chat-622", "knockout"): (2 * 5, 3),
    ("chat-622", "circular"): (2 * 6, 1),
    ("safety-refuse-3542", "knockout"): (2 * 4, 3),
    ("safety-refuse-3542", "circular"): (2 * 5, 1),
}
DUPLICATE_OF = {"chat-622": [None] * 6, "safety-refuse-3542": [None] * 5 + [3]}


def shortest_groups(k: int) -> list[Group]:
    _, groups = load_groups("rm-bench", SHARED_DATA)
    return sorted(groups, key=lambda g: sum(map(len, g.completions)))[:k]


def without_cache_state(value):
    """A record without ``cached_prompt_tokens``: how much of a prompt the engine's prefix
    cache already held depends on what ran before (the HTTP pass follows the in-process one on
    the same engine), not on the judgment."""
    if isinstance(value, dict):
        return {k: without_cache_state(v) for k, v in value.items() if k != "cached_prompt_tokens"}
    if isinstance(value, list):
        return [without_cache_state(v) for v in value]
    return value


def comparable(rows):
    kept = [{k: v for k, v in r.items() if k != "latency_ms"} for r in rows]
    return sorted(map(without_cache_state, kept), key=lambda r: (r["group_id"], r["strategy"]))


def differences(a, b, path="", out=None):
    """Where two records differ, as paths (for the failure message)."""
    out = [] if out is None else out
    if isinstance(a, dict) and isinstance(b, dict):
        for k in sorted(set(a) | set(b)):
            differences(a.get(k), b.get(k), f"{path}.{k}", out)
    elif isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            differences(x, y, f"{path}[{i}]", out)
    elif isinstance(a, float) and isinstance(b, float):
        # Two runs batch their engine requests differently: float32 log-probs move by ~1e-10.
        if not math.isclose(a, b, rel_tol=1e-6, abs_tol=1e-6):
            out.append(f"{path}: {a!r} != {b!r}")
    elif a != b:
        out.append(f"{path}: {a!r} != {b!r}")
    return out[:20]


def test_group_designs_in_process_and_over_http_give_the_same_records(live, engine):
    groups = shortest_groups(2)
    units = design_plan(groups, ["knockout", "circular"], ["swap"])

    in_process: list[dict] = []

    async def local():
        async with in_process_groups(live.settings, engine) as backend:
            await run_group_units(units, backend, SETTINGS, in_process.append, 1)

    asyncio.run(local())

    over_http: list[dict] = []

    async def remote():
        async with httpx.AsyncClient(timeout=300) as client:
            backend = HttpGroups(client, live.url)
            await run_group_units(units, backend, SETTINGS, over_http.append, 1)

    asyncio.run(remote())

    assert len(in_process) == len(over_http) == 4
    assert all(r["status"] == "ok" for r in in_process), in_process
    first, second = comparable(in_process), comparable(over_http)
    assert not differences(first, second)
    assert sorted(g.id for g in groups) == ["chat-622", "safety-refuse-3542"]
    assert sorted((r["group_id"], r["strategy"]) for r in in_process) == sorted(EXPECTED)
    for r in in_process:
        body = r["response"]
        judged, rounds = EXPECTED[(r["group_id"], r["strategy"])]
        assert len(body["rewards"]) == 6
        assert body["judgments"] == judged, (r["group_id"], r["strategy"])
        assert body["rounds"] == rounds, (r["group_id"], r["strategy"])
        duplicates = [c["duplicate_of"] for c in body["completions"]]
        assert duplicates == DUPLICATE_OF[r["group_id"]]
        assert body["usage"]["generated_tokens"] > 0

    rows = {("group", r["group_id"], r["strategy"], r["debias"]): r for r in in_process}
    built = group_report.build(groups, [{"type": "run", "seed": 0}], rows, seed=0, resamples=50)
    knockout = built["rows"]["knockout, debias swap (direct)"]
    assert 0.0 <= knockout["best_of_n"]["value"] <= 1.0
    assert 0.0 <= knockout["rmbench_accuracy"]["value"] <= 100.0
    print(
        "group e2e records:",
        [(r["group_id"], r["strategy"], r["response"]["rewards"]) for r in in_process],
    )
