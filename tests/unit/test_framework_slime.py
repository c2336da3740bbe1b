"""The slime adapters as slime calls them: its own group rollout (``generate_and_rm_group``),
per-sample rollout (``generate_and_rm``), reward dispatch (``batched_async_rm``, ``async_rm``),
``load_function`` and ``Sample``, from slime's files as they are (tests/frameworks/slime-624b824),
with the generation a ``--custom-generate-function-path`` of this module, against a stand-in for
the service (tests/frameworks/fake.py: against a reference, a longer response gets 0.75, a
shorter 0.25; in a group or cohort, rank / (n - 1) by length in words)."""

from __future__ import annotations

import asyncio
import copy
from argparse import Namespace
from typing import Any

import pytest

from tests.frameworks import slime
from tests.frameworks.fake import fake_service

Q = "What is asked?"
HERE = "tests.unit.test_framework_slime"
TEXTS = ["a b c", "a", "a b"]  # rank 2, 0, 1 by length


async def generate_one(args: Any, sample: Any, sampling_params: Any) -> Any:
    """A custom generate function: the response is the one the test put in the metadata."""
    sample.response = sample.metadata["text"]
    sample.status = type(sample).Status.COMPLETED
    return sample


async def generate_fanout(args: Any, sample: Any, sampling_params: Any) -> list[Any]:
    """A multi-turn fan-out: one rollout becomes prefix-chained samples (its turns so far), as
    slime's compact/subagent paths make them; the last holds the whole trajectory."""
    words = sample.metadata["text"].split()
    siblings = []
    for k in range(1, len(words) + 1):
        s = copy.deepcopy(sample)
        s.response = " ".join(words[:k])
        s.status = type(sample).Status.COMPLETED
        s.rollout_id = sample.index
        siblings.append(s)
    return siblings


def args(rm: str, generate: str = "generate_one", group_rm: bool = False, n: int = 3) -> Namespace:
    return Namespace(
        partial_rollout=False,
        mask_offpolicy_in_partial_rollout=False,
        group_rm=group_rm,
        custom_generate_function_path=f"{HERE}.{generate}",
        custom_rm_path=f"reflectrm.integrations.slime.{rm}",
        n_samples_per_prompt=n,
    )


def group(s: Any, texts: list[str], label: str | None = "a b", group_index: int = 0) -> list:
    return [
        s.Sample(
            prompt=Q,
            label=label,
            group_index=group_index,
            index=group_index * 10 + i,
            metadata={"text": t},
        )
        for i, t in enumerate(texts)
    ]


def rewards_of(out: list) -> list:
    return [[x.reward for x in m] if isinstance(m, list) else m.reward for m in out]


def test_group_rm_judges_the_group_once(monkeypatch):
    s = slime()
    with fake_service(monkeypatch) as service:
        out = asyncio.run(
            s.generate_and_rm_group(args("group_rm", group_rm=True), group(s, TEXTS), {})
        )
    assert rewards_of(out) == [1.0, 0.0, 0.5]
    assert [c[2]["completions"] for c in service.calls] == [TEXTS]


def test_group_rm_takes_a_fanned_out_group_of_lists(monkeypatch):
    """--group-rm with a custom generate function returning lists: the group is a list of
    lists. Each rollout is judged by its last sample; all its samples get its reward."""
    s = slime()
    a = args("group_rm", generate="generate_fanout", group_rm=True)
    with fake_service(monkeypatch) as service:
        out = asyncio.run(s.generate_and_rm_group(a, group(s, TEXTS), {}))
    assert [len(m) for m in out] == [3, 1, 2]
    assert rewards_of(out) == [[1.0] * 3, [0.0], [0.5] * 2]
    assert [c[2]["completions"] for c in service.calls] == [TEXTS]


