"""Cohorts over real HTTP: a group's completions sent as separate per-sample calls
(/v1/rewards/sample, and /get_reward with ?group_size), held until the group is whole or its
timeout, judged once, each call answered with its own reward.

The engine is tests/api/conftest.py's PreferenceEngine (vote mode: response 1 gets
4 + quality(r1) - quality(r2) + 2 of 8 votes), so rewards are hand-computable: with round robin
and swap, A 0.6875, B 0.3125, C 0.5 (tests/api/test_rlhf_endpoints.py works them out).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

import httpx
import pytest

from loadtests.common.metrics import parse_metrics
from tests.api.conftest import PreferenceEngine, served

A, B, C, D = "alpha answer", "b", "gamma", "delta"
QUALITY = {A: 2, B: 0, C: 1, D: 1}
Q = "What is asked?"
ROUND_ROBIN = {A: 0.6875, B: 0.3125, C: 0.5}
# A group of three judged round robin with swap: 3 pairs x 2 orders, one engine call each.
ROUND_ROBIN_CALLS = 6


def engine(**kw: Any) -> PreferenceEngine:
    return PreferenceEngine(quality=dict(QUALITY), first_bias=2, **kw)


def member(completion: str, **kw: Any) -> dict[str, Any]:
    return {
        "prompt": Q,
        "completion": completion,
        "group_size": 3,
        "strategy": "round_robin",
        "mode": "vote",
        "seed": 3,
        **kw,
    }


async def post_all(
    url: str, bodies: Sequence[dict[str, Any]], gap_s: float = 0.0, path: str = "/v1/rewards/sample"
) -> list[httpx.Response]:
    async with httpx.AsyncClient(base_url=url, timeout=60) as http:
        tasks = []
        for body in bodies:
            tasks.append(asyncio.create_task(http.post(path, json=body)))
            await asyncio.sleep(gap_s)
        return list(await asyncio.gather(*tasks))


def metric(url: str, name: str) -> float:
    series = parse_metrics(httpx.get(f"{url}/metrics").text)
    assert name in series, f"{name} not exposed"
    return series[name]


def admitted_judgments(metrics_text: str, tenant: str) -> float:
    """The tenant's admitted judgments (0 when the tenant never had one, so no sample)."""
    name = f'reflectrm_tenant_judgments_admitted_total{{tenant="{tenant}"}}'
    return parse_metrics(metrics_text).get(name, 0.0)


def test_every_member_gets_its_group_reward_from_one_judging():
    eng = engine()
    with served(eng, swap_check_fraction=0) as url:
        replies = asyncio.run(post_all(url, [member(A), member(B), member(C)]))
        assert [r.status_code for r in replies] == [200, 200, 200], [r.text for r in replies]
        bodies = [r.json() for r in replies]
        assert [b["reward"] for b in bodies] == [ROUND_ROBIN[A], ROUND_ROBIN[B], ROUND_ROBIN[C]]
        # The group was judged once for all three calls.
        assert len(eng.calls) == ROUND_ROBIN_CALLS
        for b in bodies:
            cohort = b["cohort"]
            assert cohort["arrived"] == 3
            assert cohort["cut"] is False
            assert cohort["judgments"] == 6
            assert cohort["rewards"] == [ROUND_ROBIN[A], ROUND_ROBIN[B], ROUND_ROBIN[C]]
            assert cohort["group_id"].startswith("conversation:")
            assert b["retried"] is False
        # Ordered by content: A, B, C.
        assert [b["cohort"]["index"] for b in bodies] == [0, 1, 2]
        assert metric(url, 'reflectrm_cohorts_closed_total{how="full"}') == 1
        assert metric(url, "reflectrm_cohort_wait_seconds_count") == 3
        assert metric(url, "reflectrm_cohorts_open") == 0
        # 6 judgments for 3 rewards.
        assert metric(url, 'reflectrm_judgments_per_reward_ratio_sum{strategy="round_robin"}') == 2


