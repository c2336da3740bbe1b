"""What every adapter shares: its settings, a pooled client per event loop, reward numbers."""

from __future__ import annotations

import asyncio
import os
import threading
import weakref
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from reflectrm.client import (
    DEFAULT_URL,
    AsyncClient,
    Client,
    Conversation,
    Rewards,
    SampleReward,
)
from reflectrm.judging.groups import NO_VERDICT_REWARD


def _env_int(name: str) -> int | None:
    value = os.environ.get(name)
    return int(value) if value else None


def _env_float(name: str) -> float | None:
    value = os.environ.get(name)
    return float(value) if value else None


@dataclass(frozen=True)
class RewardConfig:
    """Where the service is and how it judges. ``from_env`` reads ``REFLECTRM_URL`` and
    ``REFLECTRM_REWARD_{STRATEGY,MODE,DEBIAS,NUM_CANDIDATES,MAX_TOKENS}``."""

    url: str = DEFAULT_URL
    strategy: str | None = None  # None: the adapter's own default
    mode: str | None = None  # None: the server's default (reflect)
    debias: str | None = None  # None: the server's default for rewards (swap)
    num_candidates: int | None = None
    max_tokens: int | None = None
    extra: Mapping[str, Any] = field(default_factory=dict)
    # Cohorts (per-sample adapters): each sample is one member of a group of group_size,
    # rewarded against the others by /v1/rewards/sample. None: judged against its reference.
    group_size: int | None = None
    cohort_timeout_s: float | None = None
    group_key: str | None = None  # verl: the extra_info field naming the group

    @staticmethod
    def from_env() -> RewardConfig:
        """Also ``REFLECTRM_GROUP_SIZE`` (turns cohorts on), ``REFLECTRM_COHORT_TIMEOUT_S`` and
        ``REFLECTRM_GROUP_KEY``."""
        return RewardConfig(
            url=os.environ.get("REFLECTRM_URL", DEFAULT_URL),
            strategy=os.environ.get("REFLECTRM_REWARD_STRATEGY") or None,
            mode=os.environ.get("REFLECTRM_REWARD_MODE") or None,
            debias=os.environ.get("REFLECTRM_REWARD_DEBIAS") or None,
            num_candidates=_env_int("REFLECTRM_REWARD_NUM_CANDIDATES"),
            max_tokens=_env_int("REFLECTRM_REWARD_MAX_TOKENS"),
            group_size=_env_int("REFLECTRM_GROUP_SIZE"),
            cohort_timeout_s=_env_float("REFLECTRM_COHORT_TIMEOUT_S"),
            group_key=os.environ.get("REFLECTRM_GROUP_KEY") or None,
        )

    def cohort_fields(self) -> dict[str, Any]:
        """A cohort member's settings besides its text: strategy (None: the server's default,
        knockout), the judging fields and the cohort timeout."""
        if self.strategy == "reference":
            raise ValueError(
                "REFLECTRM_GROUP_SIZE judges each sample against the others of its group: "
                "REFLECTRM_REWARD_STRATEGY=reference does not apply (unset it, or pick knockout, "
                "circular, swiss, round_robin or pivot)"
            )
        fields = {"strategy": self.strategy, "cohort_timeout_s": self.cohort_timeout_s}
        return {**{k: v for k, v in fields.items() if v is not None}, **self.judging_fields()}

    def judging_fields(self) -> dict[str, Any]:
        fields = {
            "mode": self.mode,
            "debias": self.debias,
            "num_candidates": self.num_candidates,
            "max_tokens": self.max_tokens,
        }
        return {k: v for k, v in {**fields, **self.extra}.items() if v is not None}


_async_clients: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[str, AsyncClient]] = (
    weakref.WeakKeyDictionary()
)
_sync_clients: dict[str, Client] = {}
_lock = threading.Lock()


def async_client(url: str) -> AsyncClient:
    """One pooled AsyncClient per event loop and URL (an httpx.AsyncClient is bound to its loop)."""
    loop = asyncio.get_running_loop()
    with _lock:
        clients = _async_clients.setdefault(loop, {})
        if url not in clients:
            clients[url] = AsyncClient(url)
        return clients[url]


def sync_client(url: str) -> Client:
    """One pooled Client per URL, shared by threads."""
    with _lock:
        if url not in _sync_clients:
            _sync_clients[url] = Client(url)
        return _sync_clients[url]


def reference_of(value: Any, where: str) -> str:
    """A reference answer, or a clear error when the dataset has none (before, a missing one
    was judged against the text "None")."""
    if value is None or (isinstance(value, str) and not value.strip()):
        raise ValueError(
            f"reflectrm judges each sample against its reference answer, and this sample has "
            f"none ({where} is {value!r}); give the dataset one, or reward each sample against "
            "the others of its group instead: set REFLECTRM_GROUP_SIZE (see docs/rlhf.md)"
        )
    return value if isinstance(value, str) else str(value)


def cohort_details(result: SampleReward) -> dict[str, float]:
    """A cohort member's reward and figures, as numbers for a trainer's logs (the same keys for
    every sample)."""
    return {
        "score": as_number(result.reward),
        "judge_no_verdict": 1.0 if result.reward is None else 0.0,
        "judge_cohort_cut": 1.0 if result.cohort.cut else 0.0,
        "judge_cohort_arrived": float(result.cohort.arrived),
        "judge_cohort_judgments": float(result.cohort.judgments),
    }


def as_number(reward: float | None) -> float:
    """For trainers that need a number for every sample."""
    return NO_VERDICT_REWARD if reward is None else reward


def first_reward_details(result: Rewards) -> dict[str, float]:
    """The judgment behind the first completion's reward, as numbers for a trainer's logs.

    ``judge_consistent`` / ``judge_inconsistent`` (1.0 when both orders were judged with a
    verdict and agreed, resp. disagreed; both 0.0 when not measured) are there only under
    ``debias: swap``: with one order judged consistency is not measured. Which keys there are
    depends on the call's settings only, the same for every sample of a run (verl and OpenRLHF
    stack each key across samples)."""
    reward = result.rewards[0]
    comparisons = [c for c in result.raw["comparisons"] if c["pair"][0] == 0]
    orders = [o["scores"][0] for o in comparisons[0]["orders"]] if comparisons else []
    number = as_number(reward)
    orders += [number] * (2 - len(orders))
    details = {
        "judge_reward_first_order": float(orders[0]),
        "judge_reward_second_order": float(orders[1]),
    }
    if result.raw.get("debias") == "swap":
        consistent = comparisons[0]["consistent"] if comparisons else None
        details["judge_consistent"] = 1.0 if consistent is True else 0.0
        details["judge_inconsistent"] = 1.0 if consistent is False else 0.0
    details["judge_no_verdict"] = 1.0 if reward is None else 0.0
    return details


def text_of(content: Any) -> str:
    """A message's text: a string, or the text parts of a list of content blocks."""
    if isinstance(content, str):
        return content
    if isinstance(content, Sequence):
        return "".join(str(part.get("text", "")) for part in content if isinstance(part, Mapping))
    return str(content)


def conversation_from_prompt(prompt: Any) -> Conversation:
    """A prompt as the service takes it: a string, or a list of {role, content} messages."""
    if isinstance(prompt, str):
        return prompt
    return [{"role": str(m["role"]), "content": text_of(m["content"])} for m in prompt]
