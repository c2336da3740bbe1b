"""Debiasing, batch judging, group rewards and OpenRLHF's /get_reward, on a scripted engine whose
votes are hand-computable (tests/api/conftest.py PreferenceEngine: response 1 gets
4 + quality(r1) - quality(r2) + first_bias of 8 votes; vote mode, so scores are vote shares)."""

from __future__ import annotations

import asyncio
import contextlib
import time
import types
from collections.abc import Iterator

import httpx
import pytest
from fastapi.testclient import TestClient

from reflectrm.app import create_app
from reflectrm.judging.groups import Comparison, comparison_seed
from reflectrm.settings import Settings
from tests.api.conftest import PreferenceEngine, served
from tests.conftest import ScriptedEngine, judgment

# Qualities: A best, C middle, B worst, the reference R like C; the first-shown response gets
# two extra votes of eight.
A, B, C, R = "alpha answer", "b", "gamma", "the reference"
QUALITY = {A: 2, B: 0, C: 1, R: 1}
Q = "What is asked?"


def engine(**kw) -> PreferenceEngine:
    return PreferenceEngine(quality=dict(QUALITY), first_bias=2, **kw)


@contextlib.contextmanager
def client_for(eng: ScriptedEngine, **settings) -> Iterator[TestClient]:
    with TestClient(create_app(Settings(**settings), engine=eng)) as client:
        yield client


@pytest.fixture
def client() -> Iterator[TestClient]:
    with client_for(engine()) as c:
        yield c


def vote(**kw) -> dict:
    return {"mode": "vote", "seed": 3, **kw}


# --- debias on /v1/judge -----------------------------------------------------------------------


def test_debias_swap_averages_both_orders(client: TestClient):
    # (A, B): 4 + 2 - 0 + 2 = 8 votes for A. (B, A): 4 + 0 - 2 + 2 = 4 -> A gets 4/8 there.
    # A = (1 + 0.5) / 2 = 0.75.
    body = client.post("/v1/judge", json={"prompt": Q, "responses": [A, B], **vote(debias="swap")})
    assert body.status_code == 200, body.text
    r = body.json()
    assert r["debias"] == "swap"
    assert r["scores"] == [0.75, 0.25]
    assert r["winner"] == 1
    assert r["votes"] == [12, 4]  # both orders' votes, original numbering
    assert r["orders"] == [
        {"first": 1, "winner": 1, "scores": [1.0, 0.0]},
        # A 4-4 vote goes to candidate 0's verdict (response shown first: B), scores still even.
        {"first": 2, "winner": 2, "scores": [0.5, 0.5]},
    ]
    assert r["consistent"] is False
    assert r["usage"]["engine_requests"] == 2


def test_debias_swap_tie_is_no_verdict():
    # Pure position: the first-shown always gets every vote -> (1, 0) then (0, 1) -> 0.5 each.
    with client_for(ScriptedEngine(stage1=[judgment(1)] * 8)) as c:
        r = c.post("/v1/judge", json={"prompt": Q, "responses": [A, B], "debias": "swap"}).json()
    assert r["scores"] == [0.5, 0.5]
    assert r["winner"] is None
    assert r["outcome"] == "no_verdict"
    assert r["consistent"] is False
    assert r["swapped_winner"] == 2
    assert [o["winner"] for o in r["orders"]] == [1, 2]


def test_check_swap_keeps_the_first_orders_answer(client: TestClient):
    r = client.post(
        "/v1/judge", json={"prompt": Q, "responses": [C, A], **vote(check_swap=True)}
    ).json()
    # (C, A): 4 + 1 - 2 + 2 = 5 -> C wins 5/8 in this order; (A, C): 4 + 2 - 1 + 2 = 7 -> A.
    assert r["debias"] == "none"
    assert r["winner"] == 1
    assert r["scores"] == [0.625, 0.375]
    assert r["consistent"] is False
    assert r["swapped_winner"] == 2
    assert r["orders"][1] == {"first": 2, "winner": 2, "scores": [0.125, 0.875]}


# --- batch ---------------------------------------------------------------------------------------


