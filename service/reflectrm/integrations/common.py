"""What every adapter shares: its settings, a pooled client per event loop, reward numbers."""

from __future__ import annotations

import asyncio
import os
import threading
import weakref
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import httpx

from reflectrm.client import (
    DEFAULT_URL,
    AsyncClient,
    Client,
    Conversation,
    ReflectRMError,
    Rewards,
    SampleReward,
)
from reflectrm.judging.groups import failed_reward

# Statuses of a judgment that failed for want of the judge, after the client's retries: no
# slot in time (429), the engine loading or stopped (503), past the deadline (504). Another
# error (a 4xx saying what to fix) is raised: it is the caller's to fix, not a sample to mask.
FAILED_STATUSES = frozenset({429, 503, 504})


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


COHORT_KEYS = (
    "judge_failed",
    "judge_no_verdict",
    "judge_cohort_cut",
    "judge_cohort_arrived",
    "judge_cohort_judgments",
)


def cohort_details(result: SampleReward) -> dict[str, float]:
    """A cohort member's reward and figures, as numbers for a trainer's logs (the same keys for
    every sample). ``judge_failed`` is 1.0 when the member has no reward (no verdict in any of
    its comparisons, or alone in a cohort its timeout cut): ``score`` is then the mean of the
    cohort's judged rewards (``failed_reward``), not a judgment of it."""
    failed = result.reward is None
    return {
        "score": as_number(result.reward, result.cohort.rewards),
        "judge_failed": 1.0 if failed else 0.0,
        "judge_no_verdict": 1.0 if failed and not _alone(result) else 0.0,
        "judge_cohort_cut": 1.0 if result.cohort.cut else 0.0,
        "judge_cohort_arrived": float(result.cohort.arrived),
        "judge_cohort_judgments": float(result.cohort.judgments),
    }


def _alone(result: SampleReward) -> bool:
    return result.cohort.cut and result.cohort.arrived < 2


def failure_reason(result: SampleReward) -> str:
    """Why a cohort member has no reward (None when it has one is the caller's check)."""
    if _alone(result):
        return "cohort_cut: the cohort's timeout cut it with this member alone"
    return "no_verdict: none of this member's comparisons ended in a verdict"


def failed_details(keys: Sequence[str], reason: str) -> dict[str, float]:
    """A sample whose judgment failed for want of the judge (``failure_of``): the neutral
    reward (nothing of its group is known), ``judge_failed`` 1.0, the other keys 0.0."""
    details = {"score": failed_reward(()), **dict.fromkeys(keys, 0.0)}
    details["judge_failed"] = 1.0
    return details


def failure_of(exc: BaseException) -> str | None:
    """The reason when ``exc`` is a judgment that failed for want of the judge (after the
    client's retries: FAILED_STATUSES, or the service unreachable); None for anything else."""
    if isinstance(exc, ReflectRMError) and exc.status in FAILED_STATUSES:
        return f"judge_unavailable: {exc.status} {exc.detail}"[:2000]
    if isinstance(exc, httpx.TransportError):
        return f"judge_unreachable: {type(exc).__name__}: {exc}"[:2000]
    return None


def as_number(reward: float | None, group: Sequence[float | None] = ()) -> float:
    """For trainers that need a number for every sample: a failed one (None) gets the mean of
    its group's judged rewards (``failed_reward``)."""
    return failed_reward(group) if reward is None else reward


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
    details["judge_failed"] = 1.0 if reward is None else 0.0
    return details


def reference_keys(debias: str | None) -> tuple[str, ...]:
    """The keys of ``first_reward_details`` under ``debias`` (None: the server's, swap)."""
    keys: tuple[str, ...] = ("judge_reward_first_order", "judge_reward_second_order")
    if debias != "none":
        keys += ("judge_consistent", "judge_inconsistent")
    return (*keys, "judge_no_verdict", "judge_failed")


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