def test_the_rewards_do_not_depend_on_the_order_members_arrive_in():
    orders = [[A, B, C], [C, A, B], [B, C, A]]
    seen = []
    for order in orders:
        eng = engine()
        with served(eng, swap_check_fraction=0) as url:
            # Knockout: a seeded bracket, so an arrival order that changed the group's order
            # would change the pairings and the rewards.
            bodies = [member(t, strategy="knockout", seed=11) for t in order]
            replies = asyncio.run(post_all(url, bodies, gap_s=0.05))
        by_text = {t: r.json()["reward"] for t, r in zip(order, replies, strict=True)}
        seen.append(by_text)
    assert seen[0] == seen[1] == seen[2]
    # Hand-computed. Seed 11 draws the bracket order (C, B, A): C has a bye, B meets A (A 0.75),
    # then C meets A (A 0.625); B and C never meet. The Bradley-Terry fit of those two
    # comparisons with the prior (k = 3: 1/4 virtual win each way per pair) solves
    # W_i = sum_j n_ij p_i / (p_i + p_j) with W = (A 1.875, B 0.75, C 0.875) and
    # n_AB = n_AC = 1.5, n_BC = 0.5; each reward is its mean win probability against the other
    # two (solved numerically, Newton's method on the log-likelihood, outside this code base).
    assert seen[0] == pytest.approx({A: 0.625, B: 0.3993762676, C: 0.4756237324}, abs=1e-9)


def test_a_missing_member_is_cut_by_the_timeout_with_a_flag_never_a_hang():
    eng = engine()
    with served(eng, swap_check_fraction=0) as url:
        bodies = [member(A, group_size=4, cohort_timeout_s=0.5), member(B, group_size=4)]
        bodies[1]["cohort_timeout_s"] = 0.5
        replies = asyncio.run(post_all(url, bodies))
        assert [r.status_code for r in replies] == [200, 200], [r.text for r in replies]
        for r in replies:
            cohort = r.json()["cohort"]
            assert cohort["cut"] is True
            assert (cohort["arrived"], cohort["group_size"]) == (2, 4)
            assert 0.4 <= cohort["wait_ms"] / 1000 < 10
        # (A, B) with swap: A 8/8 first, 4/8 second -> 0.75.
        assert [r.json()["reward"] for r in replies] == [0.75, 0.25]
        assert metric(url, 'reflectrm_cohorts_closed_total{how="cut"}') == 1


def test_a_lone_member_cut_by_the_timeout_has_no_reward_and_says_why():
    with served(engine(), swap_check_fraction=0) as url:
        (reply,) = asyncio.run(post_all(url, [member(A, cohort_timeout_s=0.2)]))
    assert reply.status_code == 200, reply.text
    body = reply.json()
    assert body["reward"] is None
    assert body["cohort"]["cut"] is True
    assert body["cohort"]["arrived"] == 1
    assert body["cohort"]["judgments"] == 0


def test_a_retried_member_is_not_judged_twice():
    """A's first caller gives up before the group is whole; its retry takes over A's place
    (no fourth member, no second judgment) and gets A's reward; so does a retry of B whose
    caller left before the group was answered and who comes back after."""
    eng = engine(delay_s=2.5)

    async def run(url: str) -> tuple[list[httpx.Response], httpx.Response, int]:
        async with httpx.AsyncClient(base_url=url, timeout=60) as http:
            # A's caller times out while the cohort waits for B and C.
            with pytest.raises(httpx.ReadTimeout):
                await http.post("/v1/rewards/sample", json=member(A), timeout=0.3)
            await asyncio.sleep(1.5)  # the server notices the disconnect (it polls each 1 s)
            retry_a = asyncio.create_task(http.post("/v1/rewards/sample", json=member(A)))
            c = asyncio.create_task(http.post("/v1/rewards/sample", json=member(C)))
            # B's caller leaves once the group is whole and being judged (the engine takes
            # 2.5 s a call: the server notices the disconnect before the answer).
            with pytest.raises(httpx.ReadTimeout):
                await http.post("/v1/rewards/sample", json=member(B), timeout=0.5)
            answered = [await retry_a, await c]
            calls = len(eng.calls)
            await asyncio.sleep(1.5)
            retry_b = await http.post("/v1/rewards/sample", json=member(B))
            return answered, retry_b, calls

    with served(eng, swap_check_fraction=0) as url:
        (retry_a, c), retry_b, calls = asyncio.run(run(url))
        assert metric(url, "reflectrm_cohorts_open") == 0
    assert [retry_a.status_code, c.status_code, retry_b.status_code] == [200, 200, 200]
    assert retry_a.json()["reward"] == ROUND_ROBIN[A]
    assert retry_a.json()["retried"] is True
    assert retry_a.json()["cohort"]["arrived"] == 3  # A's place taken over, not a fourth member
    assert c.json()["reward"] == ROUND_ROBIN[C]
    assert retry_b.json()["reward"] == ROUND_ROBIN[B]
    assert retry_b.json()["retried"] is True
    assert calls == len(eng.calls) == ROUND_ROBIN_CALLS


