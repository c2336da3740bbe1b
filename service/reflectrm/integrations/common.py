"""What every adapter shares: its settings, a pooled client per event loop, reward numbers."""

from __future__ import annotations

import asyncio
import os
import threading
import weakref
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from reflectrm.client import DEFAULT_URL, AsyncClient, Client, Conversation, Rewards
from reflectrm.judging.groups import NO_VERDICT_REWARD


def _env_int(name: str) -> int | None:
    value = os.environ.get(name)
    return int(value) if value else None


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

    @staticmethod
    def from_env() -> RewardConfig:
        return RewardConfig(
            url=os.environ.get("REFLECTRM_URL", DEFAULT_URL),
            strategy=os.environ.get("REFLECTRM_REWARD_STRATEGY") or None,
            mode=os.environ.get("REFLECTRM_REWARD_MODE") or None,
            debias=os.environ.get("REFLECTRM_REWARD_DEBIAS") or None,
            num_candidates=_env_int("REFLECTRM_REWARD_NUM_CANDIDATES"),
            max_tokens=_env_int("REFLECTRM_REWARD_MAX_TOKENS"),
        )

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


def as_number(reward: float | None) -> float:
    """For trainers that need a number for every sample."""
    return NO_VERDICT_REWARD if reward is None else reward


def first_reward_details(result: Rewards) -> dict[str, float]:
    """The judgment behind the first completion's reward, as numbers for a trainer's logs."""
    reward = result.rewards[0]
    comparisons = [c for c in result.raw["comparisons"] if c["pair"][0] == 0]
    orders = [o["scores"][0] for o in comparisons[0]["orders"]] if comparisons else []
    number = as_number(reward)
    orders += [number] * (2 - len(orders))
    consistent = comparisons[0]["consistent"] if comparisons else None
    return {
        "judge_reward_first_order": float(orders[0]),
        "judge_reward_second_order": float(orders[1]),
        "judge_consistent": 1.0 if consistent else 0.0,
        "judge_no_verdict": 1.0 if reward is None else 0.0,
    }


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
