"""The one retry policy: its waits, which results it repeats, the attempt loops, and the numbers
each caller (the Python client, the remote engine, keeps as a policy."""

from __future__ import annotations

import asyncio
import math

import httpx
import pytest

from reflectrm.client import DEFAULT_RETRY
from reflectrm.engines.config import RemoteConfig
from reflectrm.engines.remote import retry_policy
from reflectrm.retry import (
    CONNECTION_ERRORS,
    RetryPolicy,
    retry_after_of,
    retry_call,
    retry_call_async,
)

STEADY = RetryPolicy(max_retries=2, backoff_s=1.0, jitter=0.0)


def answer(status: int, retry_after: str | None = None) -> httpx.Response:
    headers = {"Retry-After": retry_after} if retry_after is not None else {}
    return httpx.Response(status, headers=headers)


def test_each_caller_keeps_its_numbers():
    client = DEFAULT_RETRY
    assert (client.attempts, client.backoff_s, client.max_backoff_s, client.jitter) == (
        9,
        1.0,
        60.0,
        0.5,
    )
    assert client.statuses == {429, 503}
    assert client.max_retry_after_s == math.inf
    assert client.errors == CONNECTION_ERRORS
    fleet = retry_policy(RemoteConfig())
    assert (fleet.attempts, fleet.backoff_s, fleet.max_backoff_s, fleet.jitter) == (
        3,
        0.5,
        math.inf,
        0.0,
    )
    assert fleet.statuses == {408, 429, 502, 503, 504}
    assert fleet.max_retry_after_s == 10.0
    assert fleet.errors == CONNECTION_ERRORS


def test_retry_after_in_seconds_or_nothing():
    assert retry_after_of(answer(503, "7")) == 7.0
    assert retry_after_of(answer(503, "1.5")) == 1.5
    assert retry_after_of(answer(503, "-3")) == 0.0
    assert retry_after_of(answer(503, "Wed, 21 Oct 2015 07:28:00 GMT")) is None
    assert retry_after_of(answer(503, "")) is None
    assert retry_after_of(answer(503, "nan")) is None
    assert retry_after_of(answer(503, "inf")) is None
    assert retry_after_of(answer(503)) is None
    capped = RetryPolicy(max_retry_after_s=10.0)
    assert capped.retry_after(answer(503, "99")) == 10.0
    assert capped.retry_after(answer(503, "3")) == 3.0


def test_what_is_repeated_and_after_how_long():
    # Doubling from 1 s; Retry-After when longer.
    assert STEADY.wait_after(0, answer(503)) == 1.0
    assert STEADY.wait_after(1, answer(429, "5")) == 5.0
    assert STEADY.wait_after(1, answer(429, "1")) == 2.0
    assert STEADY.wait_after(0, httpx.ConnectError("refused")) == 1.0
    # Final: a success, a status not in the policy, an exception not in it, the last attempt.
    assert STEADY.wait_after(0, answer(200)) is None
    assert STEADY.wait_after(0, answer(500)) is None
    assert STEADY.wait_after(0, httpx.ReadTimeout("slow")) is None
    assert STEADY.wait_after(0, ValueError("bug")) is None
    assert STEADY.wait_after(2, answer(503)) is None
    assert RetryPolicy(max_retries=0).wait_after(0, answer(503)) is None
    # The backoff's cap does not cut a longer Retry-After.
    capped = RetryPolicy(backoff_s=1.0, max_backoff_s=2.0, jitter=0.0)
    assert capped.delay(5) == 2.0
    assert capped.delay(5, 30.0) == 30.0


def test_the_sync_loop_returns_the_final_answer_and_reports_each_retry():
    answers = [httpx.ConnectError("refused"), answer(503, "3"), answer(503), answer(503)]
    sleeps: list[float] = []
    retries: list[tuple[int, str, float]] = []

    def send() -> httpx.Response:
        reply = answers.pop(0)
        if isinstance(reply, Exception):
            raise reply
        return reply

    def note(attempt: int, result: httpx.Response | Exception, wait: float) -> None:
        what = type(result).__name__ if isinstance(result, Exception) else str(result.status_code)
        retries.append((attempt, what, wait))

    final = retry_call(STEADY, send, sleep=sleeps.append, on_retry=note)
    # Retries used up: the last answer is the result, for the caller to read.
    assert final.status_code == 503
    assert len(answers) == 1
    assert sleeps == [1.0, 3.0]
    assert retries == [(0, "ConnectError", 1.0), (1, "503", 3.0)]


def test_the_sync_loop_raises_what_it_does_not_repeat():
    calls: list[int] = []

    def send() -> httpx.Response:
        calls.append(1)
        raise httpx.ReadTimeout("slow")

    with pytest.raises(httpx.ReadTimeout):
        retry_call(STEADY, send, sleep=lambda s: pytest.fail("no wait"))
    assert len(calls) == 1

    def refused() -> httpx.Response:
        calls.append(1)
        raise httpx.ConnectError("refused")

    calls.clear()
    with pytest.raises(httpx.ConnectError):
        retry_call(STEADY, refused, sleep=lambda s: None)
    assert len(calls) == STEADY.attempts == 3


def test_the_async_loop_is_the_same_loop():
    answers = [answer(429, "2"), httpx.RemoteProtocolError("dropped"), answer(200)]
    sleeps: list[float] = []

    async def send() -> httpx.Response:
        reply = answers.pop(0)
        if isinstance(reply, Exception):
            raise reply
        return reply

    async def sleep(seconds: float) -> None:
        sleeps.append(seconds)

    final = asyncio.run(retry_call_async(STEADY, send, sleep=sleep))
    assert final.status_code == 200
    assert sleeps == [2.0, 2.0]