def test_batch_answers_in_order_with_per_item_errors():
    with client_for(engine(max_model_len=1500)) as c:
        r = c.post(
            "/v1/judge/batch",
            json={
                "defaults": {"prompt": Q, "mode": "vote", "seed": 5},
                "items": [
                    {"responses": [A, B]},
                    {"responses": [A]},  # not a pair
                    {"responses": [C, A], "debias": "swap"},
                    {"responses": [A, " ".join(["word"] * 1000)]},  # too long for 1500 tokens
                    {"prompt": "Other?", "responses": [B, A], "mode": "single"},
                    {"responses": [A, B], "max_tokens": 100_000},
                ],
            },
        )
    assert r.status_code == 200, r.text
    body = r.json()
    results = body["results"]
    assert [x["index"] for x in results] == [0, 1, 2, 3, 4, 5]
    assert [x["status"] for x in results] == [200, 422, 200, 413, 200, 422]
    assert body["judged"] == 3
    assert body["failed"] == 3
    assert results[0]["result"]["scores"] == [1.0, 0.0]
    assert results[0]["result"]["seed"] == 5
    # (C, A) 5/8 for C, (A, C) 7/8 for A -> C = (5/8 + 1/8) / 2.
    assert results[2]["result"]["scores"] == [0.375, 0.625]
    assert results[4]["result"]["mode"] == "single"
    assert "responses" in results[1]["detail"]
    assert "at least 2" in results[1]["detail"]
    assert "1500 tokens" in results[3]["detail"]
    assert "REFLECTRM_MAX_TOKENS_LIMIT" in results[5]["detail"]
    assert results[1]["result"] is None
    assert body["usage"]["engine_requests"] == 1 + 2 + 1


def test_batch_item_with_a_seed_equals_the_single_call():
    # The mixed scripted model samples differently per seed only through the reflection order.
    gens = [judgment(1, "a0", (-0.01,) * 9 + (-0.1,))]
    gens += [judgment(2, f"a{i}", (-0.01,) * 9 + (-1.0 - i,)) for i in range(1, 8)]
    eng = ScriptedEngine(stage1=gens, reflect=lambda c1, c2: 1)
    pair = {"prompt": Q, "responses": [A, B], "seed": 11, "return_trace": True}
    with client_for(eng) as c:
        single = c.post("/v1/judge", json=pair).json()
        batch = c.post("/v1/judge/batch", json={"items": [pair, {**pair, "seed": 12}]}).json()
    item = batch["results"][0]["result"]
    # The item is the single call again: answered from the cache, with no engine work of its own.
    assert item["usage"]["engine_requests"] == 0 < single["usage"]["engine_requests"]
    ignore = {"request_id", "latency_ms", "usage"}
    assert {k: v for k, v in item.items() if k not in ignore} == {
        k: v for k, v in single.items() if k not in ignore
    }
    other = batch["results"][1]["result"]["trace"]["reflections"]
    assert [x["order"] for x in other] != [x["order"] for x in item["trace"]["reflections"]]


def test_batch_limits_and_bad_defaults_are_422(client: TestClient):
    with client_for(engine(), max_batch_items=2) as c:
        r = c.post("/v1/judge/batch", json={"items": [{"prompt": Q, "responses": [A, B]}] * 3})
    assert r.status_code == 422
    assert "REFLECTRM_MAX_BATCH_ITEMS" in r.json()["detail"]
    r = client.post("/v1/judge/batch", json={"items": [], "defaults": {}})
    assert r.status_code == 422
    assert "at least 1 item" in r.text
    r = client.post("/v1/judge/batch", json={"items": [{}], "defaults": {"mode": "best"}})
    assert r.status_code == 422
    assert "defaults" in r.text


# --- group rewards -------------------------------------------------------------------------------


def rewards(c: TestClient, **kw) -> dict:
    r = c.post("/v1/rewards", json={"prompt": Q, "completions": [A, B, C], **vote(**kw)})
    assert r.status_code == 200, r.text
    return r.json()


