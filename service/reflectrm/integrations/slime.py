"""slime: reward functions for ``--custom-rm-path``.

slime (THUDM/slime, slime/rollout/rm_hub/__init__.py ``batched_async_rm`` and ``async_rm``;
slime/rollout/sglang_rollout.py ``generate_and_rm_group``) loads the function by dotted path.
With ``--group-rm`` it calls ``await fn(args, samples)`` once per prompt with the whole group
and expects one reward per sample; without it, ``await fn(args, sample)`` per sample.

- ``--custom-rm-path reflectrm.integrations.slime.group_rm --group-rm``: the group judged by
  ``REFLECTRM_REWARD_STRATEGY`` (default ``round_robin``; ``pivot``; or ``reference`` against
  the samples' ``label``);
- ``--custom-rm-path reflectrm.integrations.slime.reference_rm``: each sample against its label.

A sample's ``prompt`` is a string (already chat-formatted when slime applies the template: it is
judged as the user turn as it is) or a list of messages.
"""

from __future__ import annotations

from typing import Any

from reflectrm.integrations.common import (
    RewardConfig,
    as_number,
    async_client,
    conversation_from_prompt,
)

DEFAULT_GROUP_STRATEGY = "round_robin"


async def group_rm(args: Any, samples: list[Any], **kwargs: Any) -> list[float]:
    config = RewardConfig.from_env()
    strategy = config.strategy or DEFAULT_GROUP_STRATEGY
    if len(samples) < 2 and strategy != "reference":
        return [as_number(None) for _ in samples]
    reference = {"reference": str(samples[0].label)} if strategy == "reference" else {}
    result = await async_client(config.url).rewards(
        conversation_from_prompt(samples[0].prompt),
        [s.response for s in samples],
        strategy=strategy,
        **reference,
        **config.judging_fields(),
    )
    return [as_number(r) for r in result.rewards]


async def reference_rm(args: Any, sample: Any, **kwargs: Any) -> float:
    config = RewardConfig.from_env()
    result = await async_client(config.url).rewards(
        conversation_from_prompt(sample.prompt),
        [sample.response],
        reference=str(sample.label),
        strategy="reference",
        **config.judging_fields(),
    )
    return as_number(result.rewards[0])