def test_a_member_answered_once_is_not_handed_to_a_new_rollout_with_the_same_text():
    eng = engine()
    with served(eng, swap_check_fraction=0) as url:
        first = asyncio.run(post_all(url, [member(A), member(B), member(C)]))
        assert [r.status_code for r in first] == [200] * 3
        # The next step's rollouts of the same prompt, one of them A again: a new cohort.
        again = asyncio.run(
            post_all(url, [member(A, seed=4), member(D, seed=4), member(B, seed=4)])
        )
        assert [r.status_code for r in again] == [200] * 3
        assert [r.json()["retried"] for r in again] == [False] * 3
        assert again[0].json()["cohort"]["arrived"] == 3
        assert metric(url, 'reflectrm_cohorts_closed_total{how="full"}') == 2


def test_identical_completions_of_a_group_are_judged_once():
    eng = engine()
    with served(eng, swap_check_fraction=0) as url:
        replies = asyncio.run(post_all(url, [member(A), member(B), member(A + " ")]))
        bodies = [r.json() for r in replies]
        # Ordered by content: "alpha answer", "alpha answer ", "b": the second is the first's
        # duplicate; one comparison (A, B) in both orders.
        assert [b["reward"] for b in bodies] == [0.75, 0.25, 0.75]
        assert bodies[2]["duplicate_of"] == 0
        assert bodies[0]["cohort"]["judgments"] == 2
        assert len(eng.calls) == 2
        assert metric(url, "reflectrm_merged_duplicates_total") == 1


def test_a_waiting_cohort_holds_no_admission_slot():
    """One slot, three cohorts waiting for members: a pair call is judged at once, and the
    waiting members are counted as open cohorts, not as judgments queued or in flight."""
    eng = engine()

    async def run(url: str) -> tuple[httpx.Response, dict[str, float], list[httpx.Response]]:
        async with httpx.AsyncClient(base_url=url, timeout=60) as http:
            waiting = [
                asyncio.create_task(
                    http.post("/v1/rewards/sample", json=member(A, group_id=f"g{k}"))
                )
                for k in range(3)
            ]
            await asyncio.sleep(0.3)
            pair = await http.post(
                "/v1/judge", json={"prompt": Q, "responses": [A, B], "mode": "vote", "seed": 1}
            )
            gauges = {
                name: metric(url, name)
                for name in (
                    "reflectrm_cohorts_open",
                    "reflectrm_judgments_in_flight",
                    "reflectrm_judgments_queued",
                )
            }
            rest = [
                http.post("/v1/rewards/sample", json=member(t, group_id=f"g{k}"))
                for k in range(3)
                for t in (B, C)
            ]
            done = list(await asyncio.gather(*waiting, *rest))
            return pair, gauges, done

    with served(eng, swap_check_fraction=0, max_concurrent_judgments=1) as url:
        pair, gauges, done = asyncio.run(run(url))
    assert pair.status_code == 200
    assert gauges == {
        "reflectrm_cohorts_open": 3,
        "reflectrm_judgments_in_flight": 0,
        "reflectrm_judgments_queued": 0,
    }
    assert [r.status_code for r in done] == [200] * 9
    assert [r.json()["reward"] for r in done[:3]] == [ROUND_ROBIN[A]] * 3
    assert len({r.json()["cohort"]["group_id"] for r in done}) == 3