def test_reference_strategy_with_swap(client: TestClient):
    body = rewards(client, reference=R)
    # A vs R: (A,R) 4+2-1+2 = 7 -> 7/8; (R,A) 4+1-2+2 = 5 -> A 3/8: A = 10/16.
    # B vs R: (B,R) 5 -> 5/8; (R,B) 7 -> B 1/8: B = 6/16. C vs R: (C,R) 6/8, (R,C) 2/8: 0.5.
    assert body["rewards"] == [0.625, 0.375, 0.5]
    assert body["strategy"] == "reference"
    assert body["debias"] == "swap"
    assert body["judgments"] == 6
    assert body["usage"]["engine_requests"] == 6
    comps = body["comparisons"]
    assert [c["pair"] for c in comps] == [[0, "reference"], [1, "reference"], [2, "reference"]]
    assert comps[0]["winner"] == 0
    assert comps[1]["winner"] == "reference"
    assert comps[2]["winner"] is None
    assert comps[2]["outcome"] == "no_verdict"
    assert comps[0]["orders"][0] == {"first": 0, "winner": 0, "scores": [0.875, 0.125]}
    assert comps[0]["orders"][1] == {
        "first": "reference",
        "winner": "reference",
        "scores": [0.375, 0.625],
    }
    assert comps[0]["seed"] == comparison_seed(3, 0, None)
    detail = body["completions"]
    assert (detail[0]["wins"], detail[1]["losses"], detail[2]["ties"]) == (1, 1, 1)


def test_reference_strategy_without_debias_shows_one_order_drawn_from_the_seed(client):
    body = rewards(client, reference=R, debias="none")
    # Each completion's score in the order its seed's coin picks (hand-computed above).
    by_order = {0: (0.875, 0.375), 1: (0.625, 0.125), 2: (0.75, 0.25)}
    expected = []
    for i in range(3):
        first = Comparison(i, None, comparison_seed(3, i, None)).a_first
        expected.append(by_order[i][0 if first else 1])
        assert body["comparisons"][i]["orders"][0]["first"] == (i if first else "reference")
    assert body["rewards"] == expected
    assert body["judgments"] == 3


def test_round_robin_is_the_mean_score(client: TestClient):
    body = rewards(client, strategy="round_robin")
    # (A,B): A 1.0 / 0.5 -> 0.75; (A,C): A 7/8 / 3/8 -> 0.625; (B,C): B 5/8 / 1/8 -> 0.375.
    assert body["rewards"] == [(0.75 + 0.625) / 2, (0.25 + 0.375) / 2, (0.375 + 0.625) / 2]
    assert [c["pair"] for c in body["comparisons"]] == [[0, 1], [0, 2], [1, 2]]
    assert body["judgments"] == 6
    assert body["pivot"] is None


def test_pivot_defaults_to_the_median_length_completion(client: TestClient):
    body = rewards(client, strategy="pivot")
    # Lengths 12, 1, 5: the pivot is C (index 2). A vs C: 0.625; B vs C: 0.375; C: their rest.
    assert body["pivot"] == 2
    assert body["rewards"] == [0.625, 0.375, 0.5]
    assert [c["pair"] for c in body["comparisons"]] == [[0, 2], [1, 2]]
    assert rewards(client, strategy="pivot", pivot=0)["pivot"] == 0


def test_one_seed_reproduces_the_group_and_default_strategy(client: TestClient):
    one = rewards(client)
    two = rewards(client)
    assert one["strategy"] == "round_robin"  # no reference given
    assert one["rewards"] == two["rewards"]
    assert [c["seed"] for c in one["comparisons"]] == [c["seed"] for c in two["comparisons"]]


def test_empty_completion_gets_zero_without_a_judgment(client: TestClient):
    r = client.post(
        "/v1/rewards", json={"prompt": Q, "completions": [A, "  "], "reference": R, **vote()}
    ).json()
    assert r["rewards"] == [0.625, 0.0]
    assert r["completions"][1]["empty"] is True
    assert r["judgments"] == 2


# The rewards of the fitted strategies below are the Bradley-Terry win shares of the comparisons
# made, with the prior (1/(2(k-1)) virtual wins each way per pair): they solve
# W_i = sum_j n_ij p_i / (p_i + p_j) for every completion i, W_i its score sum plus 1/2 and n_ij
# the comparisons of the pair plus 1/(k-1); reward_i = mean_j p_i / (p_i + p_j). Solved by hand
# for the circular case (equal games per pair), the others numerically (Newton's method on the
# log-likelihood, outside this code base), to 1e-9.
FIT_TOLERANCE = 1e-9