def test_group_rm_reference_strategy_needs_a_label(monkeypatch):
    monkeypatch.setenv("REFLECTRM_REWARD_STRATEGY", "reference")
    s = slime()
    with fake_service(monkeypatch) as service:
        out = asyncio.run(
            s.generate_and_rm_group(args("group_rm", group_rm=True), group(s, TEXTS), {})
        )
        assert rewards_of(out) == [0.75, 0.25, 0.5]
        with pytest.raises(ValueError, match=r"sample\.label is None"):
            asyncio.run(
                s.generate_and_rm_group(
                    args("group_rm", group_rm=True), group(s, TEXTS, label=None), {}
                )
            )
    assert len(service.calls) == 1


def test_reference_rm_per_sample_and_per_fanned_out_rollout(monkeypatch):
    s = slime()
    with fake_service(monkeypatch):
        out = asyncio.run(s.generate_and_rm_group(args("reference_rm"), group(s, TEXTS), {}))
        assert rewards_of(out) == [0.75, 0.25, 0.5]
        # A custom generate returning a list: slime hands reference_rm the list; one reward
        # per sample, each against the label ("a b": "a" 0.25, "a b" 0.5, "a b c" 0.75).
        fan = args("reference_rm", generate="generate_fanout")
        out = asyncio.run(s.generate_and_rm_group(fan, group(s, TEXTS), {}))
        assert rewards_of(out) == [[0.25, 0.5, 0.75], [0.25], [0.25, 0.5]]


def test_reference_rm_refuses_a_missing_label(monkeypatch):
    s = slime()
    with fake_service(monkeypatch) as service:
        for label in (None, ""):
            with pytest.raises(ValueError, match="has none"):
                asyncio.run(
                    s.generate_and_rm_group(args("reference_rm"), group(s, TEXTS, label), {})
                )
    assert service.calls == []


def test_cohort_rm_rewards_each_sample_against_its_group(monkeypatch):
    """Without --group-rm, each sample's reward call is one member of a cohort keyed by the
    sample's group_index, of n_samples_per_prompt members; two groups at once."""
    s = slime()
    a = args("cohort_rm", n=3)

    async def two_groups() -> list:
        first, second = group(s, TEXTS, None, 0), group(s, ["x y", "x y z w", "x"], None, 1)
        return list(
            await asyncio.gather(
                s.generate_and_rm_group(a, first, {}), s.generate_and_rm_group(a, second, {})
            )
        )

    with fake_service(monkeypatch) as service:
        out = asyncio.run(two_groups())
    assert [rewards_of(g) for g in out] == [[1.0, 0.0, 0.5], [0.5, 1.0, 0.0]]
    bodies = [b for path, _, b in service.calls if path == "/v1/rewards/sample"]
    assert sorted(b["group_id"] for b in bodies) == ["slime-group-0"] * 3 + ["slime-group-1"] * 3
    assert all(b["group_size"] == 3 and "reference" not in b for b in bodies)


def test_cohort_rm_with_fanned_out_rollouts(monkeypatch):
    monkeypatch.setenv("REFLECTRM_GROUP_SIZE", "3")
    monkeypatch.setenv("REFLECTRM_REWARD_STRATEGY", "circular")
    s = slime()
    a = args("cohort_rm", generate="generate_fanout", n=8)  # REFLECTRM_GROUP_SIZE wins
    with fake_service(monkeypatch) as service:
        out = asyncio.run(s.generate_and_rm_group(a, group(s, TEXTS, None), {}))
    assert rewards_of(out) == [[1.0] * 3, [0.0], [0.5] * 2]
    assert sorted(b["completion"] for _, _, b in service.calls) == sorted(TEXTS)
    assert {b["strategy"] for _, _, b in service.calls} == {"circular"}


def test_cohort_rm_needs_a_group_size(monkeypatch):
    s = slime()
    with fake_service(monkeypatch), pytest.raises(ValueError, match="REFLECTRM_GROUP_SIZE"):
        asyncio.run(s.generate_and_rm_group(args("cohort_rm", n=1), group(s, TEXTS[:1]), {}))
