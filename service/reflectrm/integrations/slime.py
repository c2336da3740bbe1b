"""slime: reward functions for ``--custom-rm-path``.

slime (THUDM/slime at 624b824a8, after v0.3.1: slime/rollout/rm_hub/__init__.py
``batched_async_rm`` and ``async_rm``; slime/rollout/sglang_rollout.py ``generate_and_rm`` and
``generate_and_rm_group``) loads the function by dotted path.

- With ``--group-rm`` it calls ``await fn(args, group)`` once per prompt, then sets
  ``sample.reward`` from the returned list, pairing it with the group
  (``zip(group, rewards, strict=False)``). A group is a list of samples, or, when a
  ``--custom-generate-function-path`` returns several samples per rollout (multi-turn fan-out),
  a list of such lists.
- Without it, ``await fn(args, sample)`` per sample, or ``await fn(args, samples)`` with the list
  one custom generate call returned (one reward each).

Functions:

- ``group_rm`` (with ``--group-rm``): the group judged by ``REFLECTRM_REWARD_STRATEGY``
  (default ``round_robin``; any strategy of /v1/rewards; ``reference`` against the samples'
  ``label``). A rollout of several samples is judged by its last one (the whole trajectory) and
  every sample of it gets its reward. For such a group slime's own loop would set ``.reward`` on
  a list and fail, so ``group_rm`` sets each sample's reward itself and returns an empty list
  (the loop pairs nothing).
- ``reference_rm`` (without): each sample against its label.
- ``cohort_rm`` (without): each sample against the other samples of its prompt, through a cohort
  of ``/v1/rewards/sample`` keyed by the sample's ``group_index`` (slime numbers each prompt's
  group), of ``REFLECTRM_GROUP_SIZE`` members (default: ``args.n_samples_per_prompt``).

A missing label (``None`` or empty) is an error where a label is needed (before, it was judged
against the text "None"). A sample's ``prompt`` is a string (already chat-formatted when slime
applies the template: it is judged as the user turn as it is) or a list of messages.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from typing import Any

from reflectrm.integrations.common import (
    RewardConfig,
    as_number,
    async_client,
    conversation_from_prompt,
    failure_of,
    failure_reason,
    reference_of,
)
from reflectrm.judging.groups import failed_reward

logger = logging.getLogger(__name__)

DEFAULT_GROUP_STRATEGY = "round_robin"


def _fail(samples: Sequence[Any], reason: str) -> None:
    """slime's own mask: a sample with ``remove_sample`` takes no part in the loss (slime
    zeroes its loss mask); the reason goes in its metadata."""
    for sample in samples:
        sample.remove_sample = True
        metadata = getattr(sample, "metadata", None)
        if isinstance(metadata, dict):
            metadata["reflectrm_failure"] = reason


def _judge_failure(exc: Exception) -> str:
    reason = failure_of(exc)
    if reason is None:
        raise exc
    logger.warning("reflectrm: a judgment failed, its samples removed: %s", reason)
    return reason


def _rollouts(group: Sequence[Any]) -> tuple[list[Any], list[list[Any]]]:
    """Each rollout's representative (its last sample) and its samples."""
    members = [list(g) if isinstance(g, list | tuple) else [g] for g in group]
    return [m[-1] for m in members], members


async def group_rm(args: Any, samples: list[Any], **kwargs: Any) -> list[float]:
    config = RewardConfig.from_env()
    strategy = config.strategy or DEFAULT_GROUP_STRATEGY
    nested = any(isinstance(s, list | tuple) for s in samples)
    judged, members = _rollouts(samples)
    got: list[float | None]
    if len(judged) < 2 and strategy != "reference":
        got, reason = [None] * len(judged), "alone: a group of one has nothing to compare"
    else:
        reference = (
            {"reference": reference_of(judged[0].label, "sample.label")}
            if strategy == "reference"
            else {}
        )
        try:
            result = await async_client(config.url).rewards(
                conversation_from_prompt(judged[0].prompt),
                [s.response for s in judged],
                strategy=strategy,
                **reference,
                **config.judging_fields(),
            )
            got, reason = list(result.rewards), "no_verdict: no comparison had a verdict"
        except Exception as exc:
            got, reason = [None] * len(judged), _judge_failure(exc)
    rewards = [as_number(r, got) for r in got]
    for rollout, reward in zip(members, got, strict=True):
        if reward is None:
            _fail(rollout, reason)
    if not nested:
        return rewards
    for rollout, reward in zip(members, rewards, strict=True):
        for sample in rollout:
            sample.reward = reward
    return []


async def _reference_one(config: RewardConfig, sample: Any) -> float:
    reference = reference_of(sample.label, "sample.label")
    try:
        result = await async_client(config.url).rewards(
            conversation_from_prompt(sample.prompt),
            [sample.response],
            reference=reference,
            strategy="reference",
            **config.judging_fields(),
        )
    except Exception as exc:
        _fail([sample], _judge_failure(exc))
        return failed_reward(())
    if result.rewards[0] is None:
        _fail([sample], "no_verdict: the comparison with the label had no verdict")
    return as_number(result.rewards[0])


async def reference_rm(args: Any, sample: Any, **kwargs: Any) -> float | list[float]:
    config = RewardConfig.from_env()
    if isinstance(sample, list | tuple):
        return list(await asyncio.gather(*(_reference_one(config, s) for s in sample)))
    return await _reference_one(config, sample)


async def cohort_rm(args: Any, sample: Any, **kwargs: Any) -> float | list[float]:
    config = RewardConfig.from_env()
    group_size = config.group_size or getattr(args, "n_samples_per_prompt", None)
    if not group_size or group_size < 2:
        raise ValueError(
            "cohort_rm rewards each sample against the other samples of its prompt: set "
            "REFLECTRM_GROUP_SIZE, or --n-samples-per-prompt to 2 or more"
        )
    # A list: the samples one custom generate call made of one rollout; its last one is the
    # rollout's member of the cohort, and every sample of it gets the rollout's reward.
    judged = sample[-1] if isinstance(sample, list | tuple) else sample
    group_index = getattr(judged, "group_index", None)
    samples = list(sample) if isinstance(sample, list | tuple) else [sample]
    try:
        member = await async_client(config.url).sample_reward(
            conversation_from_prompt(judged.prompt),
            judged.response,
            group_size,
            group_id=None if group_index is None else f"slime-group-{group_index}",
            **config.cohort_fields(),
        )
    except Exception as exc:
        _fail(samples, _judge_failure(exc))
        reward = failed_reward(())
    else:
        if member.reward is None:
            _fail(samples, failure_reason(member))
        reward = as_number(member.reward, member.cohort.rewards)
    if isinstance(sample, list | tuple):
        return [reward] * len(sample)
    return reward
