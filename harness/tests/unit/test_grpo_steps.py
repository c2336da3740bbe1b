"""Two steps of the bundled GRPO job on a tiny model, on the CPU and without vLLM: the LoRA
adapters move, and the reward TRL logs for each step is the mean of what ``verdict_reward``
returned on the completions generated in that step.

The tiny model is first taught (a few seconds of supervised steps) to answer either with the
shortest well-formed verdict, "Response 2 is better than Response 1", or with a malformed
sentence, each about half the time. So the rewards of a label-2 group differ (1.0 and 0.0), its
advantages are not all zero and the adapters get a gradient; a label-1 group scores 0.0 on both
answers (a wrong verdict, a malformed output). An untrained tiny model would almost never write
the format and score 0 throughout, which would make the comparison of rewards empty.
"""

from __future__ import annotations

import functools
import json
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from reflectrm.engines.chat import chat_template_kwargs
from reflectrm.judging.prompts import (
    TEMPLATE_VERSION,
    get_template,
    shortest_output,
)
from reflectrm.judging.types import Message
from reflectrm_harness.prompts import preference_messages
from reflectrm_harness.training.grpo import train as train_module
from reflectrm_harness.training.grpo.config import load_settings
from reflectrm_harness.training.grpo.rewards import completion_text, verdict_reward
from reflectrm_harness.training.grpo.train import METRICS_FILE, train
from support.tiny_models import QUESTIONS, save_tiny_judge

# What the taught tiny model writes: a parseable verdict for Response 2, or a malformed output.
WELL_FORMED = shortest_output("Response 2 is better than Response 1")
MALFORMED = "No verdict."
# Labels of the items: any two of them hold a label-2 item, whose group's rewards differ.
LABELS = (2, 1, 2, 2)
GROUP_SIZE = 4
PROMPTS_PER_BATCH = 2
STEPS = 2


def _items() -> list[dict[str, Any]]:
    template = get_template(TEMPLATE_VERSION)
    items = []
    for k, ((question, better, worse), label) in enumerate(zip(QUESTIONS, LABELS, strict=False)):
        shown = (better, worse) if label == 1 else (worse, better)
        items.append(
            {
                "id": f"q{k}#preference",
                "pair_id": f"q{k}",
                "kind": "preference",
                "prompt": preference_messages(template, (Message("user", question),), *shown),
                "label": label,
                "template_version": TEMPLATE_VERSION,
            }
        )
    return items


def _teach(folder: Path, tokenizer: Any, prompts: Sequence[list[dict[str, str]]]) -> None:
    """Supervised steps on the model in ``folder``: after each prompt, WELL_FORMED and MALFORMED
    (each ended by the end-of-turn token) equally, so sampling picks either about half the time."""
    import torch
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(folder)
    kwargs = chat_template_kwargs(tokenizer)
    sequences = []
    for prompt in prompts:
        text = tokenizer.apply_chat_template(
            prompt, tokenize=False, add_generation_prompt=True, **kwargs
        )
        prompt_ids = tokenizer.encode(text, add_special_tokens=False)
        for answer in (WELL_FORMED, MALFORMED):
            answer_ids = tokenizer.encode(answer + tokenizer.eos_token, add_special_tokens=False)
            sequences.append((prompt_ids, answer_ids))
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-2)
    for _ in range(40):
        loss = torch.zeros(())
        for prompt_ids, answer_ids in sequences:
            ids = torch.tensor([prompt_ids + answer_ids])
            hidden = model.model(input_ids=ids).last_hidden_state
            logits = model.lm_head(hidden[0, len(prompt_ids) - 1 : -1])
            # Summed over tokens: a mean per answer would favour the shorter one's first token.
            loss = loss + torch.nn.functional.cross_entropy(
                logits, torch.tensor(answer_ids), reduction="sum"
            )
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    model.save_pretrained(folder)


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory: pytest.TempPathFactory, smol_tokenizer: Any) -> Path:
    folder = save_tiny_judge(tmp_path_factory.mktemp("tiny-grpo"), smol_tokenizer, layers=1)
    _teach(folder, smol_tokenizer, [item["prompt"] for item in _items()])
    return folder


@dataclass
class Call:
    """One call of the reward function by TRL: the step it was made in, what it was given and
    what it returned."""

    step: int
    prompts: list[Any]
    completions: list[str]
    labels: list[int]
    kinds: list[str]
    rewards: list[float]


@dataclass
class Spy:
    calls: list[Call] = field(default_factory=list)
    lora_before: dict[str, Any] = field(default_factory=dict)
    lora_after: dict[str, Any] = field(default_factory=dict)


