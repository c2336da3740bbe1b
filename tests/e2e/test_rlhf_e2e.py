"""The RLHF endpoints on the real engine and the default model, and a real TRL GRPOTrainer run
whose reward function is the live service."""

from __future__ import annotations

import concurrent.futures
import math
from pathlib import Path

import httpx
import pytest

# No skip: `make test` installs the training extra, and CI must fail loudly if it is missing.
import trl  # noqa: F401

from loadtests.common.metrics import parse_metrics
from reflectrm.checkpoints.base import default_cache_dir
from reflectrm.checkpoints.resolve import resolve_model
from reflectrm.integrations.trl import ReflectRMReward
from reflectrm.judging.prompts import TEMPLATE_VERSION
from tests.e2e.conftest import E2E_MODEL, LiveService

Q = "What is the capital of France?"
GOOD, BAD, ODD = "The capital of France is Paris.", "The capital of France is Berlin.", "Cheese."


def test_rewards_round_robin_on_the_real_engine(client: httpx.Client):
    body = {"prompt": Q, "completions": [GOOD, BAD, ODD], "mode": "single", "seed": 4}
    r = client.post("/v1/rewards", json=body)
    assert r.status_code == 200, r.text
    out = r.json()
    assert out["strategy"] == "round_robin"
    assert out["debias"] == "swap"
    assert out["judgments"] == 6
    assert len(out["comparisons"]) == 3
    assert out["usage"]["engine_requests"] == 6  # single mode: one engine request per order
    for reward in out["rewards"]:
        assert reward is None or 0.0 <= reward <= 1.0
    for comp in out["comparisons"]:
        assert len(comp["orders"]) == 2
        assert comp["scores"][0] + comp["scores"][1] == pytest.approx(1.0)
        mean = (comp["orders"][0]["scores"][0] + comp["orders"][1]["scores"][0]) / 2
        assert comp["scores"][0] == pytest.approx(mean)


def test_batch_item_matches_the_single_call_and_bad_items_get_their_own_error(
    client: httpx.Client,
):
    pair = {"prompt": Q, "responses": [GOOD, BAD], "mode": "single", "seed": 9}
    too_long = {"prompt": "word " * 5000, "responses": [GOOD, BAD], "mode": "single"}
    r = client.post("/v1/judge/batch", json={"items": [pair, too_long, {"prompt": Q}]})
    assert r.status_code == 200, r.text
    results = r.json()["results"]
    assert [x["status"] for x in results] == [200, 413, 422]
    assert "context is 4096 tokens" in results[1]["detail"]
    # Another tenant, so that the single call is judged, not answered from the batch's cache.
    single = client.post("/v1/judge", json=pair, headers={"X-Reflectrm-Tenant": "single"}).json()
    item = results[0]["result"]
    assert (item["winner"], item["scores"], item["analysis"]) == (
        single["winner"],
        single["scores"],
        single["analysis"],
    )


def test_get_reward_for_openrlhf(client: httpx.Client):
    prompt = "<|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\n"
    payload = {"query": [prompt + GOOD], "prompts": [prompt], "labels": [BAD]}
    r = client.post("/get_reward?mode=single", json=payload)
    assert r.status_code == 200, r.text
    out = r.json()
    assert len(out["rewards"]) == 1
    assert 0.0 <= out["rewards"][0] <= 1.0
    assert out["scores"] == out["rewards"]
    assert set(out["extra_logs"]) >= {"judge_consistent", "judge_no_verdict"}


