"""The cohort registry (serving/cohorts.py) alone, on a judging function that records its
cohorts: when a cohort closes, what it is judged with, what is kept after, what a retry adopts."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from reflectrm.api import convert
from reflectrm.judging.judge import Judge, JudgeConfig
from reflectrm.judging.types import Message
from reflectrm.serving.cohorts import Cohort, Cohorts, CohortTerms
from reflectrm.serving.context import CallContext
from reflectrm.serving.errors import (
    ClientGoneError,
    ClosedError,
    InvalidRequestError,
    OverloadedError,
)
from reflectrm.serving.service import JudgingService
from reflectrm.serving.types import Judging, MemberAsk, Options
from reflectrm.settings import Settings
from tests.conftest import ScriptedEngine, judgment


def terms(size: int = 3, timeout_s: float = 30.0) -> CohortTerms:
    judging = Judging(mode="single", debias="none", num_candidates=1, max_tokens=32, seed=1)
    return CohortTerms(size, "knockout", judging, timeout_s)


class Recorder:
    def __init__(self, delay_s: float = 0.0) -> None:
        self.judged: list[list[str]] = []
        self.delay_s = delay_s

    async def __call__(self, cohort: Cohort) -> dict[str, float]:
        self.judged.append(sorted(cohort.texts))
        await asyncio.sleep(self.delay_s)
        return {text: float(len(text)) for text in cohort.texts}


async def never() -> bool:
    return False


def gone_after(seconds: float) -> Any:
    loop = asyncio.get_running_loop()
    until = loop.time() + seconds

    async def check() -> bool:
        return loop.time() >= until

    return check


async def test_a_full_cohort_is_judged_once_and_then_forgotten():
    judge = Recorder()
    cohorts = Cohorts(poll_s=0.01, max_open=8, linger_s=60, judge=judge)
    seats = [cohorts.seat("k", "g", terms(), None, t) for t in ("b", "a", "c")]
    assert cohorts.open == 0  # closed by its third member
    results = await asyncio.gather(*(cohorts.wait(s, never) for s in seats))
    assert results == [{"b": 1.0, "a": 1.0, "c": 1.0}] * 3
    assert judge.judged == [["a", "b", "c"]]
    assert seats[0].cohort.how == "full"
    assert (cohorts.open, cohorts.kept) == (0, 0)


async def test_the_timeout_cuts_a_cohort_with_the_members_it_has():
    judge = Recorder()
    cohorts = Cohorts(poll_s=0.01, max_open=8, linger_s=60, judge=judge)
    seats = [cohorts.seat("k", "g", terms(timeout_s=0.05), None, t) for t in ("a", "b")]
    assert cohorts.open == 1
    await asyncio.gather(*(cohorts.wait(s, never) for s in seats))
    assert seats[0].cohort.how == "cut"
    assert seats[0].cohort.cut
    assert judge.judged == [["a", "b"]]


async def test_other_terms_are_refused_and_a_bound_on_open_cohorts():
    cohorts = Cohorts(poll_s=0.01, max_open=1, linger_s=60, judge=Recorder())
    cohorts.seat("k", "g", terms(), None, "a")
    with pytest.raises(InvalidRequestError, match="is open with group_size 3"):
        cohorts.seat("k", "g", terms(size=4), None, "b")
    with pytest.raises(OverloadedError) as refused:
        cohorts.seat("other", "h", terms(), None, "a")
    assert refused.value.bound == "cohorts"
    await cohorts.close()


async def test_a_retry_adopts_the_member_of_a_caller_that_left_even_after_the_answer():
    judge = Recorder(delay_s=0.05)
    cohorts = Cohorts(poll_s=0.01, max_open=8, linger_s=60, judge=judge)
    first = cohorts.seat("k", "g", terms(size=2), None, "a")
    with pytest.raises(ClientGoneError):
        await cohorts.wait(first, gone_after(0.0))
    # The cohort has not closed: the retry of "a" takes the member over, no second member.
    retry = cohorts.seat("k", "g", terms(size=2), None, "a")
    assert retry.adopted
    assert retry.member is first.member
    other = cohorts.seat("k", "g", terms(size=2), None, "b")
    # "b"'s caller leaves while the cohort is judged; its retry comes after the answer.
    waiting = asyncio.ensure_future(cohorts.wait(retry, never))
    with pytest.raises(ClientGoneError):
        await cohorts.wait(other, gone_after(0.0))
    assert await waiting == {"a": 1.0, "b": 1.0}
    assert cohorts.kept == 1  # "b" is unanswered: kept for its retry
    late = cohorts.seat("k", "g", terms(size=2), None, "b")
    assert late.adopted
    assert await cohorts.wait(late, never) == {"a": 1.0, "b": 1.0}
    assert judge.judged == [["a", "b"]]
    assert (cohorts.open, cohorts.kept) == (0, 0)


async def test_an_answered_member_is_never_adopted_and_unanswered_ones_expire():
    now = [0.0]
    cohorts = Cohorts(
        poll_s=0.01, max_open=8, linger_s=10, judge=Recorder(delay_s=0.1), clock=lambda: now[0]
    )
    a, b = (cohorts.seat("k", "g", terms(size=2), None, t) for t in ("a", "b"))
    task = asyncio.ensure_future(cohorts.wait(a, never))
    with pytest.raises(ClientGoneError):
        await cohorts.wait(b, gone_after(0.0))
    await task
    # "a" was answered: the same text again is a new rollout, in a new cohort.
    again = cohorts.seat("k", "g", terms(size=2), None, "a")
    assert not again.adopted
    assert again.cohort is not a.cohort
    # "b" was not; after the linger it is forgotten.
    now[0] = 11.0
    fresh = cohorts.seat("k", "g", terms(size=2), None, "b")
    assert not fresh.adopted
    assert fresh.cohort is again.cohort
    assert cohorts.kept == 1  # the new cohort, being judged; the old one is gone
    await asyncio.gather(cohorts.wait(again, never), cohorts.wait(fresh, never))
    assert cohorts.kept == 0


async def test_a_cohort_every_caller_left_is_dropped_unjudged():
    judge = Recorder()
    closed: list[str | None] = []
    cohorts = Cohorts(
        poll_s=0.01, max_open=8, linger_s=60, judge=judge, on_close=lambda c: closed.append(c.how)
    )
    seat = cohorts.seat("k", "g", terms(size=3, timeout_s=0.2), None, "a")
    with pytest.raises(ClientGoneError):
        await cohorts.wait(seat, gone_after(0.0))
    await asyncio.sleep(0.3)
    assert closed == ["abandoned"]
    assert judge.judged == []
    assert (cohorts.open, cohorts.kept) == (0, 0)


async def test_stopping_answers_waiting_members_with_closed_error():
    cohorts = Cohorts(poll_s=0.01, max_open=8, linger_s=60, judge=Recorder())
    seat = cohorts.seat("k", "g", terms(), None, "a")
    waiting = asyncio.ensure_future(cohorts.wait(seat, never))
    await asyncio.sleep(0)
    await cohorts.close()
    with pytest.raises(ClosedError):
        await waiting


async def test_a_seat_given_up_leaves_its_open_cohort_so_a_retry_joins_afresh():
    judge = Recorder()
    cohorts = Cohorts(poll_s=0.01, max_open=8, linger_s=60, judge=judge)
    seat = cohorts.seat("k", "g", terms(size=2), None, "a")
    cohorts.leave(seat)  # its call failed on another sample before it could wait
    assert cohorts.open == 0
    retry = cohorts.seat("k", "g", terms(size=2), None, "a")
    assert not retry.adopted
    other = cohorts.seat("k", "g", terms(size=2), None, "b")
    results = await asyncio.gather(cohorts.wait(retry, never), cohorts.wait(other, never))
    assert results == [{"a": 1.0, "b": 1.0}] * 2
    assert judge.judged == [["a", "b"]]


async def test_a_retry_adopts_only_within_the_same_terms_and_conversation():
    cohorts = Cohorts(poll_s=0.01, max_open=8, linger_s=60, judge=Recorder())
    gone = cohorts.seat("k", "g", terms(size=3), "conversation X", "a")
    with pytest.raises(ClientGoneError):
        await cohorts.wait(gone, gone_after(0.0))
    with pytest.raises(InvalidRequestError, match="is open with"):
        cohorts.seat("k", "g", terms(size=4), "conversation X", "a")
    with pytest.raises(InvalidRequestError, match="another conversation"):
        cohorts.seat("k", "g", terms(size=3), "conversation Y", "a")
    same = cohorts.seat("k", "g", terms(size=3), "conversation X", "a")
    assert same.adopted
    await cohorts.close()


async def test_refusing_answers_open_cohorts_now_and_takes_no_member_after():
    cohorts = Cohorts(poll_s=0.01, max_open=8, linger_s=60, judge=Recorder())
    seat = cohorts.seat("k", "g", terms(), None, "a")
    waiting = asyncio.ensure_future(cohorts.wait(seat, never))
    await asyncio.sleep(0)
    cohorts.refuse("the service is stopping")
    with pytest.raises(ClosedError, match="stopping"):
        await waiting
    with pytest.raises(ClosedError):
        cohorts.seat("k", "g", terms(), None, "b")
    assert cohorts.open == 0


# --- through the service: what each member's reply says ------------------------------------------


async def test_a_retry_reports_its_own_wait_not_the_first_callers():
    service = JudgingService(Settings(swap_check_fraction=0))
    service.serve_with(Judge(ScriptedEngine(stage1=[judgment(1)]), JudgeConfig()))
    now = [100.0]
    service.cohorts._clock = lambda: now[0]

    def ask(text: str) -> MemberAsk:
        conversation = (Message("user", "q"),)
        options = Options(mode="single", debias="none", seed=1)
        return MemberAsk(conversation, text, group_size=3, options=options)

    async def gone() -> bool:
        return True

    # a's caller arrives at 100 and goes away; its retry comes at 103, b and c at 104 (full).
    with pytest.raises(ClientGoneError):
        await service.member_reward(ask("a"), CallContext("a1", is_disconnected=gone))
    now[0] = 103.0
    retry = asyncio.ensure_future(service.member_reward(ask("a"), CallContext("a2")))
    await asyncio.sleep(0.01)
    now[0] = 104.0
    b, c = (service.member_reward(ask(t), CallContext(t)) for t in "bc")
    results = await asyncio.gather(retry, b, c)
    assert results[0].adopted
    # Its own wait, 104 - 103 = 1 s (before: 104 - 100 = 4 s, the first caller's).
    assert [r.wait_s for r in results] == [1.0, 0.0, 0.0]
    assert convert.cohort_result(results[0]).wait_ms == 1000.0
    logs = convert.openrlhf_cohort_response(results).extra_logs
    assert logs["judge_cohort_wait_s"] == [1.0, 0.0, 0.0]
    await service.close("done")