def test_knockout_of_two_is_the_fit_of_one_comparison(client: TestClient):
    r = client.post(
        "/v1/rewards", json={"prompt": Q, "completions": [A, B], "strategy": "knockout", **vote()}
    )
    assert r.status_code == 200, r.text
    body = r.json()
    # (A,B) 8/8 for A, (B,A) 4/8: A scores 0.75. The fit with its prior (one virtual game each,
    # half won): 1.25 wins against 0.75 -> P(A beats B) = 5/8.
    assert body["comparisons"][0]["scores"] in ([0.75, 0.25], [0.25, 0.75])
    assert body["rewards"] == pytest.approx([0.625, 0.375])
    assert body["judgments"] == 2
    assert body["rounds"] == 1
    assert [c["rounds_survived"] for c in body["completions"]] == [1, 0]


def test_knockout_runs_its_rounds_on_the_winners(client: TestClient):
    body = rewards(client, completions=[A, B, C, R], strategy="knockout")
    comps = body["comparisons"]
    assert [c["round"] for c in comps] == [1, 1, 2]
    assert body["rounds"] == 2
    assert body["judgments"] == 6
    # The final is between the two first-round winners (C and R are as good as each other:
    # their tie is decided by a coin from its seed). A beats everyone (0.75 against B, 0.625
    # against C and R with swap), so A wins it and survives both rounds.
    first = next(x for x in comps[:2] if 0 in x["pair"])
    other = next(x for x in comps[:2] if 0 not in x["pair"])
    assert first["winner"] == 0
    final = set(comps[2]["pair"])
    assert 0 in final
    assert (final - {0}) <= set(other["pair"])
    assert other["winner"] in (None, *final)
    assert comps[2]["winner"] == 0
    assert body["completions"][0]["rounds_survived"] == 2
    # Seed 3 draws the bracket (B, A) and (R, C); the C-R tie's coin sends R to the final.
    assert [(c["pair"], c["scores"]) for c in comps] == [
        ([3, 2], [0.5, 0.5]),
        ([1, 0], [0.25, 0.75]),
        ([3, 0], [0.375, 0.625]),
    ]
    # The fit of k = 4 (n_ij = 1/3 + games): A won 0.75 + 0.625 of its 2 games, R 0.5 + 0.375,
    # C 0.5, B 0.25.
    assert body["rewards"] == pytest.approx(
        [0.6173546120, 0.4063505156, 0.4928500439, 0.4834448285], abs=FIT_TOLERANCE
    )


def test_circular_judges_each_against_the_next(client: TestClient):
    body = rewards(client, strategy="circular")
    assert [c["pair"] for c in body["comparisons"]] == [[0, 1], [1, 2], [2, 0]]
    # A-B 0.75 for A; B-C 3/8 for B; C-A 3/8 for C (hand-computed as in the round robin).
    assert [c["scores"] for c in body["comparisons"]] == [
        [0.75, 0.25],
        [0.375, 0.625],
        [0.375, 0.625],
    ]
    # The fit of k = 3: every pair has n_ij = 1 + 1/2 games, so the fit's equations read
    # W_i = 1.5 sum_j P(i beats j) and reward_i = W_i / 3. W_A = 0.5 + 0.75 + 0.625 = 1.875,
    # W_B = 0.5 + 0.25 + 0.375 = 1.125, W_C = 0.5 + 0.625 + 0.375 = 1.5.
    assert body["rewards"] == pytest.approx([0.625, 0.375, 0.5], abs=FIT_TOLERANCE)
    assert body["judgments"] == 6


