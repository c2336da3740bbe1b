"""A Python client for the service: sync (``Client``) and async (``AsyncClient``), on httpx.

Connections are pooled (one client per process or event loop is enough). Calls that end in 429
or 503, or fail to connect, are retried with jittered exponential backoff, waiting at least the
server's Retry-After. Retrying is safe: the client fixes a seed before the first try when none
is given, so a retried judgment is the same judgment. Results are typed (frozen dataclasses);
each keeps the server's JSON in ``raw``.

    from reflectrm.client import Client
    with Client("http://127.0.0.1:8000") as rm:
        print(rm.judge("2+2?", "4", "5", mode="single").winner)
        print(rm.rewards("2+2?", ["4", "5", "four"], reference="4").rewards)
        # one completion of a group of 4; answered when all 4 have been sent
        print(rm.sample_reward("2+2?", "4", group_size=4).reward)
"""

from __future__ import annotations

import asyncio
import random
import secrets
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import httpx

from reflectrm.retry import RetryPolicy, retry_call, retry_call_async

DEFAULT_URL = "http://127.0.0.1:8000"
# Up to 8 retries of 429, 503 and connection failures, 1 s doubling to at most 60 s, jittered.
DEFAULT_RETRY = RetryPolicy()
# A judgment may wait in the server's queue (up to 600 s) and then run (up to 900 s).
DEFAULT_TIMEOUT = httpx.Timeout(connect=10.0, read=1800.0, write=60.0, pool=None)

Conversation = str | Sequence[dict[str, str]]


class ReflectRMError(Exception):
    """The service answered with an error (after any retries)."""

    def __init__(self, status: int, detail: str) -> None:
        super().__init__(f"{status}: {detail}")
        self.status = status
        self.detail = detail


# --- typed results ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Judgment:
    winner: int | None
    scores: tuple[float, float]
    outcome: str
    consistent: bool | None
    seed: int
    raw: dict[str, Any] = field(repr=False, compare=False)

    @staticmethod
    def of(body: dict[str, Any]) -> Judgment:
        return Judgment(
            winner=body["winner"],
            scores=(body["scores"][0], body["scores"][1]),
            outcome=body["outcome"],
            consistent=body.get("consistent"),
            seed=body["seed"],
            raw=body,
        )


@dataclass(frozen=True)
class BatchResult:
    """One batch item: ``judgment`` when status is 200, else ``detail`` says what to fix."""

    index: int
    status: int
    judgment: Judgment | None
    detail: str | None


@dataclass(frozen=True)
class Rewards:
    """One reward per completion (None: none of its comparisons had a verdict), with what
    ``/v1/rewards`` says of each: ``no_verdict`` (its comparisons without a verdict),
    ``duplicate_of`` (the completion whose judgment it shares, or None) and, for knockout,
    ``rounds_survived``; ``rounds`` is the rounds judged one after the other."""

    rewards: list[float | None]
    strategy: str
    judgments: int
    seed: int
    no_verdict: list[int] = field(default_factory=list)
    duplicate_of: list[int | None] = field(default_factory=list)
    rounds_survived: list[int | None] = field(default_factory=list)
    rounds: int = 1
    raw: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @staticmethod
    def of(body: dict[str, Any]) -> Rewards:
        completions = body.get("completions") or []
        return Rewards(
            rewards=list(body["rewards"]),
            strategy=body["strategy"],
            judgments=body["judgments"],
            seed=body["seed"],
            no_verdict=[int(c.get("no_verdict", 0)) for c in completions],
            duplicate_of=[c.get("duplicate_of") for c in completions],
            rounds_survived=[c.get("rounds_survived") for c in completions],
            rounds=int(body.get("rounds", 1)),
            raw=body,
        )


@dataclass(frozen=True)
class Cohort:
    """The group a ``/v1/rewards/sample`` call was judged in: ``arrived`` of ``group_size``
    members came (``cut``: the cohort timeout judged it without the rest), this member is
    ``index`` in the cohort's order (by content), and every member's reward is in ``rewards``."""

    group_id: str
    group_size: int
    arrived: int
    cut: bool
    wait_ms: float
    index: int
    rewards: list[float | None]
    judgments: int
    strategy: str
    seed: int

    @staticmethod
    def of(body: dict[str, Any]) -> Cohort:
        return Cohort(
            group_id=str(body["group_id"]),
            group_size=int(body["group_size"]),
            arrived=int(body["arrived"]),
            cut=bool(body["cut"]),
            wait_ms=float(body.get("wait_ms", 0.0)),
            index=int(body["index"]),
            rewards=list(body.get("rewards") or []),
            judgments=int(body.get("judgments", 0)),
            strategy=str(body["strategy"]),
            seed=int(body["seed"]),
        )