@pytest.mark.parametrize(
    ("change", "needle"),
    [
        ({"group_size": 1}, "group_size"),
        ({"group_size": 17}, "REFLECTRM_MAX_GROUP_SIZE"),
        ({"strategy": "reference"}, "strategy"),
        ({"cohort_timeout_s": 601}, "REFLECTRM_MAX_COHORT_TIMEOUT_S"),
        ({"cohort_timeout_s": 0}, "cohort_timeout_s"),
        ({"completion": None}, "completion"),
        ({"group_size": 16, "max_tokens": 4096, "strategy": "round_robin"}, "engine work"),
    ],
)
def test_bad_member_calls_are_4xx_saying_what_to_fix(change: dict[str, Any], needle: str):
    with served(engine(), swap_check_fraction=0) as url:
        r = httpx.post(f"{url}/v1/rewards/sample", json={**member(A), **change}, timeout=30)
    assert r.status_code == 422, r.text
    assert needle in r.text


def test_a_member_asking_other_terms_than_its_open_cohort_is_refused():
    with served(engine(), swap_check_fraction=0) as url:

        async def run() -> tuple[httpx.Response, httpx.Response, list[httpx.Response]]:
            async with httpx.AsyncClient(base_url=url, timeout=60) as http:
                first = asyncio.create_task(http.post("/v1/rewards/sample", json=member(A)))
                await asyncio.sleep(0.2)
                odd = await http.post("/v1/rewards/sample", json=member(B, group_size=4))
                rest = [http.post("/v1/rewards/sample", json=member(t)) for t in (B, C)]
                others = list(await asyncio.gather(*rest))
                return odd, await first, others

        odd, first, rest = asyncio.run(run())
    assert odd.status_code == 422
    assert "is open with group_size 3" in odd.json()["detail"]
    assert "this call asks for group_size 4" in odd.json()["detail"]
    assert first.status_code == 200
    assert first.json()["reward"] == ROUND_ROBIN[A]
    assert [r.json()["reward"] for r in rest] == [ROUND_ROBIN[B], ROUND_ROBIN[C]]


def test_a_named_group_takes_members_of_one_conversation_only():
    with served(engine(), swap_check_fraction=0) as url:

        async def run() -> tuple[httpx.Response, list[httpx.Response]]:
            async with httpx.AsyncClient(base_url=url, timeout=60) as http:
                named = {"group_id": "g", "group_size": 2}
                first = asyncio.create_task(
                    http.post("/v1/rewards/sample", json=member(A, **named))
                )
                await asyncio.sleep(0.2)
                other = {**member(B, **named), "prompt": "Something else?"}
                odd = await http.post("/v1/rewards/sample", json=other)
                last = await http.post("/v1/rewards/sample", json=member(B, **named))
                return odd, [await first, last]

        odd, answered = asyncio.run(run())
    assert odd.status_code == 422
    assert "open for another conversation" in odd.json()["detail"]
    assert [r.status_code for r in answered] == [200, 200]


def test_open_cohorts_are_bounded_with_a_429_that_names_the_bound():
    with served(engine(), swap_check_fraction=0, max_cohorts=2) as url:

        async def run() -> tuple[httpx.Response, list[httpx.Response]]:
            async with httpx.AsyncClient(base_url=url, timeout=60) as http:
                held = [
                    asyncio.create_task(
                        http.post(
                            "/v1/rewards/sample",
                            json=member(A, group_id=f"g{k}", group_size=2),
                        )
                    )
                    for k in range(2)
                ]
                await asyncio.sleep(0.3)
                third = await http.post(
                    "/v1/rewards/sample", json=member(A, group_id="g2", group_size=2)
                )
                for k in range(2):
                    await http.post(
                        "/v1/rewards/sample", json=member(B, group_id=f"g{k}", group_size=2)
                    )
                return third, list(await asyncio.gather(*held))

        third, held = asyncio.run(run())
        refused = metric(url, 'reflectrm_refusals_total{bound="cohorts",tenant="default"}')
    assert third.status_code == 429
    assert "REFLECTRM_MAX_COHORTS" in third.json()["detail"]
    assert third.headers["retry-after"]
    assert [r.status_code for r in held] == [200, 200]
    assert refused == 1