@pytest.fixture(scope="module")
def run(tiny_model: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Spy]:
    """Two steps of ``train`` with ``verdict_reward`` recorded and the adapters' ``lora_B``
    weights read before and after ``trainer.train()``."""
    tmp = tmp_path_factory.mktemp("grpo-run")
    data = tmp / "data" / "train.jsonl"
    data.parent.mkdir()
    data.write_text("".join(json.dumps(item) + "\n" for item in _items()))
    spy = Spy()

    @functools.wraps(verdict_reward)  # TRL names the logged metric after __name__
    def recording_reward(
        completions: Sequence[Any], label: Sequence[int], kind: Sequence[str], **kwargs: Any
    ) -> list[float]:
        rewards = verdict_reward(completions, label, kind, **kwargs)
        spy.calls.append(
            Call(
                step=kwargs["trainer_state"].global_step,
                prompts=list(kwargs["prompts"]),
                completions=[completion_text(c) for c in completions],
                labels=[int(y) for y in label],
                kinds=list(kind),
                rewards=list(rewards),
            )
        )
        return rewards

    real_export = train_module.train_and_export

    def spying_export(trainer: Any, *args: Any, **kwargs: Any) -> Path:
        def lora_b() -> dict[str, Any]:
            return {
                n: p.detach().clone() for n, p in trainer.model.named_parameters() if "lora_B" in n
            }

        spy.lora_before.update(lora_b())
        real_train = trainer.train

        def train_then_read(*a: Any, **k: Any) -> Any:
            result = real_train(*a, **k)
            spy.lora_after.update(lora_b())  # before the export merges the adapters away
            return result

        trainer.train = train_then_read
        return real_export(trainer, *args, **kwargs)

    cfg = load_settings(
        None,
        {
            "model": str(tiny_model),
            "output_dir": str(tmp / "run"),
            "max_steps": STEPS,
            "prompts_per_batch": PROMPTS_PER_BATCH,
            "group_size": GROUP_SIZE,
            "micro_batch": 4,
            # The shortest well-formed output is 21 tokens and the end-of-turn token.
            "max_completion_length": 24,
            "lora": True,
            "kl_beta": 0.0,
            "temperature": 1.0,
        },
    )
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(train_module, "verdict_reward", recording_reward)
        mp.setattr(train_module, "train_and_export", spying_export)
        train(cfg, data, cache_dir=tmp / "cache")
    return tmp / "run", spy


def test_the_reward_function_reads_the_verdict_against_the_label() -> None:
    text = "<Analysis>x</Analysis><Result>Response 2 is better than Response 1</Result>"
    assert verdict_reward([text, text], [2, 1], ["preference", "preference"]) == [1.0, 0.0]
    assert verdict_reward([WELL_FORMED, MALFORMED], [2, 2], ["preference"] * 2) == [1.0, 0.0]


def test_two_steps_move_the_lora_adapters(run: tuple[Path, Spy]) -> None:
    import torch

    out, spy = run
    assert spy.lora_before, "no lora_B weights: the job did not train LoRA adapters"
    assert spy.lora_before.keys() == spy.lora_after.keys()
    assert all(not t.any() for t in spy.lora_before.values())  # PEFT starts lora_B at zero
    moved = [n for n in spy.lora_before if not torch.equal(spy.lora_before[n], spy.lora_after[n])]
    assert moved, "no lora_B weight changed in two steps"
    assert (out / "checkpoint" / "config.json").is_file()  # exported and validated


def test_the_logged_reward_is_the_mean_of_verdict_reward_on_each_step(
    run: tuple[Path, Spy],
) -> None:
    out, spy = run
    items = _items()
    label_of = {json.dumps(item["prompt"]): item["label"] for item in items}

    # One call per step, on every completion of that step, with the items' own labels.
    assert [c.step for c in spy.calls] == list(range(STEPS))
    for call in spy.calls:
        assert len(call.completions) == PROMPTS_PER_BATCH * GROUP_SIZE
        assert call.kinds == ["preference"] * len(call.completions)
        assert call.labels == [label_of[json.dumps(p)] for p in call.prompts]
        assert call.rewards == verdict_reward(call.completions, call.labels, call.kinds)
        for text, label, reward in zip(call.completions, call.labels, call.rewards, strict=True):
            if text == WELL_FORMED:
                assert reward == (1.0 if label == 2 else 0.0)
            elif text == MALFORMED:
                assert reward == 0.0

    # The comparison means something: right verdicts and wrong or malformed outputs both occur.
    rewards = [r for c in spy.calls for r in c.rewards]
    assert 0.0 in rewards
    assert 1.0 in rewards

    rows = [json.loads(line) for line in (out / METRICS_FILE).read_text().splitlines()]
    logged = {row["step"]: row for row in rows if "reward" in row}
    assert sorted(logged) == [c.step + 1 for c in spy.calls]  # logged once the step is done
    for call in spy.calls:
        row = logged[call.step + 1]
        mean = statistics.fmean(call.rewards)
        assert row["rewards/verdict_reward/mean"] == pytest.approx(mean, abs=1e-6)
        assert row["reward"] == pytest.approx(mean, abs=1e-6)  # the only reward (weight 1)
        std = statistics.stdev(call.rewards)
        assert row["rewards/verdict_reward/std"] == pytest.approx(std, abs=1e-6)
        # each step holds both positions (the items are ordered so), and its row the mean
        # reward of each position's completions
        assert sorted(set(call.labels)) == [1, 2]
        for y in (1, 2):
            pairs = zip(call.rewards, call.labels, strict=True)
            mean_y = statistics.fmean(r for r, label in pairs if label == y)
            assert row[f"reward_by/right_{y}"] == pytest.approx(mean_y, abs=1e-6)
        # no judgments.jsonl beside these items: no length stratum
        assert "reward_by/chosen_longer" not in row
