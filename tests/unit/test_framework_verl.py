"""The verl adapter as verl 0.9.1 loads and calls it: its own loader
(verl/trainer/ppo/reward.py ``get_custom_reward_fn`` through ``load_extern_object``, ``pkg://``
path), its reward loop's ``run_single``, its legacy reward manager and main_eval's
``process_item``, each from verl's files as they are (tests/frameworks/verl-0.9.1), against a
stand-in for the service (tests/frameworks/fake.py: against a reference, a longer completion
gets 0.75, a shorter 0.25; in a cohort, rank / (n - 1) by length)."""

from __future__ import annotations

import asyncio
import inspect
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
import torch

from tests.frameworks import DataProto, DataProtoItem, verl
from tests.frameworks.fake import fake_service

Q = "What is asked?"
PKG = "pkg://reflectrm.integrations.verl"


def config(name: str, **kwargs: Any) -> SimpleNamespace:
    """What get_custom_reward_fn reads: config.reward.get('custom_reward_function')."""
    fn = {"path": PKG, "name": name, "reward_kwargs": kwargs}
    return SimpleNamespace(reward={"custom_reward_function": fn})


class Tokenizer:
    """Token i is the i-th word of ``words``."""

    def __init__(self, words: list[str]) -> None:
        self.words = words

    def decode(self, ids: Any, skip_special_tokens: bool = True) -> str:
        return " ".join(self.words[int(i)] for i in ids)


def item(words: list[str], response: list[int], extra_info: dict | None, ground_truth: Any):
    prompt = torch.tensor([0, 0])
    responses = torch.tensor(response + [0] * (4 - len(response)))
    mask = torch.tensor([1, 1] + [1] * len(response) + [0] * (4 - len(response)))
    non_tensor = {"data_source": "test", "reward_model": {"ground_truth": ground_truth}}
    if extra_info is not None:
        non_tensor["extra_info"] = extra_info
    batch = {"prompts": prompt, "responses": responses, "attention_mask": mask}
    return DataProtoItem(batch, non_tensor)


WORDS = ["<pad>", "short", "a", "longer", "answer", "here", "?"]


def run_loop(v: Any, fn: Any, items: list[DataProtoItem]) -> list[dict]:
    """The reward loop: a manager made on the worker's event loop, each sample's run_single
    concurrently (RewardLoopWorker compute_score_batch, or the agent loop as each sample
    finishes)."""

    async def main() -> list[dict]:
        manager = v.RewardLoopNaive(None, Tokenizer(WORDS), fn)
        return await asyncio.gather(*(manager.run_single(DataProto([i])) for i in items))

    return asyncio.run(main())


def test_the_reward_loop_awaits_compute_score_per_sample(monkeypatch):
    with fake_service(monkeypatch) as service, verl() as v:
        fn = v.get_custom_reward_fn(config("compute_score"))
        assert inspect.iscoroutinefunction(fn)  # verl awaits it
        items = [
            item(WORDS, [2, 3, 4], {"question": Q, "index": 0}, "an answer"),
            item(WORDS, [1], {"prompt": [{"role": "user", "content": Q}]}, "an answer"),
        ]
        out = run_loop(v, fn, items)
    assert [o["reward_score"] for o in out] == [0.75, 0.25]
    assert set(out[0]["reward_extra_info"]) == set(out[1]["reward_extra_info"])  # stackable
    assert out[0]["reward_extra_info"]["judge_consistent"] == 1.0
    # The two calls run concurrently: either may reach the service first.
    assert len(service.calls) == 2
    by_prompt = [b for _, _, b in service.calls if "prompt" in b]
    by_messages = [b for _, _, b in service.calls if "messages" in b]
    assert len(by_prompt) == 1
    assert len(by_messages) == 1
    body = by_prompt[0]
    assert (body["prompt"], body["completions"], body["reference"]) == (
        Q,
        ["a longer answer"],
        "an answer",
    )
    assert by_messages[0]["messages"] == [{"role": "user", "content": Q}]


def test_debias_none_leaves_consistency_out_of_the_logs(monkeypatch):
    monkeypatch.setenv("REFLECTRM_REWARD_DEBIAS", "none")
    with fake_service(monkeypatch), verl() as v:
        fn = v.get_custom_reward_fn(config("compute_score"))
        manager_out = run_loop(v, fn, [item(WORDS, [2, 3, 4], {"question": Q}, "an answer")])
    logs = manager_out[0]["reward_extra_info"]
    assert "judge_consistent" not in logs
    assert "judge_inconsistent" not in logs
    assert logs["judge_no_verdict"] == 0.0