def test_swiss_rounds_without_rematches_through_two_slots():
    eng = engine(delay_s=0.001)
    completions = [A, B, C, R, "epsilon"]  # five: a bye a round
    payload = {"prompt": Q, "completions": completions, "strategy": "swiss", **vote()}
    with client_for(eng, max_concurrent_judgments=2) as c:
        one = c.post("/v1/rewards", json=payload).json()
        # Another tenant: judged again, not answered from the first call's cache.
        two = c.post("/v1/rewards", json=payload, headers={"X-Reflectrm-Tenant": "b"}).json()
    # ceil(log2 5) = 3 rounds of floor(5/2) = 2 comparisons, both orders each.
    assert [x["round"] for x in one["comparisons"]] == [1, 1, 2, 2, 3, 3]
    assert one["judgments"] == 12
    assert len(eng.calls) == 24
    assert len({frozenset(x["pair"]) for x in one["comparisons"]}) == 6
    assert [(x["pair"], x["scores"]) for x in one["comparisons"]] == [
        ([0, 3], [0.625, 0.375]),
        ([4, 1], [0.5, 0.5]),
        ([0, 4], [0.75, 0.25]),
        ([1, 2], [0.375, 0.625]),
        ([0, 2], [0.625, 0.375]),
        ([3, 1], [0.625, 0.375]),
    ]
    # The fit of k = 5 (n_ij = 1/4 + games): A won 0.625 + 0.75 + 0.625 of 3, C 0.625 + 0.375
    # of 2, R 0.375 + 0.625 of 2, B 0.5 + 0.375 + 0.375 of 3, epsilon 0.5 + 0.25 of 2.
    assert one["rewards"] == pytest.approx(
        [0.6346315356, 0.4153684644, 0.5157933733, 0.5157933733, 0.4184132534], abs=FIT_TOLERANCE
    )
    # One seed reproduces the group: the same pairs, seeds and rewards.
    assert [(x["pair"], x["seed"]) for x in one["comparisons"]] == [
        (x["pair"], x["seed"]) for x in two["comparisons"]
    ]
    assert one["rewards"] == two["rewards"]


def test_duplicates_are_judged_once_and_say_so(client: TestClient):
    body = rewards(client, completions=[A, B, "  alpha   answer\n"], strategy="swiss")
    assert body["judgments"] == 2  # one comparison, both orders
    assert body["rewards"] == pytest.approx([0.625, 0.375, 0.625])
    assert [c["duplicate_of"] for c in body["completions"]] == [None, None, 0]
    assert body["completions"][2]["wins"] == body["completions"][0]["wins"] == 1
    rr = rewards(client, completions=[A, B, A], strategy="round_robin")
    assert [c["pair"] for c in rr["comparisons"]] == [[0, 1]]
    assert rr["rewards"] == [0.75, 0.25, 0.75]
    same = rewards(client, completions=[A, A + " "], strategy="knockout")
    assert (same["rewards"], same["judgments"], same["rounds"]) == ([0.5, 0.5], 0, 0)


def test_no_verdicts_are_counted_for_every_completion():
    with client_for(ScriptedEngine(stage1=[judgment(None)] * 8)) as c:
        r = c.post(
            "/v1/rewards",
            json={"prompt": Q, "completions": [A, B, C], "strategy": "circular", "seed": 1},
        ).json()
    assert r["rewards"] == [None, None, None]
    assert [x["no_verdict"] for x in r["completions"]] == [2, 2, 2]
    assert all(x["outcome"] == "no_verdict" for x in r["comparisons"])


@pytest.mark.parametrize(
    ("extra", "needle"),
    [
        ({"strategy": "reference"}, "needs a `reference`"),
        ({"strategy": "round_robin", "reference": R}, "only used by strategy `reference`"),
        ({"strategy": "pivot", "pivot": 5}, "index of a non-empty completion"),
        ({"strategy": "round_robin", "pivot": 0}, "only used by strategy `pivot`"),
        ({"completions": [A], "strategy": "pivot"}, "at least two"),
        ({"strategy": "bogus"}, "'round_robin', 'knockout', 'circular' or 'swiss'"),
        ({"strategy": "swiss", "reference": R}, "only used by strategy `reference`"),
        ({"completions": [A], "strategy": "knockout"}, "at least two"),
        ({"debias": "maybe"}, "'none' or 'swap'"),
        ({"completions": []}, "at least 1 item"),
        ({"max_tokens": 999_999}, "REFLECTRM_MAX_TOKENS_LIMIT"),
    ],
)
def test_bad_rewards_requests_are_422_saying_what_to_fix(client: TestClient, extra, needle):
    r = client.post("/v1/rewards", json={"prompt": Q, "completions": [A, B], **extra})
    assert r.status_code == 422
    assert needle in r.text


