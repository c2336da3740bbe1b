"""TRL: a reward function class for ``GRPOTrainer(reward_funcs=[ReflectRMReward(...)])``.

TRL (1.16, trl/trainer/grpo_trainer.py ``_calculate_rewards``) calls each reward function as
``f(prompts=..., completions=..., completion_ids=..., **columns)`` with the dataset's other
columns as lists, awaits it when its ``__call__`` is ``async`` (trl/trainer/utils.py
``is_async_callable``), and reads one ``float | None`` per completion (None: not applicable,
logged as NaN). Each process scores only its own slice of the batch, so a prompt's group of
``num_generations`` completions can be split between processes.

- ``strategy="reference"`` (default): each completion against the reference answer in the
  dataset column ``reference_column``; completions of one prompt go in one call.
- ``strategy`` ``"pivot"``, ``"round_robin"``, ``"knockout"``, ``"circular"`` or ``"swiss"``:
  the completions of each prompt present in the slice are judged as a group; a prompt with a
  single completion in the slice gets None. A completion none of whose comparisons had a
  verdict gets None too (TRL logs it as NaN and leaves it out).
"""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any

from reflectrm.integrations.common import (
    RewardConfig,
    async_client,
    conversation_from_prompt,
    failure_of,
    text_of,
)
from reflectrm.judging.groups import STRATEGIES

logger = logging.getLogger(__name__)


def completion_text(completion: Any) -> str:
    """A completion's text: a string, or the last message of a conversational completion."""
    if isinstance(completion, str):
        return completion
    return text_of(completion[-1]["content"]) if completion else ""


class ReflectRMReward:
    """An async reward function backed by the service's ``/v1/rewards``."""

    def __init__(
        self,
        url: str | None = None,
        *,
        strategy: str = "reference",
        reference_column: str = "reference",
        mode: str | None = None,
        debias: str | None = None,
        num_candidates: int | None = None,
        max_tokens: int | None = None,
        seed: int | None = None,
    ) -> None:
        if strategy not in STRATEGIES:
            raise ValueError(f"strategy must be one of {', '.join(map(repr, STRATEGIES))}")
        env = RewardConfig.from_env()
        self.config = RewardConfig(
            url=url or env.url,
            strategy=strategy,
            mode=mode,
            debias=debias,
            num_candidates=num_candidates,
            max_tokens=max_tokens,
            extra={"seed": seed} if seed is not None else {},
        )
        self.reference_column = reference_column
        self.__name__ = "reflectrm"  # TRL logs rewards under the function's name

    async def __call__(
        self,
        prompts: list[Any],
        completions: list[Any],
        completion_ids: list[Any] | None = None,
        **columns: Any,
    ) -> list[float | None]:
        texts = [completion_text(c) for c in completions]
        references = self._references(columns, len(prompts))
        groups: dict[tuple[str, str | None], list[int]] = {}
        for i, prompt in enumerate(prompts):
            key = (json.dumps(prompt, sort_keys=True, default=str), references[i])
            groups.setdefault(key, []).append(i)
        rewards: list[float | None] = [None] * len(prompts)
        judged = [
            (members, self._score(prompts[members[0]], texts, members, ref))
            for (_, ref), members in groups.items()
        ]
        results = await asyncio.gather(*(coro for _, coro in judged))
        for (members, _), values in zip(judged, results, strict=True):
            for i, value in zip(members, values, strict=True):
                rewards[i] = value
        return rewards

    def _references(self, columns: dict[str, Any], n: int) -> list[str | None]:
        if self.config.strategy != "reference":
            return [None] * n
        if self.reference_column not in columns:
            raise ValueError(
                f"strategy 'reference' reads the reference answer from the dataset column "
                f"{self.reference_column!r}, which this batch does not have; add it or set "
                "reference_column"
            )
        return [str(r) for r in columns[self.reference_column]]

    async def _score(
        self, prompt: Any, texts: list[str], members: list[int], reference: str | None
    ) -> list[float | None]:
        if reference is None and len(members) < 2:
            return [None]  # the rest of this prompt's group is in another process's slice
        fields = {"strategy": self.config.strategy, **self.config.judging_fields()}
        if reference is not None:
            fields["reference"] = reference
        try:
            result = await async_client(self.config.url).rewards(
                conversation_from_prompt(prompt), [texts[i] for i in members], **fields
            )
        except Exception as exc:
            reason = failure_of(exc)
            if reason is None:
                raise
            # TRL's own mask: None rows are unscorable, out of the group's baseline (nanmean)
            # with a zero advantage (trl 1.16 GRPOTrainer).
            logger.warning("reflectrm: a group's judgment failed, its rewards None: %s", reason)
            return [None] * len(members)
        return result.rewards
