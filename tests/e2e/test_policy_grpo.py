"""Two GRPO steps of a tiny policy against the served judge, through the example a team copies
(examples/policy_grpo.py, the loop of docs/rlhf.md's policy run): the reward TRL logs for each
completion is the one the service returned for it, the service did the engine work the floor
predicts (two verdict prefills per distinct completion, judged against its reference in both
orders; the suite's judge has no likelihood weight), and the policy's adapters moved."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import httpx
import pytest

from examples.policy_grpo import RunSettings, build_trainer
from loadtests.common.metrics import parse_metrics
from reflectrm.checkpoints.base import default_cache_dir, smollm2_dir
from reflectrm.integrations.trl import ReflectRMReward, completion_text
from tests.e2e.conftest import LiveService
from tests.unit.tiny_models import save_tiny_judge

STEPS, PROMPTS, GROUP = 2, 2, 4


class Recorded:
    """The service's reward function, recording what it was given and what it returned."""

    def __init__(self, url: str) -> None:
        self.inner = ReflectRMReward(url, strategy="reference", reference_column="reference")
        self.__name__ = self.inner.__name__
        self.calls: list[tuple[int, list[str], list[str], list[float | None]]] = []

    async def __call__(self, prompts: list[Any], completions: list[Any], **columns: Any) -> Any:
        rewards = await self.inner(prompts=prompts, completions=completions, **columns)
        step = columns["trainer_state"].global_step
        texts = [completion_text(c) for c in completions]
        self.calls.append((step, texts, list(columns["reference"]), list(rewards)))
        return rewards


def engine_requests(url: str) -> float:
    text = httpx.get(f"{url}/metrics", timeout=60).text
    return parse_metrics(text, by="name").get("reflectrm_engine_requests_total", 0.0)


def test_two_grpo_steps_of_a_policy_on_the_served_judges_rewards(
    live: LiveService, tmp_path: Path
) -> None:
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(smollm2_dir(default_cache_dir()))
    policy = save_tiny_judge(tmp_path / "policy", tokenizer, layers=1)
    settings = RunSettings(
        policy=str(policy),
        steps=STEPS,
        prompts_per_step=PROMPTS,
        group_size=GROUP,
        max_completion_length=8,
        save_steps=100,
    )
    reward = Recorded(live.url)
    trainer = build_trainer(settings, live.url, tmp_path / "run", reward_funcs=[reward])

    def lora_b() -> dict[str, Any]:
        return {n: p.detach().clone() for n, p in trainer.model.named_parameters() if "lora_B" in n}

    before, requests_before = lora_b(), engine_requests(live.url)
    trainer.train()
    after, requests_after = lora_b(), engine_requests(live.url)

    assert trainer.state.global_step == STEPS
    assert len(reward.calls) == STEPS
    # Per completion: the last step's rewards as TRL keeps them, and each step's logged mean.
    _, texts, _, returned = reward.calls[-1]
    kept = list(trainer._logs["rewards"]["reflectrm"])
    assert [completion_text(c) for c in trainer._logs["completion"]] == texts
    assert len(kept) == len(returned) == PROMPTS * GROUP
    for got, sent in zip(kept, returned, strict=True):
        assert math.isnan(got) if sent is None else got == pytest.approx(sent, abs=1e-6)
    logged = [r["rewards/reflectrm/mean"] for r in trainer.state.log_history if "loss" in r]
    for (_, _, _, values), mean in zip(reward.calls, logged, strict=True):
        scored = [v for v in values if v is not None]
        assert scored, "the service rewarded no completion of the step"
        assert mean == pytest.approx(sum(scored) / len(scored), abs=1e-6)
    # The engine's floor: two verdict prefills per distinct non-empty completion of a prompt
    # that is not its reference (the judge's likelihood weight is 0: no likelihood pass).
    predicted = 0
    for _, texts, references, _ in reward.calls:
        distinct = {(ref, t) for t, ref in zip(texts, references, strict=True)}
        predicted += 2 * sum(1 for ref, t in distinct if t.strip() and t != ref)
    assert requests_after - requests_before == predicted
    # The policy learned something: its adapters moved from their zero start.
    assert before.keys() == after.keys()
    assert before
    assert any(not after[n].equal(before[n]) for n in before)