def test_group_over_the_limit_and_too_long_completion():
    with client_for(engine(max_model_len=1500), max_group_size=2) as c:
        r = c.post("/v1/rewards", json={"prompt": Q, "completions": [A, B, C]})
        assert r.status_code == 422
        assert "REFLECTRM_MAX_GROUP_SIZE" in r.json()["detail"]
        long = " ".join(["word"] * 1000)
        r = c.post(
            "/v1/rewards", json={"prompt": Q, "completions": [A, long], "reference": R, **vote()}
        )
        assert r.status_code == 413
        assert "completion 1 against the reference" in r.json()["detail"]


# --- OpenRLHF /get_reward --------------------------------------------------------------------------

PROMPT = "<|im_start|>user\nWhat is asked?<|im_end|>\n<|im_start|>assistant\n"


def openrlhf_payload(response: str, label: str | None = R) -> dict:
    # openrlhf 0.11.2, openrlhf/utils/agent.py SingleTurnAgentExecutor.execute ->
    # _fetch_rewards_via_http: one sample per call, query = decode(prompt tokens + action tokens).
    return {"query": [PROMPT + response], "prompts": [PROMPT], "labels": [label]}


def test_get_reward_judges_the_response_against_the_label(client: TestClient):
    r = client.post("/get_reward?mode=vote&seed=3", json=openrlhf_payload(A))
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["rewards"] == [0.625]
    assert body["scores"] == [0.625]
    logs = body["extra_logs"]
    assert logs["judge_reward_first_order"] == [0.875]
    assert logs["judge_reward_second_order"] == [0.375]
    assert logs["judge_consistent"] == [0.0]  # A won shown first, lost shown second
    assert logs["judge_inconsistent"] == [1.0]
    assert logs["judge_no_verdict"] == [0.0]
    assert all(len(v) == 1 and isinstance(v[0], float) for v in logs.values())


def test_get_reward_no_verdict_is_neutral_and_empty_is_zero():
    with client_for(ScriptedEngine(stage1=[judgment(None)] * 8)) as c:
        body = c.post("/get_reward", json=openrlhf_payload(A)).json()
        assert body["rewards"] == [0.5]
        assert body["extra_logs"]["judge_no_verdict"] == [1.0]
        body = c.post("/get_reward", json=openrlhf_payload("")).json()
        assert body["rewards"] == [0.0]
        assert body["extra_logs"]["judge_no_verdict"] == [0.0]


@pytest.mark.parametrize(
    ("payload", "query", "needle"),
    [
        ({"query": ["Something else"], "prompts": [PROMPT], "labels": [R]}, "", "does not start"),
        (openrlhf_payload(A, label=""), "", "no label"),
        (openrlhf_payload(A, label=None), "", "--data.label_key"),
        ({"query": [PROMPT + A], "prompts": [PROMPT], "labels": [R, R]}, "", "one entry per"),
        (openrlhf_payload(A), "?mode=best", "'reflect', 'single', 'vote' or 'margin'"),
        (openrlhf_payload(A), "?temperature=2", "Extra inputs"),
    ],
)
def test_get_reward_bad_input_is_422(client: TestClient, payload, query, needle):
    r = client.post("/get_reward" + query, json=payload)
    assert r.status_code == 422
    assert needle in r.text


