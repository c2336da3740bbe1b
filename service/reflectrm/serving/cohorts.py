"""Cohorts: the completions of one group arriving as separate per-sample calls, held until the
group is whole, judged once, and each call answered with its own reward.

The per-sample trainers (OpenRLHF, verl, AReaL, SkyRL, ROLL) post one rollout per call, right
after it is generated; a group reward needs the other rollouts of the same prompt. A call names
its group (``group_id``; by default the conversation's text, which the N rollouts of a prompt
share) and the group's size. The first call of a group opens a cohort; the cohort closes when
``group_size`` members have arrived or when its timeout passes (it is then "cut": judged with
the members it has, and every reply says so). A closed cohort is judged once, by the caller's
strategy, as one group: its completions ordered by content (so the rewards do not depend on the
order the members arrived in), then every member's call is answered.

A member's call holds no admission slot while it waits: the cohort takes slots only when it is
judged, one per judgment, like any group. Cohorts are bounded in number (``max_open``), size
(the server's group limit) and time (the timeout); a cohort is forgotten once it is answered.

Retries: a caller that goes away leaves its member in the cohort (its completion is still part
of the group). A call with the same completion text arriving later adopts that member instead of
joining as a new one: while the cohort is open or being judged it waits for the same result;
after the cohort was answered, the result is kept for ``linger_s`` for such members only, so a
trainer retrying after its timeout gets the reward it would have had, with no second judgment.
A member whose caller was answered is never adopted: a later call with the same text is a new
rollout (GRPO groups do repeat completions) and joins the next cohort. A cohort that closes
with no caller left waiting is dropped unjudged.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
import time
from collections.abc import Awaitable, Callable, Coroutine, Hashable
from dataclasses import dataclass, field
from typing import Any, Literal

from reflectrm.judging.groups import Strategy
from reflectrm.serving.admission import until_disconnected
from reflectrm.serving.errors import ClosedError, InvalidRequestError, OverloadedError
from reflectrm.serving.types import Judging

HowClosed = Literal["full", "cut", "abandoned"]
STOPPING = "the service is stopping: this cohort was not judged; retry elsewhere"


@dataclass(frozen=True)
class CohortTerms:
    """What every member of one cohort must agree on (a member asking otherwise is refused)."""

    group_size: int
    strategy: Strategy
    judging: Judging
    timeout_s: float


@dataclass
class Member:
    text: str
    arrived: float
    waiters: int = 1  # callers waiting for this member's reward now
    answered: bool = False  # a caller got the reward


@dataclass
class Cohort:
    key: Hashable
    group_id: str
    terms: CohortTerms
    payload: Any  # the group's shared content (the conversation), for the judging function
    opened: float
    id: str = field(default_factory=lambda: secrets.token_hex(4))
    members: list[Member] = field(default_factory=list)
    closed_at: float | None = None
    how: HowClosed | None = None
    result: asyncio.Future[Any] = field(
        default_factory=lambda: asyncio.get_running_loop().create_future()
    )
    timer: asyncio.TimerHandle | None = None
    expires: float | None = None  # once answered: when members left unanswered are forgotten

    @property
    def texts(self) -> list[str]:
        return [m.text for m in self.members]

    @property
    def cut(self) -> bool:
        return self.how == "cut"


@dataclass(eq=False)
class Seat:
    """A caller's place in a cohort: the member whose reward it waits for. Every seat is
    either waited for (``Cohorts.wait``) or given up (``Cohorts.leave``), once."""

    cohort: Cohort
    member: Member
    adopted: bool  # a retry that took over a member whose caller had gone
    # When this caller took the seat: the member's arrival, or a retry's own (later) one.
    arrived: float = 0.0
    done: bool = False


# The judging of a closed cohort: its result, which every member's reply is built from.
JudgeCohort = Callable[[Cohort], Coroutine[Any, Any, Any]]


class Cohorts:
    def __init__(
        self,
        max_open: int,
        linger_s: float,
        judge: JudgeCohort,
        clock: Callable[[], float] = time.monotonic,
        on_close: Callable[[Cohort], None] | None = None,
        poll_s: float = 1.0,
    ) -> None:
        self.max_open = max_open
        self.poll_s = poll_s  # how often a waiting member checks that its caller is there
        self.linger_s = linger_s
        self._judge = judge
        self._clock = clock
        self._on_close = on_close or (lambda cohort: None)
        self._open: dict[Hashable, Cohort] = {}
        # Closed cohorts still being judged, and answered ones with unanswered members.
        self._closed: dict[Hashable, list[Cohort]] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._refusing: str | None = None  # why no member is taken any more (stopping)

    @property
    def open(self) -> int:
        return len(self._open)

    @property
    def kept(self) -> int:
        """Closed cohorts still held: being judged, or answered with members left unanswered."""
        return sum(len(c) for c in self._closed.values())

    # --- joining ------------------------------------------------------------------------------

    def seat(
        self, key: Hashable, group_id: str, terms: CohortTerms, payload: Any, text: str
    ) -> Seat:
        """The caller's member: an adopted one (a retry), a new one in the open cohort, or the
        first of a new cohort. Raises InvalidRequestError when the open cohort was opened with
        other terms, OverloadedError when ``max_open`` cohorts are open."""
        if self._refusing is not None:
            raise ClosedError(self._refusing)
        self._forget_expired()
        adopted = self._adoptable(key, terms, payload, text)
        if adopted is not None:
            cohort, member = adopted
            member.waiters += 1
            return Seat(cohort, member, adopted=True, arrived=self._clock())
        opened = self._open.get(key)
        if opened is None:
            if len(self._open) >= self.max_open:
                raise OverloadedError(
                    f"{len(self._open)} cohorts are open, this server's bound "
                    f"(REFLECTRM_MAX_COHORTS); retry when some have been judged",
                    retry_after_s=max(1, round(terms.timeout_s)),
                    bound="cohorts",
                )
            opened = Cohort(key, group_id, terms, payload, self._clock())
            opened.result.add_done_callback(_retrieved)
            self._open[key] = opened
            loop = asyncio.get_running_loop()
            opened.timer = loop.call_later(terms.timeout_s, self._close, opened, "cut")
        elif opened.terms != terms:
            raise InvalidRequestError(
                f"group {group_id!r} is open with {_terms_text(opened.terms)}; this call asks "
                f"for {_terms_text(terms)}: every member of a group must ask the same"
            )
        elif opened.payload != payload:
            raise InvalidRequestError(
                f"group {group_id!r} is open for another conversation: every member of a group "
                "answers the same conversation (or give each conversation its own group_id)"
            )
        member = Member(text, self._clock())
        opened.members.append(member)
        if len(opened.members) >= terms.group_size:
            self._close(opened, "full")
        return Seat(opened, member, adopted=False, arrived=member.arrived)

    def _adoptable(
        self, key: Hashable, terms: CohortTerms, payload: Any, text: str
    ) -> tuple[Cohort, Member] | None:
        """A member with this text whose caller has gone, in a cohort of the same terms and
        content, newest cohort first."""
        cohorts = list(self._closed.get(key, ()))
        if key in self._open:
            cohorts.append(self._open[key])
        for cohort in reversed(cohorts):
            if cohort.terms != terms or cohort.payload != payload:
                continue
            for member in cohort.members:
                if member.text == text and member.waiters == 0 and not member.answered:
                    return cohort, member
        return None

    # --- waiting ------------------------------------------------------------------------------

    async def wait(self, seat: Seat, is_disconnected: Callable[[], Awaitable[bool]]) -> Any:
        """The cohort's result, once judged. A caller that goes away leaves its member to a
        retry (ClientGoneError); a failed judging raises its error to every member."""
        if seat.done:
            raise RuntimeError("a seat is waited for once")
        seat.done = True
        try:
            result = await until_disconnected(
                _shielded(seat.cohort.result), is_disconnected, poll_s=self.poll_s
            )
        finally:
            seat.member.waiters -= 1
        seat.member.answered = True
        if all(m.answered for m in seat.cohort.members):
            self._drop(seat.cohort)  # every member answered: nothing left for a retry
        return result

    def leave(self, seat: Seat) -> None:
        """Give up a seat that will not be waited for (its call failed before it could wait):
        a new member leaves its cohort if it is still open; an adopted one is left for the
        next retry."""
        if seat.done:
            return
        seat.done = True
        seat.member.waiters -= 1
        cohort = seat.cohort
        if not seat.adopted and cohort.closed_at is None and seat.member in cohort.members:
            cohort.members.remove(seat.member)
            if not cohort.members:
                if cohort.timer is not None:
                    cohort.timer.cancel()
                self._open.pop(cohort.key, None)
                cohort.result.cancel()

    def refuse(self, reason: str) -> None:
        """Stop taking members (the service is stopping or lost its engine): open cohorts are
        not judged and their callers get ClosedError (503, retry elsewhere) now; cohorts being
        judged finish or fail with their judgments."""
        self._refusing = reason
        for cohort in list(self._open.values()):
            if cohort.timer is not None:
                cohort.timer.cancel()
            self._open.pop(cohort.key, None)
            cohort.closed_at = self._clock()
            if not cohort.result.done():
                cohort.result.set_exception(ClosedError(reason))

    # --- closing and judging ------------------------------------------------------------------

    def _close(self, cohort: Cohort, how: HowClosed) -> None:
        if cohort.closed_at is not None:
            return
        if cohort.timer is not None:
            cohort.timer.cancel()
        cohort.closed_at = self._clock()
        self._open.pop(cohort.key, None)
        if not any(m.waiters for m in cohort.members):
            how = "abandoned"
        cohort.how = how
        self._on_close(cohort)
        if how == "abandoned":
            cohort.result.cancel()
            return
        self._closed.setdefault(cohort.key, []).append(cohort)
        task = asyncio.get_running_loop().create_task(self._run(cohort))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _run(self, cohort: Cohort) -> None:
        try:
            result = await self._judge(cohort)
        except asyncio.CancelledError:
            if not cohort.result.done():
                cohort.result.set_exception(ClosedError(STOPPING))
            self._drop(cohort)
            raise
        except Exception as exc:
            if not cohort.result.done():
                cohort.result.set_exception(exc)
            self._drop(cohort)
            return
        cohort.result.set_result(result)
        # Members whose callers wait drop the cohort once all are answered (``wait``); one
        # whose caller has gone keeps it for ``linger_s``, for a retry to adopt.
        cohort.expires = self._clock() + self.linger_s

    def _drop(self, cohort: Cohort) -> None:
        kept = self._closed.get(cohort.key, [])
        with contextlib.suppress(ValueError):
            kept.remove(cohort)
        if not kept:
            self._closed.pop(cohort.key, None)

    def _forget_expired(self) -> None:
        """Drop answered cohorts past their linger, and the oldest answered ones beyond
        ``max_open`` kept (memory stays bounded however fast cohorts come)."""
        now = self._clock()
        answered = sorted(
            (c for cohorts in self._closed.values() for c in cohorts if c.expires is not None),
            key=lambda c: c.expires or 0.0,
        )
        excess = len(answered) - self.max_open
        for k, cohort in enumerate(answered):
            if k < excess or (cohort.expires or 0.0) <= now:
                self._drop(cohort)

    async def close(self) -> None:
        """Stop: open cohorts are not judged and the judging of closed ones is cancelled; their
        callers get ClosedError (503, retry elsewhere)."""
        self.refuse(self._refusing or STOPPING)
        for task in list(self._tasks):
            task.cancel()
        for task in list(self._tasks):
            with contextlib.suppress(BaseException):
                await task


def _retrieved(future: asyncio.Future[Any]) -> None:
    # A failure with no caller left to read it is not an unretrieved-exception warning.
    if not future.cancelled():
        future.exception()


async def _shielded(future: asyncio.Future[Any]) -> Any:
    # One caller going away must not cancel the cohort's result for the others.
    return await asyncio.shield(future)


def _terms_text(terms: CohortTerms) -> str:
    j = terms.judging
    seed = "no seed" if j.seed is None else f"seed {j.seed}"
    return (
        f"group_size {terms.group_size}, strategy {terms.strategy}, mode {j.mode}, debias "
        f"{j.debias}, num_candidates {j.num_candidates}, max_tokens {j.max_tokens}, "
        f"{seed}, cohort_timeout_s {terms.timeout_s:g}"
    )
