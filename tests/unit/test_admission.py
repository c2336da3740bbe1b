"""Admission: slots, the bounded first-come-first-served queue, Retry-After, deadline, disconnect."""

from __future__ import annotations

import asyncio

import pytest

from reflectrm.serving.admission import (
    DEFAULT_RETRY_AFTER_S,
    Admission,
    ClientGoneError,
    ClosedError,
    DeadlineExceededError,
    OverloadedError,
    until_disconnected,
)


async def hold(admission: Admission, release: asyncio.Event, log: list[str], name: str) -> str:
    async def work() -> str:
        log.append(f"start {name}")
        await release.wait()
        return name

    return await admission.admitted(work(), deadline_s=30)


async def settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


async def test_over_the_limit_a_call_waits_and_is_served_in_arrival_order():
    admission = Admission(max_in_flight=1, max_queued=10, queue_timeout_s=30)
    release = asyncio.Event()
    log: list[str] = []
    tasks = [asyncio.create_task(hold(admission, release, log, n)) for n in "abc"]
    await settle()
    assert log == ["start a"]
    assert (admission.in_flight, admission.queued) == (1, 2)
    release.set()
    assert await asyncio.gather(*tasks) == ["a", "b", "c"]
    assert log == ["start a", "start b", "start c"]
    assert (admission.in_flight, admission.queued) == (0, 0)


async def test_a_full_queue_refuses_at_once_with_the_default_retry_after():
    admission = Admission(max_in_flight=1, max_queued=1, queue_timeout_s=30)
    release = asyncio.Event()
    log: list[str] = []
    first = asyncio.create_task(hold(admission, release, log, "a"))
    second = asyncio.create_task(hold(admission, release, log, "b"))
    await settle()
    work_started = []

    async def never() -> None:
        work_started.append(True)

    with pytest.raises(OverloadedError) as refused:
        await admission.admitted(never(), deadline_s=30)
    assert refused.value.retry_after_s == DEFAULT_RETRY_AFTER_S  # no completion measured yet
    assert "REFLECTRM_MAX_QUEUED_JUDGMENTS" in str(refused.value)
    assert work_started == []
    release.set()
    assert await asyncio.gather(first, second) == ["a", "b"]


async def test_a_wait_past_the_queue_timeout_is_refused_and_leaves_the_queue():
    admission = Admission(max_in_flight=1, max_queued=5, queue_timeout_s=0.05)
    release = asyncio.Event()
    log: list[str] = []
    first = asyncio.create_task(hold(admission, release, log, "a"))
    await settle()
    with pytest.raises(OverloadedError, match="REFLECTRM_QUEUE_TIMEOUT_S"):
        await hold(admission, release, log, "late")
    assert admission.queued == 0
    assert log == ["start a"]
    release.set()
    assert await first == "a"
    assert admission.in_flight == 0


async def test_retry_after_follows_the_measured_rate():
    now = [0.0]
    admission = Admission(max_in_flight=1, max_queued=10, queue_timeout_s=30, clock=lambda: now[0])
    # Five completions 2 s apart: 4 intervals in 8 s, 0.5 judgments/s.
    for t in (0.0, 2.0, 4.0, 6.0, 8.0):
        now[0] = t
        async with admission.slot():
            pass
    assert admission.service_rate() == pytest.approx(0.5)
    # Idle service: one caller ahead (the new one itself) -> ceil(1 / 0.5) = 2 s.
    assert admission.retry_after_s() == 2
    # One slot busy and three waiting: ahead = 3 + (1 - 1 + 1) = 4, (4 + 1) / 0.5 = 10 s.
    admission._in_flight = 1
    admission._queued = 3
    assert admission.retry_after_s() == 10
    admission._queued = 0
    admission._in_flight = 0


async def test_a_cancelled_waiter_frees_its_place_and_the_slot_passes_on():
    admission = Admission(max_in_flight=1, max_queued=5, queue_timeout_s=30)
    release = asyncio.Event()
    log: list[str] = []
    first = asyncio.create_task(hold(admission, release, log, "a"))
    gone = asyncio.create_task(hold(admission, release, log, "gone"))
    third = asyncio.create_task(hold(admission, release, log, "c"))
    await settle()
    gone.cancel()
    await settle()
    assert admission.queued == 1
    release.set()
    assert await asyncio.gather(first, third) == ["a", "c"]
    assert "start gone" not in log
    assert (admission.in_flight, admission.queued) == (0, 0)


async def test_the_deadline_counts_from_admission_and_cancels_the_work():
    admission = Admission(max_in_flight=1, max_queued=5, queue_timeout_s=30)
    cancelled = []

    async def slow() -> None:
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            cancelled.append(True)
            raise

    with pytest.raises(DeadlineExceededError, match="REFLECTRM_REQUEST_TIMEOUT_S"):
        await admission.admitted(slow(), deadline_s=0.05)
    assert cancelled == [True]
    assert admission.in_flight == 0


async def test_closing_refuses_queued_and_new_callers():
    admission = Admission(max_in_flight=1, max_queued=5, queue_timeout_s=30)
    release = asyncio.Event()
    log: list[str] = []
    first = asyncio.create_task(hold(admission, release, log, "a"))
    waiting = asyncio.create_task(hold(admission, release, log, "b"))
    await settle()
    admission.close("shutting down")
    with pytest.raises(ClosedError, match="shutting down"):
        await waiting
    with pytest.raises(ClosedError, match="shutting down"):
        await hold(admission, release, log, "c")
    release.set()
    assert await first == "a"  # admitted before the close: it finishes
    assert admission.in_flight == 0


async def test_abort_ends_admitted_work_with_closed_and_frees_every_slot():
    admission = Admission(max_in_flight=2, max_queued=5, queue_timeout_s=30)
    cancelled: list[str] = []

    async def forever(name: str) -> str:
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            cancelled.append(name)  # where the engine requests are aborted
            raise
        return name

    running = [asyncio.create_task(admission.admitted(forever(n), deadline_s=3600)) for n in "ab"]
    queued = asyncio.create_task(admission.admitted(forever("c"), deadline_s=3600))
    await settle()
    assert (admission.in_flight, admission.queued) == (2, 1)
    assert admission.abort("the engine stopped") == 2
    for task in [*running, queued]:
        with pytest.raises(ClosedError, match="the engine stopped"):
            await task
    assert sorted(cancelled) == ["a", "b"]  # "c" never started
    assert (admission.in_flight, admission.queued) == (0, 0)
    with pytest.raises(ClosedError):
        await admission.admitted(forever("d"), deadline_s=3600)


async def test_a_caller_cancelled_after_an_abort_stays_cancelled():
    # Cancellation from outside (a disconnect) is not turned into ClosedError.
    admission = Admission(max_in_flight=1, max_queued=5, queue_timeout_s=30)
    admission._aborted = "stopping"  # an earlier abort; this call was admitted before it

    async def forever() -> None:
        await asyncio.sleep(3600)

    caller = asyncio.create_task(admission.admitted(forever(), deadline_s=3600))
    await settle()
    caller.cancel()
    with pytest.raises(asyncio.CancelledError):
        await caller
    assert admission.in_flight == 0


async def test_a_disconnected_client_has_its_work_cancelled():
    cancelled = []

    async def slow() -> None:
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            cancelled.append(True)
            raise

    async def gone() -> bool:
        return True

    with pytest.raises(ClientGoneError):
        await until_disconnected(slow(), gone, poll_s=0.01)
    assert cancelled == [True]
