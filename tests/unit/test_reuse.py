"""Retries that cost nothing: identical calls joined in flight, answered from the cache after,
failures not kept, abandoned work cancelled after the grace period."""

from __future__ import annotations

import asyncio

import pytest

from reflectrm.serving.reuse import Reuse


class Work:
    def __init__(self) -> None:
        self.runs = 0
        self.release = asyncio.Event()
        self.cancelled = 0

    async def __call__(self) -> str:
        self.runs += 1
        try:
            await self.release.wait()
        except asyncio.CancelledError:
            self.cancelled += 1
            raise
        return f"answer {self.runs}"


async def settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


async def test_identical_calls_in_flight_share_one_run_and_later_ones_are_cached():
    now = [0.0]
    reuse = Reuse(size=8, ttl_s=60, grace_s=0, clock=lambda: now[0])
    work = Work()
    calls = [asyncio.create_task(reuse.run("k", work)) for _ in range(3)]
    await settle()
    work.release.set()
    answers = await asyncio.gather(*calls)
    assert answers == [("answer 1", "judged"), ("answer 1", "joined"), ("answer 1", "joined")]
    assert work.runs == 1
    now[0] = 59.9
    assert await reuse.run("k", work) == ("answer 1", "cached")
    now[0] = 60.0  # expired: judged again
    assert await reuse.run("k", work) == ("answer 2", "judged")
    assert work.runs == 2


async def test_a_different_key_is_judged_on_its_own():
    reuse = Reuse(size=8, ttl_s=60, grace_s=0)
    work = Work()
    work.release.set()
    assert await reuse.run("a", work) == ("answer 1", "judged")
    assert await reuse.run("b", work) == ("answer 2", "judged")


async def test_a_failure_reaches_everyone_waiting_and_is_not_kept():
    reuse = Reuse(size=8, ttl_s=60, grace_s=0)
    attempts = []

    async def failing() -> str:
        attempts.append(1)
        await asyncio.sleep(0.01)
        raise RuntimeError("engine died")

    calls = [asyncio.create_task(reuse.run("k", failing)) for _ in range(2)]
    results = await asyncio.gather(*calls, return_exceptions=True)
    assert [str(r) for r in results] == ["engine died", "engine died"]
    assert len(attempts) == 1
    with pytest.raises(RuntimeError):
        await reuse.run("k", failing)
    assert len(attempts) == 2  # tried again, not answered from a cache


async def test_the_cache_keeps_the_most_recent_answers_only():
    reuse = Reuse(size=2, ttl_s=60, grace_s=0)
    work = Work()
    work.release.set()
    for key in ("a", "b", "c"):
        await reuse.run(key, work)
    assert reuse.cached == 2
    assert (await reuse.run("a", work))[1] == "judged"  # the oldest was dropped
    assert (await reuse.run("c", work))[1] == "cached"


async def test_one_caller_leaving_leaves_the_work_to_the_others():
    reuse = Reuse(size=8, ttl_s=60, grace_s=0)
    work = Work()
    first = asyncio.create_task(reuse.run("k", work))
    second = asyncio.create_task(reuse.run("k", work))
    await settle()
    first.cancel()
    await settle()
    assert work.cancelled == 0
    work.release.set()
    assert await second == ("answer 1", "joined")


async def test_abandoned_work_is_cancelled_after_the_grace_unless_a_retry_joins_it():
    reuse = Reuse(size=8, ttl_s=60, grace_s=0.05)
    work = Work()
    caller = asyncio.create_task(reuse.run("k", work))
    await settle()
    caller.cancel()  # the client went away
    await asyncio.sleep(0.02)
    retry = asyncio.create_task(reuse.run("k", work))  # within the grace: it joins
    await asyncio.sleep(0.1)
    assert work.cancelled == 0
    work.release.set()
    assert await retry == ("answer 1", "joined")
    assert work.runs == 1

    other = Work()
    gone = asyncio.create_task(reuse.run("other", other))
    await settle()
    gone.cancel()
    await asyncio.sleep(0.1)  # past the grace with nobody waiting: the work is cancelled
    assert other.cancelled == 1
    assert reuse.in_flight == 0


async def test_without_grace_abandoned_work_is_cancelled_at_once():
    reuse = Reuse(size=8, ttl_s=60, grace_s=0)
    work = Work()
    caller = asyncio.create_task(reuse.run("k", work))
    await settle()
    caller.cancel()
    await settle()
    assert work.cancelled == 1


async def test_a_call_after_the_work_was_abandoned_starts_it_again_not_joins_the_cancelled():
    reuse = Reuse(size=8, ttl_s=60, grace_s=0)
    work = Work()
    caller = asyncio.create_task(reuse.run("k", work))
    await settle()
    caller.cancel()  # the last caller leaves: the work is being cancelled
    retry = asyncio.create_task(reuse.run("k", work))
    await settle()
    work.release.set()
    assert await retry == ("answer 2", "judged")