def test_a_missing_ground_truth_is_an_error_not_the_text_none(monkeypatch):
    with fake_service(monkeypatch) as service, verl() as v:
        fn = v.get_custom_reward_fn(config("compute_score"))
        for missing in (None, "", "  "):
            with pytest.raises(ValueError, match="has none"):
                run_loop(v, fn, [item(WORDS, [1], {"question": Q}, missing)])
    assert service.calls == []


def test_the_legacy_reward_manager_calls_compute_score_sync(monkeypatch):
    with fake_service(monkeypatch) as service, verl() as v:
        fn = v.get_custom_reward_fn(config("compute_score_sync"))
        assert not inspect.iscoroutinefunction(fn)
        manager = v.LegacyNaive(Tokenizer(WORDS), num_examine=0, compute_score=fn)
        data = DataProto(
            [
                item(WORDS, [2, 3, 4], {"question": Q}, "an answer"),
                item(WORDS, [1], {"question": Q}, "an answer"),
            ]
        )
        out = manager(data, return_dict=True)
    # The reward sits on each response's last valid token.
    assert out["reward_tensor"][0, 2].item() == 0.75
    assert out["reward_tensor"][1, 0].item() == 0.25
    assert out["reward_extra_info"]["score"] == [0.75, 0.25]
    assert len(service.calls) == 2


@pytest.mark.filterwarnings("ignore:coroutine .* was never awaited:RuntimeWarning")
def test_the_async_compute_score_in_the_legacy_manager_is_what_breaks(monkeypatch):
    """Why compute_score_sync exists: the legacy manager takes the coroutine as the score."""
    with fake_service(monkeypatch), verl() as v:
        fn = v.get_custom_reward_fn(config("compute_score"))
        manager = v.LegacyNaive(Tokenizer(WORDS), num_examine=0, compute_score=fn)
        with pytest.raises(TypeError, match="coroutine"):
            manager(DataProto([item(WORDS, [1], {"question": Q}, "x")]))


def test_main_eval_gets_numbers_with_the_prompt_in_the_ground_truth(monkeypatch):
    with fake_service(monkeypatch), verl() as v:
        cfg = config("compute_score_eval")
        truth = {"ground_truth": {"prompt": Q, "reference": "an answer"}}
        source, mean = v.process_item(cfg, "test", ["a longer answer", "short"], truth)
        assert (source, mean) == ("test", np.mean([0.75, 0.25]))
        # Without the prompt there: a clear error, naming what to do.
        with pytest.raises(ValueError, match="main_eval"):
            v.process_item(cfg, "test", ["a longer answer"], {"ground_truth": "an answer"})


# --- cohorts -----------------------------------------------------------------------------------


def test_cohorts_group_the_samples_of_a_prompt_in_the_reward_loop(monkeypatch):
    monkeypatch.setenv("REFLECTRM_GROUP_SIZE", "3")
    monkeypatch.setenv("REFLECTRM_REWARD_STRATEGY", "swiss")
    with fake_service(monkeypatch) as service, verl() as v:
        fn = v.get_custom_reward_fn(config("compute_score"))
        # No ground truth needed: the samples are judged against each other. verl hands over
        # no uid, so the prompt is the key; two prompts' samples interleave.
        other = {"question": "Another question?"}
        items = [
            item(WORDS, [2, 3, 4], {"question": Q}, None),
            item(WORDS, [1], other, None),
            item(WORDS, [1], {"question": Q}, None),
            item(WORDS, [2, 4], {"question": Q}, None),
            item(WORDS, [2, 3, 4, 5], other, None),
            item(WORDS, [2, 4], other, None),
        ]
        out = run_loop(v, fn, items)
    assert [o["reward_score"] for o in out] == [1.0, 0.0, 0.0, 0.5, 1.0, 0.5]
    assert all(o["reward_extra_info"]["judge_cohort_cut"] == 0.0 for o in out)
    bodies = [b for path, _, b in service.calls if path == "/v1/rewards/sample"]
    assert len(bodies) == 6
    assert all(b["group_size"] == 3 and b["strategy"] == "swiss" for b in bodies)
    assert all(b.get("group_id") is None and "seed" not in b for b in bodies)


