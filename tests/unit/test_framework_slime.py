"""The slime adapters against slime's documented reward-function contract, stated here in this
project's words (slime is on no package registry, so its code is not fetched into the tests; the
contract is read from its documentation, docs/en/get_started/customization.md and agent.md at
THUDM/slime 624b824a8, after v0.3.1):

- ``--custom-rm-path module.fn`` names the function; slime awaits it.
- Without ``--group-rm``: ``reward = await fn(args, sample)`` for each sample, and slime sets
  ``sample.reward``. A ``--custom-generate-function-path`` may return ``list[Sample]`` for one
  rollout (fan-out, the siblings sharing one ``rollout_id``); its reward call then gets that
  list and returns one reward per sample.
- With ``--group-rm``: ``rewards = await fn(args, samples)`` once per prompt's group, one reward
  per sample, set in order.
- A ``Sample`` has ``prompt`` (a string or messages), ``response``, ``label``, ``index``,
  ``group_index``, ``rollout_id``, ``metadata``, ``reward`` and ``remove_sample``; a sample with
  ``remove_sample`` true takes no part in the loss (slime zeroes its loss mask).

``Sample`` and ``run_rm`` below are this project's stand-ins for that contract. The service is
tests/frameworks/fake.py: against a reference, a longer response gets 0.75, a shorter 0.25; in
a group or cohort, rank / (n - 1) by length in words."""

from __future__ import annotations

import asyncio
import importlib
from argparse import Namespace
from dataclasses import dataclass, field
from typing import Any

import pytest

from tests.frameworks.fake import fake_service

Q = "What is asked?"
TEXTS = ["a b c", "a", "a b"]  # rank 2, 0, 1 by length


@dataclass
class Sample:
    """The fields of slime's Sample that a reward function reads or sets."""

    prompt: str | list[dict[str, Any]] = ""
    response: str = ""
    label: str | None = None
    index: int | None = None
    group_index: int | None = None
    rollout_id: int | None = None
    metadata: dict[str, Any] = field(default_factory=dict)
    reward: float | None = None
    remove_sample: bool = False


Rollout = Sample | list[Sample]


def load(path: str) -> Any:
    module, _, name = path.rpartition(".")
    return getattr(importlib.import_module(module), name)


async def run_rm(args: Namespace, group: list[Rollout]) -> list[Rollout]:
    """One prompt's group through the reward function as slime's contract says: the whole group
    in one call with --group-rm, else one call per rollout (a fanned-out rollout is a list)."""
    fn = load(args.custom_rm_path)
    if args.group_rm:
        rewards = await fn(args, group)
        for rollout, reward in zip(group, rewards, strict=False):
            assert isinstance(rollout, Sample)
            rollout.reward = reward
        return group

    async def one(rollout: Rollout) -> None:
        reward = await fn(args, rollout)
        if isinstance(rollout, list):
            assert isinstance(reward, list)
            assert len(reward) == len(rollout)
            for sample, r in zip(rollout, reward, strict=True):
                sample.reward = r
        else:
            rollout.reward = reward

    await asyncio.gather(*(one(r) for r in group))
    return group


def args(rm: str, group_rm: bool = False, n: int = 3) -> Namespace:
    return Namespace(
        group_rm=group_rm,
        custom_rm_path=f"reflectrm.integrations.slime.{rm}",
        n_samples_per_prompt=n,
    )


def group(texts: list[str], label: str | None = "a b", group_index: int = 0) -> list[Rollout]:
    return [
        Sample(
            prompt=Q, response=t, label=label, group_index=group_index, index=10 * group_index + i
        )
        for i, t in enumerate(texts)
    ]


def fanned(texts: list[str], label: str | None = "a b") -> list[Rollout]:
    """Each rollout split into prefix-chained samples (its turns so far), sharing a rollout_id;
    the last holds the whole trajectory."""
    out: list[Rollout] = []
    for i, text in enumerate(texts):
        words = text.split()
        out.append(
            [
                Sample(prompt=Q, response=" ".join(words[:k]), label=label, index=i, rollout_id=i)
                for k in range(1, len(words) + 1)
            ]
        )
    return out


def rewards_of(out: list[Rollout]) -> list:
    return [[x.reward for x in m] if isinstance(m, list) else m.reward for m in out]


def test_group_rm_judges_the_group_once(monkeypatch):
    with fake_service(monkeypatch) as service:
        out = asyncio.run(run_rm(args("group_rm", group_rm=True), group(TEXTS)))
    assert rewards_of(out) == [1.0, 0.0, 0.5]
    assert [c[2]["completions"] for c in service.calls] == [TEXTS]


def test_group_rm_takes_a_fanned_out_group_of_lists(monkeypatch):
    """--group-rm over rollouts that are lists: each rollout is judged by its last sample and
    all its samples get its reward (group_rm sets them and returns no list to pair)."""
    with fake_service(monkeypatch) as service:
        out = asyncio.run(run_rm(args("group_rm", group_rm=True), fanned(TEXTS)))
    assert [len(m) for m in out] == [3, 1, 2]  # type: ignore[arg-type]
    assert rewards_of(out) == [[1.0] * 3, [0.0], [0.5] * 2]
    assert [c[2]["completions"] for c in service.calls] == [TEXTS]