@dataclass(frozen=True)
class SampleReward:
    """One completion's reward from its cohort (``POST /v1/rewards/sample``). ``reward`` is None
    when none of its comparisons had a verdict (``no_verdict`` counts them)."""

    reward: float | None
    no_verdict: int
    cohort: Cohort
    # The cohort's completion this one equals after whitespace normalisation (its reward).
    duplicate_of: int | None = None
    # The call took over the member of an earlier call with the same completion whose client
    # had gone (a retry): no judgment was made for it.
    retried: bool = False
    raw: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @staticmethod
    def of(body: dict[str, Any]) -> SampleReward:
        return SampleReward(
            reward=body.get("reward"),
            no_verdict=int(body.get("no_verdict", 0)),
            cohort=Cohort.of(body["cohort"]),
            duplicate_of=body.get("duplicate_of"),
            retried=bool(body.get("retried", False)),
            raw=body,
        )


def batch_results(body: dict[str, Any]) -> list[BatchResult]:
    return [
        BatchResult(
            index=item["index"],
            status=item["status"],
            judgment=Judgment.of(item["result"]) if item.get("result") else None,
            detail=item.get("detail"),
        )
        for item in body["results"]
    ]


# --- request bodies --------------------------------------------------------------------------


def conversation_fields(conversation: Conversation) -> dict[str, Any]:
    if isinstance(conversation, str):
        return {"prompt": conversation}
    return {"messages": [dict(m) for m in conversation]}


def judge_body(
    conversation: Conversation, response_1: str, response_2: str, **fields: Any
) -> dict[str, Any]:
    body = {**conversation_fields(conversation), "responses": [response_1, response_2]}
    return with_seed({**body, **drop_none(fields)})


def rewards_body(
    conversation: Conversation, completions: Sequence[str], **fields: Any
) -> dict[str, Any]:
    body = {**conversation_fields(conversation), "completions": list(completions)}
    return with_seed({**body, **drop_none(fields)})


def sample_body(
    conversation: Conversation, completion: str, group_size: int, **fields: Any
) -> dict[str, Any]:
    """A cohort member. No seed is drawn here: the members of a cohort must agree on the
    cohort's settings, and the server seeds an unseeded cohort once for all of them (a retry
    of a member joins its first try, or gets the cohort's answer)."""
    body = {
        **conversation_fields(conversation),
        "completion": completion,
        "group_size": group_size,
    }
    return {**body, **drop_none(fields)}


def batch_body(items: Sequence[dict[str, Any]], defaults: dict[str, Any] | None) -> dict[str, Any]:
    """Items without a seed (in the item or the defaults) get one, so retries repeat them."""
    shared_seed = defaults is not None and defaults.get("seed") is not None
    fixed = [dict(i) if shared_seed or "seed" in i else with_seed(dict(i)) for i in items]
    return {"items": fixed, **({"defaults": defaults} if defaults else {})}


def drop_none(fields: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in fields.items() if v is not None}


def with_seed(body: dict[str, Any]) -> dict[str, Any]:
    if body.get("seed") is None:
        body["seed"] = secrets.randbelow(2**31)
    return body


def _raise_for(response: httpx.Response) -> dict[str, Any]:
    if response.status_code >= 400:
        try:
            detail = str(response.json().get("detail", response.text))
        except ValueError:
            detail = response.text
        raise ReflectRMError(response.status_code, detail)
    body: dict[str, Any] = response.json()
    return body


# --- clients ---------------------------------------------------------------------------------