def test_a_cohort_key_can_be_named_from_extra_info(monkeypatch):
    monkeypatch.setenv("REFLECTRM_GROUP_SIZE", "2")
    monkeypatch.setenv("REFLECTRM_GROUP_KEY", "index")
    with fake_service(monkeypatch) as service, verl() as v:
        fn = v.get_custom_reward_fn(config("compute_score"))
        items = [
            item(WORDS, [2, 3], {"question": Q, "index": 4}, None),
            item(WORDS, [1], {"question": Q, "index": 4}, None),
        ]
        out = run_loop(v, fn, items)
        assert [o["reward_score"] for o in out] == [1.0, 0.0]
        assert {b["group_id"] for _, _, b in service.calls} == {"4"}
        with pytest.raises(ValueError, match="REFLECTRM_GROUP_KEY"):
            run_loop(v, fn, [item(WORDS, [1], {"question": Q}, None)])


def test_a_cohort_cut_by_its_timeout_is_flagged(monkeypatch):
    monkeypatch.setenv("REFLECTRM_GROUP_SIZE", "4")
    monkeypatch.setenv("REFLECTRM_COHORT_TIMEOUT_S", "0.2")
    with fake_service(monkeypatch) as service, verl() as v:
        fn = v.get_custom_reward_fn(config("compute_score"))
        items = [
            item(WORDS, [2, 3], {"question": Q}, None),
            item(WORDS, [1], {"question": Q}, None),
        ]
        out = run_loop(v, fn, items)
    assert [o["reward_extra_info"]["judge_cohort_cut"] for o in out] == [1.0, 1.0]
    assert [o["reward_extra_info"]["judge_cohort_arrived"] for o in out] == [2.0, 2.0]
    assert service.calls[0][2]["cohort_timeout_s"] == 0.2


# --- failures are flagged in verl's reward extra info, not passed off as rewards --------------


def test_a_member_without_reward_gets_its_cohorts_mean_and_the_flag(monkeypatch):
    """A cohort of three through verl's own reward loop; "?" gets no verdict (the stand-in's
    rule). Ordered (quality, text): "?", "short", "a longer answer" -> None, 0.5, 1.0; the
    failed member's score is the mean of the judged ones, (0.5 + 1.0) / 2 = 0.75, so the
    group's mean stays 0.75 and its advantage against it is zero; judge_failed says so."""
    monkeypatch.setenv("REFLECTRM_GROUP_SIZE", "3")
    with fake_service(monkeypatch), verl() as v:
        fn = v.get_custom_reward_fn(config("compute_score"))
        items = [item(WORDS, r, {"question": Q}, None) for r in ([2, 3, 4], [6], [1])]
        out = run_loop(v, fn, items)
    assert [o["reward_score"] for o in out] == [1.0, 0.75, 0.5]
    info = [o["reward_extra_info"] for o in out]
    assert [i["judge_failed"] for i in info] == [0.0, 1.0, 0.0]
    assert [i["judge_no_verdict"] for i in info] == [0.0, 1.0, 0.0]
    assert sum(o["reward_score"] for o in out) / 3 == 0.75
    assert len({frozenset(i) for i in info}) == 1  # the same keys: verl stacks them


@pytest.mark.parametrize("group_size", [None, "2"])
def test_a_judgment_that_timed_out_is_flagged_with_the_keys_of_a_judged_one(
    monkeypatch, group_size
):
    if group_size:
        monkeypatch.setenv("REFLECTRM_GROUP_SIZE", group_size)
    with fake_service(monkeypatch) as service, verl() as v:
        fn = v.get_custom_reward_fn(config("compute_score"))
        judged = run_loop(v, fn, [item(WORDS, [2, 3], {"question": Q}, "an answer")] * 2)
        service.fail_status = 504
        failed = run_loop(v, fn, [item(WORDS, [2, 3], {"question": Q}, "an answer")])
        legacy = v.get_custom_reward_fn(config("compute_score_sync"))
        failed_sync = legacy(
            data_source="test", solution_str="a", ground_truth="b", extra_info={"question": Q}
        )
    info = failed[0]["reward_extra_info"]
    assert failed[0]["reward_score"] == 0.5  # nothing of its group is known
    assert info["judge_failed"] == 1.0
    assert set(info) == set(judged[0]["reward_extra_info"])
    assert judged[0]["reward_extra_info"]["judge_failed"] == 0.0
    assert failed_sync["judge_failed"] == 1.0


def test_an_error_to_fix_is_raised_not_masked(monkeypatch):
    with fake_service(monkeypatch) as service, verl() as v:
        service.fail_status = 422
        fn = v.get_custom_reward_fn(config("compute_score"))
        with pytest.raises(Exception, match="422"):
            run_loop(v, fn, [item(WORDS, [2, 3], {"question": Q}, "an answer")])