def test_get_reward_reply_as_openrlhf_reads_it():
    """The reply through OpenRLHF's own handling, copied from openrlhf 0.11.2:
    openrlhf/utils/agent.py (`_post_request` inside `_fetch_rewards_via_http`: aiohttp POST with a
    180 s total timeout, raise_for_status, 5 tries 1 s apart; then `rewards_info.get("scores")`
    falling back to "rewards", and `extra_logs`) and
    openrlhf/trainer/ppo_utils/samples_generator.py (`torch.tensor([reward_val])`, and
    `torch.tensor([value])` for every extra_logs entry)."""
    aiohttp = pytest.importorskip("aiohttp")
    torch = pytest.importorskip("torch")

    async def post_request(url, data, try_max_times=5):
        timeout = aiohttp.ClientTimeout(total=180)
        for _ in range(try_max_times):
            try:
                async with aiohttp.ClientSession(timeout=timeout) as session:  # noqa: SIM117
                    async with session.post(url, json=data) as response:
                        response.raise_for_status()
                        return await response.json()
            except aiohttp.ClientError:
                pass
            await asyncio.sleep(1)
        raise RuntimeError("Request error")

    with served(engine()) as url:
        rewards_info = asyncio.run(
            post_request(f"{url}/get_reward?mode=vote&seed=3", openrlhf_payload(A))
        )
    score_value = rewards_info.get("scores")
    if score_value is None:
        score_value = rewards_info.get("rewards")
    reward_val = rewards_info.get("rewards")
    info = {"reward": torch.tensor([reward_val]), "score": torch.tensor([score_value])}
    for key, value in (rewards_info.get("extra_logs") or {}).items():
        info[key] = torch.tensor([value])
    assert info["reward"].item() == pytest.approx(0.625)
    assert info["judge_reward_first_order"].item() == pytest.approx(0.875)


def test_get_reward_splits_a_query_whose_prompt_was_cut_from_the_left(client: TestClient):
    """OpenRLHF cuts a prompt longer than max_length - max_tokens tokens from the left before
    decoding prompt + response into `query`, and still sends the whole prompt: the query
    starts with the end of the prompt (after a broken character, here U+FFFD)."""
    long_prompt = "<|im_start|>user\n" + "Context sentence. " * 40 + "What is asked?<|im_end|>\n"
    long_prompt += "<|im_start|>assistant\n"
    kept = "\ufffd" + long_prompt[-120:]
    body = {"query": [kept + A], "prompts": [long_prompt], "labels": [R]}
    r = client.post("/get_reward?mode=vote&seed=3", json=body)
    assert r.status_code == 200, r.text
    # The same reward as the uncut query's (test_get_reward_judges_the_response_against_the_label
    # with its prompt): A was told apart exactly.
    uncut = {"query": [long_prompt + A], "prompts": [long_prompt], "labels": [R]}
    assert (
        r.json()["rewards"]
        == client.post("/get_reward?mode=vote&seed=3", json=uncut).json()["rewards"]
    )
    assert r.json()["rewards"] == [0.625]
    # Unrelated text is still refused, saying why.
    bad = {"query": ["Something else, and a response."], "prompts": [long_prompt], "labels": [R]}
    r = client.post("/get_reward", json=bad)
    assert r.status_code == 422
    assert "does not start with its `prompts` entry" in r.text


def test_get_reward_debias_none_has_no_consistency_in_the_logs(client: TestClient):
    r = client.post("/get_reward?mode=vote&seed=3&debias=none", json=openrlhf_payload(A))
    assert r.status_code == 200, r.text
    logs = r.json()["extra_logs"]
    assert "judge_consistent" not in logs
    assert "judge_inconsistent" not in logs
    assert set(logs) == {
        "judge_reward_first_order",
        "judge_reward_second_order",
        "judge_no_verdict",
        "judge_failed",
        "judge_generated_tokens",
    }


def openrlhf_executor(url: str, total_timeout_s: float):
    """OpenRLHF 0.11.2's own remote-reward client (openrlhf/utils/agent.py, vendored in
    tests/frameworks: `SingleTurnAgentExecutor._fetch_rewards_via_http`), its per-try total
    timeout (180 s there) made ``total_timeout_s``."""
    import aiohttp

    from tests.frameworks import load_openrlhf_agent

    agent = load_openrlhf_agent()
    agent.aiohttp = types.SimpleNamespace(  # the module's `aiohttp`, read when the code runs
        ClientTimeout=lambda total: aiohttp.ClientTimeout(total=total_timeout_s),
        ClientSession=aiohttp.ClientSession,
        ClientError=aiohttp.ClientError,
    )
    return agent.SingleTurnAgentExecutor(url)