def test_group_rm_reference_strategy_needs_a_label(monkeypatch):
    monkeypatch.setenv("REFLECTRM_REWARD_STRATEGY", "reference")
    with fake_service(monkeypatch) as service:
        out = asyncio.run(run_rm(args("group_rm", group_rm=True), group(TEXTS)))
        assert rewards_of(out) == [0.75, 0.25, 0.5]
        with pytest.raises(ValueError, match=r"sample\.label is None"):
            asyncio.run(run_rm(args("group_rm", group_rm=True), group(TEXTS, label=None)))
    assert len(service.calls) == 1


def test_reference_rm_per_sample_and_per_fanned_out_rollout(monkeypatch):
    with fake_service(monkeypatch):
        out = asyncio.run(run_rm(args("reference_rm"), group(TEXTS)))
        assert rewards_of(out) == [0.75, 0.25, 0.5]
        # One reward per sample of a fanned-out rollout, each against the label ("a b").
        out = asyncio.run(run_rm(args("reference_rm"), fanned(TEXTS)))
        assert rewards_of(out) == [[0.25, 0.5, 0.75], [0.25], [0.25, 0.5]]


def test_reference_rm_refuses_a_missing_label(monkeypatch):
    with fake_service(monkeypatch) as service:
        for label in (None, ""):
            with pytest.raises(ValueError, match="has none"):
                asyncio.run(run_rm(args("reference_rm"), group(TEXTS, label)))
    assert service.calls == []


def test_cohort_rm_rewards_each_sample_against_its_group(monkeypatch):
    """Without --group-rm, each sample's reward call is one member of a cohort keyed by the
    sample's group_index, of n_samples_per_prompt members; two groups at once."""
    a = args("cohort_rm", n=3)

    async def two_groups() -> list:
        first, second = group(TEXTS, None, 0), group(["x y", "x y z w", "x"], None, 1)
        return list(await asyncio.gather(run_rm(a, first), run_rm(a, second)))

    with fake_service(monkeypatch) as service:
        out = asyncio.run(two_groups())
    assert [rewards_of(g) for g in out] == [[1.0, 0.0, 0.5], [0.5, 1.0, 0.0]]
    bodies = [b for path, _, b in service.calls if path == "/v1/rewards/sample"]
    assert sorted(b["group_id"] for b in bodies) == ["slime-group-0"] * 3 + ["slime-group-1"] * 3
    assert all(b["group_size"] == 3 and "reference" not in b for b in bodies)


def test_cohort_rm_with_fanned_out_rollouts(monkeypatch):
    monkeypatch.setenv("REFLECTRM_GROUP_SIZE", "3")
    monkeypatch.setenv("REFLECTRM_REWARD_STRATEGY", "circular")
    rollouts = fanned(TEXTS, None)
    for rollout in rollouts:
        for sample in rollout:  # type: ignore[union-attr]
            sample.group_index = 0
    with fake_service(monkeypatch) as service:
        out = asyncio.run(run_rm(args("cohort_rm", n=8), rollouts))  # the env's size wins
    assert rewards_of(out) == [[1.0] * 3, [0.0], [0.5] * 2]
    assert sorted(b["completion"] for _, _, b in service.calls) == sorted(TEXTS)
    assert {b["strategy"] for _, _, b in service.calls} == {"circular"}


def test_cohort_rm_needs_a_group_size(monkeypatch):
    with fake_service(monkeypatch), pytest.raises(ValueError, match="REFLECTRM_GROUP_SIZE"):
        asyncio.run(run_rm(args("cohort_rm", n=1), group(TEXTS[:1])))


# --- a failed judgment is removed from slime's loss, not rewarded -----------------------------


def test_a_sample_without_verdict_is_removed_with_its_groups_mean(monkeypatch):
    """A cohort in which "?" gets no verdict (the stand-in's rule): ordered (quality, text) "?",
    "a", "a b" -> None, 0.5, 1.0; the "?" sample is removed (slime zeroes its loss mask) and its
    number is the mean of the judged ones, 0.75, so the group's mean (slime's GRPO baseline) is
    theirs."""
    with fake_service(monkeypatch):
        out = asyncio.run(run_rm(args("cohort_rm"), group(["a b", "?", "a"], None)))
    assert rewards_of(out) == [1.0, 0.75, 0.5]
    assert [s.remove_sample for s in out] == [False, True, False]  # type: ignore[union-attr]
    assert out[1].metadata["reflectrm_failure"].startswith("no_verdict")  # type: ignore[union-attr]


@pytest.mark.parametrize("rm", ["group_rm", "reference_rm", "cohort_rm"])
def test_a_judgment_that_timed_out_removes_the_samples(monkeypatch, rm):
    with fake_service(monkeypatch) as service:
        service.fail_status = 504
        out = asyncio.run(run_rm(args(rm, group_rm=rm == "group_rm"), group(TEXTS)))
    assert all(s.remove_sample for s in out)  # type: ignore[union-attr]
    assert rewards_of(out) == [0.5] * 3
    assert all("504" in s.metadata["reflectrm_failure"] for s in out)  # type: ignore[union-attr]


def test_an_error_to_fix_is_raised_not_removed(monkeypatch):
    with fake_service(monkeypatch) as service:
        service.fail_status = 422
        with pytest.raises(Exception, match="422"):
            asyncio.run(run_rm(args("reference_rm"), group(TEXTS)))