def test_a_cohort_of_four_openrlhf_calls_gets_four_group_rewards(live: LiveService):
    """OpenRLHF's shape: each of a prompt's 4 samples posted alone, concurrently, to
    /get_reward?group_size=4; the cohort is judged once (knockout, swap: 3 comparisons, 6
    judgments) and every call gets its sample's reward from it."""
    prompt = "<|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\n"
    texts = [GOOD, BAD, ODD, "Paris."]
    params = {"group_size": 4, "strategy": "knockout", "mode": "single", "seed": 21}

    def post(text: str) -> httpx.Response:
        body = {"query": [prompt + text], "prompts": [prompt], "labels": [None]}
        return httpx.post(f"{live.url}/get_reward", params=params, json=body, timeout=300)

    before = judgments_total(live.url)
    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        replies = list(pool.map(post, texts))
    assert [r.status_code for r in replies] == [200] * 4, [r.text for r in replies]
    rewards = [r.json()["rewards"][0] for r in replies]
    for reward in rewards:
        assert 0.0 <= reward <= 1.0
    logs = [r.json()["extra_logs"] for r in replies]
    assert [log["judge_cohort_arrived"] for log in logs] == [[4.0]] * 4
    assert [log["judge_cohort_cut"] for log in logs] == [[0.0]] * 4
    # Knockout of 4 with swap: 3 comparisons in 2 rounds, 6 judgments for 4 rewards, once.
    assert [log["judge_judgments_per_reward"] for log in logs] == [[1.5]] * 4
    assert judgments_total(live.url) - before == 3
    # The same group through /v1/rewards, ordered by content as the cohort was: the same
    # rewards (the same seed, the same design), answered from the cohort's cached judging.
    group = {"prompt": prompt, "completions": sorted(texts), "strategy": "knockout"}
    body = {**group, "mode": "single", "seed": 21}
    out = httpx.post(f"{live.url}/v1/rewards", json=body, timeout=300).json()
    by_text = dict(zip(sorted(texts), out["rewards"], strict=True))
    assert rewards == [by_text[t] for t in texts]


def test_a_knockout_group_through_v1_rewards(client: httpx.Client):
    texts = [GOOD, BAD, ODD, "Paris.", "Berlin."]
    body = {"prompt": Q, "completions": texts, "strategy": "knockout", "mode": "single", "seed": 8}
    r = client.post("/v1/rewards", json=body)
    assert r.status_code == 200, r.text
    out = r.json()
    # 5 entries: 4 comparisons over ceil(log2 5) = 3 rounds, both orders each.
    assert out["judgments"] == 8
    assert out["rounds"] == 3
    assert len(out["comparisons"]) == 4
    assert out["usage"]["engine_requests"] == 8
    survived = [c["rounds_survived"] for c in out["completions"]]
    assert max(survived) == 3  # the champion went through every round
    assert sum(s == 3 for s in survived) == 1
    for reward in out["rewards"]:
        assert reward is None or 0.0 <= reward <= 1.0


def test_trl_grpo_trainer_with_the_service_as_its_reward(live: LiveService, tmp_path: Path):
    """Two GRPO steps of the default model, rewarded by the live service through the TRL
    adapter (reference strategy, single mode to keep it short)."""
    import torch
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import GRPOConfig, GRPOTrainer

    base = resolve_model(E2E_MODEL, default_cache_dir(), TEMPLATE_VERSION)
    tokenizer = AutoTokenizer.from_pretrained(base)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    model = AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32)
    data = Dataset.from_list(
        [
            {"prompt": [{"role": "user", "content": q}], "reference": ref}
            for q, ref in [
                (Q, GOOD),
                ("What is 2 + 2?", "4"),
                ("Name a primary colour.", "Red."),
                ("How many legs does a spider have?", "Eight."),
            ]
        ]
    )
    reward = ReflectRMReward(live.url, strategy="reference", mode="single", seed=3)
    config = GRPOConfig(
        output_dir=str(tmp_path / "grpo"),
        max_steps=2,
        per_device_train_batch_size=2,
        num_generations=2,
        max_completion_length=12,
        learning_rate=1e-6,
        beta=0.0,
        use_cpu=True,
        report_to="none",
        logging_steps=1,
        save_strategy="no",
        seed=1,
    )
    before = judgments_total(live.url)
    trainer = GRPOTrainer(
        model=model,
        reward_funcs=[reward],
        args=config,
        train_dataset=data,
        processing_class=tokenizer,
    )
    trainer.train()
    after = judgments_total(live.url)
    assert trainer.state.global_step == 2
    logged = [
        row["rewards/reflectrm/mean"]
        for row in trainer.state.log_history
        if "rewards/reflectrm/mean" in row
    ]
    assert len(logged) == 2
    assert all(math.isnan(x) or 0.0 <= x <= 1.0 for x in logged)
    assert any(not math.isnan(x) for x in logged)
    # At least 2 steps x 2 completions, each judged against its reference (in both orders).
    assert after - before >= 4


def judgments_total(url: str) -> float:
    """Pair judgments answered so far (every mode and outcome), from /metrics."""
    text = httpx.get(f"{url}/metrics", timeout=60).text
    return parse_metrics(text, by="name").get("reflectrm_judgments_total", 0.0)