def test_an_openrlhf_retry_after_its_timeout_joins_the_first_try():
    """Each try of OpenRLHF's client has a total timeout, then it sleeps 1 s and tries again,
    five times. Here the timeout is 1 s and the judgment takes 2.5 s: the first try gives up
    at 1 s, its retry arrives at about 2 s and joins the judgment still running (the service
    keeps it REFLECTRM_RETRY_GRACE_S, 5 s, after the disconnect), and gets its answer: two
    engine requests (the two orders of one judgment), not four."""
    eng = engine(delay_s=2.5)
    with served(eng, swap_check_fraction=0) as url:
        executor = openrlhf_executor(f"{url}/get_reward?mode=vote&seed=3", 1.0)
        payload = openrlhf_payload(A)
        started = time.monotonic()
        out = asyncio.run(
            executor._fetch_rewards_via_http(
                payload["query"], payload["prompts"], payload["labels"]
            )
        )
        took = time.monotonic() - started
    assert out[0]["rewards"] == [0.625]
    assert len(eng.calls) == 2
    assert took < 4.0


def test_without_the_grace_every_openrlhf_retry_starts_over_and_the_reward_is_lost():
    """The same with REFLECTRM_RETRY_GRACE_S=0: each try's judgment is aborted when it gives
    up, each retry starts a new one that cannot finish within its timeout either, and after
    five tries OpenRLHF gives up (it then logs the error and leaves the reward empty)."""
    eng = engine(delay_s=2.5)
    with served(eng, retry_grace_s=0.0, swap_check_fraction=0) as url:
        executor = openrlhf_executor(f"{url}/get_reward?mode=vote&seed=3", 1.0)
        payload = openrlhf_payload(A)
        with pytest.raises(RuntimeError, match="5 times"):
            asyncio.run(
                executor._fetch_rewards_via_http(
                    payload["query"], payload["prompts"], payload["labels"]
                )
            )
    assert len(eng.calls) >= 8  # two orders for each of the five tries (some may be aborted)


# --- admission under an RLHF burst -------------------------------------------------------------


def test_a_512_call_burst_waits_in_the_queue_and_is_served_not_refused():
    """A 64 x 8 GRPO step of per-sample calls at once, over real HTTP: with 32 slots, 480
    judgments wait in the queue (bounded by REFLECTRM_MAX_QUEUED_JUDGMENTS, default 2048) and
    every call is answered 200."""
    eng = engine(delay_s=0.01)

    async def burst(url: str) -> list[int]:
        limits = httpx.Limits(max_connections=512)
        async with httpx.AsyncClient(base_url=url, limits=limits, timeout=120) as http:
            payload = {"prompt": Q, "responses": [A, B], "mode": "vote"}
            calls = [http.post("/v1/judge", json={**payload, "seed": i}) for i in range(512)]
            responses = await asyncio.gather(*calls)
        # A fresh connection: a pooled one may have idled past the server's keep-alive (5 s)
        # during the burst and be closed by it just as it is reused.
        async with httpx.AsyncClient(base_url=url, timeout=120) as http:
            metrics = (await http.get("/metrics")).text
        assert "reflectrm_queue_wait_seconds_count 512.0" in metrics
        assert 'reflectrm_judgments_total{mode="vote",outcome="verdict"} 512.0' in metrics
        return [r.status_code for r in responses]

    with served(eng, max_concurrent_judgments=32, swap_check_fraction=0) as url:
        statuses = asyncio.run(burst(url))
    assert statuses == [200] * 512
    assert len(eng.calls) == 512


def test_a_group_takes_one_slot_per_judgment_and_never_deadlocks():
    # Two slots, a round robin of 4 completions with swap: 12 judgments through 2 slots.
    eng = engine(delay_s=0.01)
    with client_for(eng, max_concurrent_judgments=2) as c:
        body = c.post(
            "/v1/rewards",
            json={"prompt": Q, "completions": [A, B, C, R], "strategy": "round_robin", **vote()},
        ).json()
        metrics = c.get("/metrics").text
    assert body["judgments"] == 12
    assert "reflectrm_queue_wait_seconds_count 12.0" in metrics
    assert 'reflectrm_judgments_total{mode="vote",outcome="verdict"}' in metrics
    assert 'reflectrm_swap_checks_total{result="consistent",source="requested"}' in metrics