class Client:
    """Synchronous client; thread-safe (httpx.Client is), pooled."""

    def __init__(
        self,
        base_url: str = DEFAULT_URL,
        *,
        timeout: httpx.Timeout | float = DEFAULT_TIMEOUT,
        retry: RetryPolicy | None = None,
        max_connections: int = 256,
        http: httpx.Client | None = None,
        sleep: Callable[[float], object] = time.sleep,
        rng: random.Random | None = None,
    ) -> None:
        self.retry = retry or DEFAULT_RETRY
        self._http = http or httpx.Client(
            base_url=base_url,
            timeout=timeout,
            limits=httpx.Limits(max_connections=max_connections),
        )
        self._sleep = sleep
        self._rng = rng or random.Random()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._http.close()

    def post(
        self,
        path: str,
        body: dict[str, Any],
        params: dict[str, Any] | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> Any:
        """POST with retries; the decoded JSON reply, or ReflectRMError."""
        response = retry_call(
            self.retry,
            lambda: self._http.post(path, json=body, params=params, headers=headers),
            sleep=self._sleep,
            rng=self._rng,
        )
        return _raise_for(response)

    def judge(
        self, conversation: Conversation, response_1: str, response_2: str, **fields: Any
    ) -> Judgment:
        """One pair (``fields``: mode, debias, num_candidates, max_tokens, seed, ...)."""
        body = judge_body(conversation, response_1, response_2, **fields)
        return Judgment.of(self.post("/v1/judge", body))

    def judge_batch(
        self, items: Sequence[dict[str, Any]], defaults: dict[str, Any] | None = None
    ) -> list[BatchResult]:
        """Many pairs (each item a /v1/judge body), answered in order."""
        return batch_results(self.post("/v1/judge/batch", batch_body(items, defaults)))

    def rewards(
        self, conversation: Conversation, completions: Sequence[str], **fields: Any
    ) -> Rewards:
        """One reward per completion (``fields``: reference, strategy, pivot, mode, debias,
        num_candidates, max_tokens, seed)."""
        return Rewards.of(
            self.post("/v1/rewards", rewards_body(conversation, completions, **fields))
        )

    def sample_reward(
        self, conversation: Conversation, completion: str, group_size: int, **fields: Any
    ) -> SampleReward:
        """One completion of a group of ``group_size``, rewarded against the others once all
        have been sent (by this or other processes) or the cohort timeout has passed.
        ``fields``: group_id (default: the conversation is the key), strategy (default
        knockout), mode, debias, num_candidates, max_tokens, seed, cohort_timeout_s."""
        body = sample_body(conversation, completion, group_size, **fields)
        return SampleReward.of(self.post("/v1/rewards/sample", body))


class AsyncClient:
    """Asynchronous client: use it from one event loop (httpx.AsyncClient is bound to it)."""

    def __init__(
        self,
        base_url: str = DEFAULT_URL,
        *,
        timeout: httpx.Timeout | float = DEFAULT_TIMEOUT,
        retry: RetryPolicy | None = None,
        max_connections: int = 256,
        http: httpx.AsyncClient | None = None,
        sleep: Callable[[float], Awaitable[object]] = asyncio.sleep,
        rng: random.Random | None = None,
    ) -> None:
        self.retry = retry or DEFAULT_RETRY
        self._http = http or httpx.AsyncClient(
            base_url=base_url,
            timeout=timeout,
            limits=httpx.Limits(max_connections=max_connections),
        )
        self._sleep = sleep
        self._rng = rng or random.Random()

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._http.aclose()

    async def post(
        self,
        path: str,
        body: dict[str, Any],
        params: dict[str, Any] | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> Any:
        """POST with retries; the decoded JSON reply, or ReflectRMError."""
        response = await retry_call_async(
            self.retry,
            lambda: self._http.post(path, json=body, params=params, headers=headers),
            sleep=self._sleep,
            rng=self._rng,
        )
        return _raise_for(response)

    async def judge(
        self, conversation: Conversation, response_1: str, response_2: str, **fields: Any
    ) -> Judgment:
        body = judge_body(conversation, response_1, response_2, **fields)
        return Judgment.of(await self.post("/v1/judge", body))

    async def judge_batch(
        self, items: Sequence[dict[str, Any]], defaults: dict[str, Any] | None = None
    ) -> list[BatchResult]:
        return batch_results(await self.post("/v1/judge/batch", batch_body(items, defaults)))

    async def rewards(
        self, conversation: Conversation, completions: Sequence[str], **fields: Any
    ) -> Rewards:
        body = rewards_body(conversation, completions, **fields)
        return Rewards.of(await self.post("/v1/rewards", body))

    async def sample_reward(
        self, conversation: Conversation, completion: str, group_size: int, **fields: Any
    ) -> SampleReward:
        """As ``Client.sample_reward``: the call waits until the cohort has been judged."""
        body = sample_body(conversation, completion, group_size, **fields)
        return SampleReward.of(await self.post("/v1/rewards/sample", body))