def test_get_reward_with_group_size_answers_each_openrlhf_call_with_a_group_reward():
    """OpenRLHF posts each sample alone to --reward.remote_url; with ?group_size=3 the three
    samples of a prompt form a cohort (keyed by the prompt), no label needed."""
    eng = engine()
    prompt = "<|im_start|>user\nWhat is asked?<|im_end|>\n<|im_start|>assistant\n"
    bodies = [{"query": [prompt + t], "prompts": [prompt], "labels": [None]} for t in (C, A, B)]
    with served(eng, swap_check_fraction=0) as url:

        async def run() -> list[httpx.Response]:
            async with httpx.AsyncClient(base_url=url, timeout=60) as http:
                params = {"group_size": 3, "strategy": "round_robin", "mode": "vote", "seed": 3}
                calls = [http.post("/get_reward", params=params, json=b) for b in bodies]
                return list(await asyncio.gather(*calls))

        replies = asyncio.run(run())
    assert [r.status_code for r in replies] == [200] * 3, [r.text for r in replies]
    rewards = [r.json()["rewards"] for r in replies]
    assert rewards == [[ROUND_ROBIN[C]], [ROUND_ROBIN[A]], [ROUND_ROBIN[B]]]
    logs = replies[0].json()["extra_logs"]
    assert logs["judge_cohort_arrived"] == [3.0]
    assert logs["judge_cohort_cut"] == [0.0]
    assert logs["judge_judgments_per_reward"] == [2.0]
    assert len(eng.calls) == ROUND_ROBIN_CALLS


def test_cohorts_are_kept_apart_by_tenant():
    with served(engine(), swap_check_fraction=0) as url:

        async def run() -> list[httpx.Response]:
            async with httpx.AsyncClient(base_url=url, timeout=60) as http:
                calls = [
                    http.post(
                        "/v1/rewards/sample",
                        json=member(t, group_size=2, cohort_timeout_s=1),
                        headers={"X-Reflectrm-Tenant": tenant},
                    )
                    for tenant in ("job-1", "job-2")
                    for t in (A, B)
                ]
                return list(await asyncio.gather(*calls))

        replies = asyncio.run(run())
    assert [r.status_code for r in replies] == [200] * 4
    assert [r.json()["cohort"]["arrived"] for r in replies] == [2] * 4
    assert [r.json()["cohort"]["cut"] for r in replies] == [False] * 4


def test_two_tenants_sending_one_conversation_get_two_cohorts_each_judged_apart():
    """job-1 sends A then C, job-2 sends B then D, interleaved, one conversation, group_size 2.
    Two cohorts, {A, C} and {B, D}, each judged under its tenant. Hand-computed (vote mode,
    swap, round robin of two: a completion's reward is its mean share over both orders):
    A vs C: A first 7/8, C first 5/8, so A (7/8 + 3/8) / 2 = 0.625, C 0.375; B vs D: B first
    5/8, D first 7/8, so B 0.375, D 0.625. One cohort across tenants would pair A with B
    (0.75, 0.25) and C with D (0.5, 0.5)."""
    eng = engine()
    sends = [("job-1", A), ("job-2", B), ("job-1", C), ("job-2", D)]
    with served(eng, swap_check_fraction=0) as url:

        async def run() -> list[httpx.Response]:
            async with httpx.AsyncClient(base_url=url, timeout=60) as http:
                tasks = []
                for tenant, text in sends:
                    body = member(text, group_size=2, cohort_timeout_s=5)
                    headers = {"X-Reflectrm-Tenant": tenant}
                    tasks.append(
                        asyncio.create_task(
                            http.post("/v1/rewards/sample", json=body, headers=headers)
                        )
                    )
                    await asyncio.sleep(0.05)
                return list(await asyncio.gather(*tasks))

        replies = asyncio.run(run())
        text = httpx.get(f"{url}/metrics").text
    admitted = {t: admitted_judgments(text, t) for t in ("job-1", "job-2")}
    assert [r.status_code for r in replies] == [200] * 4, [r.text for r in replies]
    bodies = [r.json() for r in replies]
    assert [b["reward"] for b in bodies] == [0.625, 0.375, 0.375, 0.625]
    assert [b["cohort"]["rewards"] for b in bodies] == [[0.625, 0.375], [0.375, 0.625]] * 2
    assert [b["cohort"]["arrived"] for b in bodies] == [2] * 4
    assert [b["cohort"]["cut"] for b in bodies] == [False] * 4
    # Two cohorts of one pair each, both orders: 2 engine calls each, under its own tenant.
    assert len(eng.calls) == 4
    assert admitted == {"job-1": 2, "job-2": 2}
