"""The judging service: one object between the HTTP edge and the judge, written once around any
call (TGI's ``Infer``). It holds the judge (once the engine is up), admission, the metrics and the
background swap checks, and offers the operations the routes need: a pair, a batch of pairs, a
group of completions, per-sample rewards. Each applies the server's defaults and limits
(``serving.limits``), runs its judgments admitted (a slot each, under the deadline), is cancelled
when its caller goes away, and is counted in the metrics and the call's log line. It raises the
service's own exceptions (``serving.errors``) and knows nothing of HTTP.

Admission: every judgment takes its own slot, so a batch or a group that needs N judgments queues
as N judgments in the same first-come-first-served queue as single calls (a group's wait is
bounded like theirs), and no judgment holds a slot while waiting for another, so a large group
cannot deadlock the service. A batch's judgments are submitted together, so the engine batches
them, and so are a group's, round by round (an adaptive design, knockout or swiss, pairs each
round from the results of the one before).
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import logging
from collections.abc import Coroutine, Hashable, Iterator, Sequence
from typing import Any, TypeVar

from reflectrm.aio import gather_all
from reflectrm.judging.answers import answer_pair
from reflectrm.judging.debias import both_orders, flipped, single_order
from reflectrm.judging.groups import Comparison, design
from reflectrm.judging.judge import Judge, PromptTooLongError, consistent, swapped
from reflectrm.judging.types import Judgment, JudgmentSpec, Message
from reflectrm.metrics import CutReason, Metrics
from reflectrm.serving.admission import Admission, until_disconnected
from reflectrm.serving.cohorts import Cohort, Cohorts, Seat
from reflectrm.serving.context import CallContext
from reflectrm.serving.errors import (
    InvalidRequestError,
    OverloadedError,
    TooMuchWorkError,
    UnavailableError,
    outcome_of,
)
from reflectrm.serving.limits import FLOOR_TEXT, Limits, group_spec, sample_response
from reflectrm.serving.reuse import How, Reuse
from reflectrm.serving.swap_checks import SwapChecker, swap_result
from reflectrm.serving.types import (
    BatchResult,
    Envelope,
    FailedItem,
    GroupAsk,
    GroupResult,
    GroupSpec,
    Judged,
    MemberAsk,
    MemberResult,
    PairAsk,
    PairResult,
    SampleAsk,
    SampleOptions,
)
from reflectrm.settings import Settings

T = TypeVar("T")
log = logging.getLogger(__name__)

LOADING = "the engine is loading; retry when GET /ready answers 200"


def _conversation_id(conversation: Sequence[Message]) -> str:
    """A cohort keyed by its conversation, named in replies by a digest of it."""
    digest = hashlib.sha256()
    for message in conversation:
        digest.update(f"{message.role}\0{message.content}\0".encode())
    return f"conversation:{digest.hexdigest()[:16]}"


def cohort_name(tenant: str, ask: MemberAsk) -> str:
    """The cohort a member joins, as a text: its tenant and its group (the group_id, else the
    conversation's digest), exactly what tells one cohort from another (``JudgingService._seat``).
    The peers hash it to choose the cohort's owner (``serving.ownership``)."""
    group = f"g:{ask.group_id}" if ask.group_id is not None else _conversation_id(ask.conversation)
    return f"{tenant}\n{group}"


def member_asks(samples: Sequence[SampleAsk], per_sample: SampleOptions) -> list[MemberAsk]:
    """Per-sample calls' samples (OpenRLHF with ``group_size``) as members of their prompts'
    cohorts (the prompt's text is the cohort's key)."""
    if per_sample.group_size is None:
        raise InvalidRequestError("group rewards per sample need group_size")
    return [
        MemberAsk(
            conversation=(Message("user", sample.prompt),),
            completion=sample_response(k, sample),
            group_size=per_sample.group_size,
            strategy=per_sample.strategy,
            options=per_sample.options,
            cohort_timeout_s=per_sample.cohort_timeout_s,
        )
        for k, sample in enumerate(samples)
    ]


def _counted(outcome: str, tie: bool) -> str:
    """The outcome a judgment is counted (and logged) under: a tie of both orders is a tie, not
    a silence, although its answer has no winner (``outcome`` no_verdict)."""
    return "tie" if tie else outcome


class JudgingService:
    def __init__(self, settings: Settings, metrics: Metrics | None = None) -> None:
        self.settings = settings
        self.metrics = metrics or Metrics()
        self.judge: Judge | None = None
        # Why the service is not judging (the engine is loading, failed, or the service is
        # stopping); None while it serves.
        self.unavailable: str | None = LOADING
        self.limits = Limits(settings)
        # A pair's mode and debias where its call names none (the served judge's manifest's).
        self.pair_defaults = settings.pair_defaults()
        s = settings
        self.admission = Admission(
            s.max_concurrent_judgments,
            s.max_queued_judgments,
            s.queue_timeout_s,
            max_queued_per_tenant=s.max_queued_per_tenant,
            max_in_flight_per_tenant=s.max_in_flight_per_tenant,
            weights=s.weights(),
            max_tenants=s.max_tenants,
        )
        self.admission.on_wait = self.metrics.observe_queue_wait
        self.metrics.track_admission(
            lambda: self.admission.in_flight, lambda: self.admission.queued
        )
        self.metrics.track_tenants(
            lambda: {
                name: (t.queued, t.in_flight) for name, t in self.admission.tenant_stats().items()
            }
        )
        self.reuse = Reuse(s.result_cache_size, s.result_cache_ttl_s, s.retry_grace_s)
        # Members left unanswered (their callers gone) keep their reward as long as the cache
        # keeps answers, for the trainer's retry.
        self.cohorts = Cohorts(
            s.max_cohorts,
            s.result_cache_ttl_s,
            self._judge_cohort,
            on_close=self._cohort_closed,
            # A caller gone is noticed within 0.25 s, before a retry (OpenRLHF waits 1 s) comes
            # to take its member over.
            poll_s=0.25,
        )
        self.metrics.track_cohorts(lambda: self.cohorts.open)
        self.swap_checks = SwapChecker(
            settings.swap_check_config(), self.metrics, live_load=self.live_load
        )

    # --- state ------------------------------------------------------------------------------

    def serve_with(self, judge: Judge) -> None:
        self.judge = judge
        self.limits.format_floor = judge.min_max_tokens
        self.limits.unavailable = judge.unavailable
        self.limits.template_version = judge.template.version
        self.unavailable = None

    def settings_problem(self, judge: Judge) -> str | None:
        """What in the settings cannot work with this judge's model, said for the operator;
        None when nothing. REFLECTRM_MAX_TOKENS must hold the output format (the floor of
        reflect mode, which also holds the others'), or no call left at the default could end
        in a verdict."""
        floor = judge.min_max_tokens("reflect")
        if floor is None or self.settings.max_tokens >= floor:
            return None
        return (
            f"REFLECTRM_MAX_TOKENS is {self.settings.max_tokens}, below the {floor} tokens an "
            f"output needs in the enforced format with this model's tokenizer and template "
            f"{judge.template.version} ({FLOOR_TEXT}): no judgment at the default could end in a "
            f"verdict; set REFLECTRM_MAX_TOKENS to at least {floor} (or "
            "REFLECTRM_ENFORCE_FORMAT=false for a model trained on the template)"
        )

    def stop_serving(self, reason: str) -> None:
        self.judge = None
        self.unavailable = reason

    def live_load(self) -> int:
        """Live judgments running or waiting for a slot."""
        return self.admission.in_flight + self.admission.queued

    def require_judge(self) -> Judge:
        if self.judge is None:
            raise UnavailableError(self.unavailable or "the engine is not ready")
        return self.judge

    async def check_ready(self) -> str:
        """The model's name once the engine answers; UnavailableError or EngineError otherwise."""
        judge = self.require_judge()
        await judge.engine.check_health()
        return judge.engine.model_name

    async def close(self, reason: str) -> None:
        """Admit nothing more and stop the background checks (before the engine shuts down)."""
        self.admission.close(reason)
        await self.cohorts.close()
        await self.swap_checks.close()
        await self.reuse.close()

    # --- the operations ---------------------------------------------------------------------

    async def judge_pair(self, ask: PairAsk, call: CallContext) -> PairResult:
        """One pair, in one order or both (debias swap, check_swap)."""
        judge = self.require_judge()
        with self._observed(call, ask.options.mode):
            request = self.limits.pair_request(ask)
            self.limits.check_pair(ask, request)
            result, how = await self._cancellable(
                call, self._reused_pair(judge, call, ask, request, "")
            )
            self._record_pair(call, result, how)
        if how == "judged":
            self._offer_swap_check(judge, result)
        return result

    async def judge_batch(
        self, items: Sequence[PairAsk | FailedItem], mode: str, call: CallContext
    ) -> BatchResult:
        """Many pairs at once. What is wrong with an item itself (invalid, over a limit, too
        long) becomes its own FailedItem; what is wrong with the service (overload, no engine,
        the deadline, a disconnect) fails the whole batch."""
        judge = self.require_judge()
        with self._observed(call, mode):
            self.limits.check_batch(items)
            work = [self._batch_item(judge, call, k, item) for k, item in enumerate(items)]
            done = await self._cancellable(call, gather_all(work))
            result = BatchResult(tuple(done), self._envelope(judge, call, call.request_id))
            outcomes = [
                (d.ask.options.mode, _counted(d.answer.outcome, d.answer.tie))
                if isinstance(d, PairResult)
                else (d.mode, outcome_of(d.error))
                for d in done
            ]
            self._record_many(call, mode, "batch", outcomes, result.usage.generated_tokens)
        return result

    async def group_rewards(self, ask: GroupAsk, call: CallContext) -> GroupResult:
        """One reward per completion of a group, by the ask's strategy."""
        judge = self.require_judge()
        with self._observed(call, ask.options.mode):
            spec = self.limits.group_spec(ask)
            self.limits.check_groups([spec])
            result = await self._cancellable(call, self._reused_group(judge, call, spec, ""))
            self._record_many(
                call,
                ask.options.mode,
                spec.strategy,
                self._group_outcomes(result),
                result.usage.generated_tokens,
            )
        return result

    async def member_reward(self, ask: MemberAsk, call: CallContext) -> MemberResult:
        """One completion of a group whose other members arrive in calls of their own: held
        (without an admission slot) until its cohort closes, then answered with its reward
        from the cohort's one judging (``serving.cohorts``)."""
        judge = self.require_judge()
        with self._observed(call, ask.options.mode):
            seat = self._seat(call, ask)
            result = await self._member(judge, call, seat)
            self._record_member(call, result)
        return result

    async def sample_rewards(
        self, samples: Sequence[SampleAsk], per_sample: SampleOptions, call: CallContext
    ) -> list[GroupResult]:
        """Per-sample rewards (OpenRLHF): each sample's response, the query after its prompt, is
        judged against its label as a reference-strategy group of one."""
        judge = self.require_judge()
        with self._observed(call, per_sample.options.mode):
            specs = self.limits.sample_specs(samples, per_sample)
            self.limits.check_groups(specs)
            groups = [
                self._reused_group(judge, call, spec, f"-q{k}") for k, spec in enumerate(specs)
            ]
            results = await self._cancellable(call, gather_all(groups))
            outcomes = [o for r in results for o in self._group_outcomes(r)]
            tokens = sum(r.usage.generated_tokens for r in results)
            self._record_many(call, per_sample.options.mode, "get_reward", outcomes, tokens)
        return results

    async def member_rewards(
        self, samples: Sequence[SampleAsk], per_sample: SampleOptions, call: CallContext
    ) -> list[MemberResult]:
        """Per-sample group rewards (OpenRLHF with ``group_size``): each sample's response is a
        member of its prompt's cohort (the prompt's text is the cohort's key), answered as
        ``member_reward`` answers one."""
        if per_sample.group_size is None:
            raise InvalidRequestError("group rewards per sample need group_size")
        judge = self.require_judge()
        with self._observed(call, per_sample.options.mode):
            self.limits.check_samples(len(samples))
            asks = member_asks(samples, per_sample)
            seats: list[Seat] = []
            try:
                for ask in asks:
                    seats.append(self._seat(call, ask))
                results = await gather_all([self._member(judge, call, seat) for seat in seats])
            except BaseException:
                # Seats not waited for (a later sample refused, or the call cancelled first)
                # leave their cohorts, so a retry of the call joins them afresh.
                for seat in seats:
                    self.cohorts.leave(seat)
                raise
            for result in results:
                self._record_member(call, result)
        return results

    # --- cohorts ------------------------------------------------------------------------------

    def cohort_timeout_s(self, ask: MemberAsk) -> float:
        """How long the member's cohort waits for its members: the call's, else the server's."""
        if ask.cohort_timeout_s is not None:
            return ask.cohort_timeout_s
        return self.settings.cohort_timeout_s

    def _seat(self, call: CallContext, ask: MemberAsk) -> Seat:
        """The call's member in its cohort, after the server's defaults and limits."""
        terms = self.limits.cohort_terms(ask)
        group_id = ask.group_id if ask.group_id is not None else _conversation_id(ask.conversation)
        key = ("cohort", call.tenant, ask.group_id or ask.conversation)
        payload = (call.tenant, ask.conversation)
        return self.cohorts.seat(key, group_id, terms, payload, ask.completion)

    async def _member(self, judge: Judge, call: CallContext, seat: Seat) -> MemberResult:
        group: GroupResult = await self.cohorts.wait(seat, call.is_disconnected)
        cohort, text = seat.cohort, seat.member.text
        index = group.spec.completions.index(text)
        assert cohort.closed_at is not None
        return MemberResult(
            index=index,
            reward=group.rewards[index],
            group=group,
            group_id=cohort.group_id,
            group_size=cohort.terms.group_size,
            arrived=len(cohort.members),
            cut=cohort.cut,
            # This call's own wait: a retry that took over a member waited from its own arrival
            # (none if the cohort had closed already), not from the first caller's.
            wait_s=max(0.0, cohort.closed_at - seat.arrived),
            adopted=seat.adopted,
            envelope=self._envelope(judge, call, call.request_id),
        )

    async def _judge_cohort(self, cohort: Cohort) -> GroupResult:
        """A closed cohort judged as one group, its completions ordered by content, under its
        tenant (a slot per judgment, like any group)."""
        judge = self.require_judge()
        tenant, conversation = cohort.payload
        terms = cohort.terms
        completions = tuple(sorted(cohort.texts))
        spec = group_spec(terms.judging, conversation, completions, None, terms.strategy, None)
        call = CallContext(request_id=f"cohort-{cohort.id}", tenant=tenant)
        result = await self._reused_group(judge, call, spec, "")
        outcomes = self._group_outcomes(result)
        for mode, outcome in outcomes:
            self.metrics.observe_request(mode, outcome, call.seconds)
        return result

    def _cohort_closed(self, cohort: Cohort) -> None:
        assert cohort.closed_at is not None
        assert cohort.how is not None
        closed = cohort.closed_at
        self.metrics.observe_cohort(cohort.how, [closed - m.arrived for m in cohort.members])
        if cohort.cut:
            self._cohort_cut(cohort)

    def _cohort_cut(self, cohort: Cohort) -> None:
        """Say that a cohort was cut with members missing, and why that may be: a trainer
        rotating several judge URLs (OpenRLHF with comma-separated --reward.remote_url values)
        sends each judge a share of every group, and every cohort is then cut."""
        size, arrived = cohort.terms.group_size, len(cohort.members)
        missing = size - arrived
        if missing <= 0:
            return
        reason: CutReason = "most_missing" if 2 * missing >= size else "some_missing"
        self.metrics.observe_cut(reason, missing)
        tenant = cohort.payload[0]
        log.warning(
            "cohort %s of tenant %s cut by its %g s timeout with %d of %d members (%d missing): "
            "judged as a group of %d. Members may be going to other judge URLs: a trainer given "
            "several comma-separated judge URLs (OpenRLHF's --reward.remote_url) rotates them "
            "per call and splits every group across judges; give each job one judge URL (a "
            "judge scales by its engine fleet, docs/scaling.md) or list the judges in each "
            "one's REFLECTRM_PEERS so each cohort has one owner. Otherwise the trainer's "
            "samples per prompt differ from group_size, or samples failed or came late.",
            cohort.group_id,
            tenant,
            cohort.terms.timeout_s,
            arrived,
            size,
            missing,
            arrived,
        )

    @staticmethod
    def _record_member(call: CallContext, result: MemberResult) -> None:
        call.note(
            mode=result.group.spec.judging.mode,
            outcome="no_verdict" if result.reward.reward is None else "verdict",
            what="cohort",
            group_id=result.group_id,
            arrived=result.arrived,
            cut=result.cut,
            cohort_wait_s=round(result.wait_s, 3),
        )
        if result.adopted:
            call.note(reused="adopted")

    # --- running judgments ------------------------------------------------------------------

    async def _cancellable(self, call: CallContext, work: Coroutine[Any, Any, T]) -> T:
        """Run a call's work; a caller that goes away has it cancelled (ClientGoneError)."""
        return await until_disconnected(work, call.is_disconnected)

    async def _judgment(
        self, judge: Judge, call: CallContext, request: JudgmentSpec, suffix: str
    ) -> Judgment:
        """One judgment, admitted: it waits for a slot and runs under the deadline."""
        work = judge.judge(request, call.engine_id + suffix)
        return await self.admission.admitted(work, self.settings.request_timeout_s, call.tenant)

    async def _orders(
        self,
        judge: Judge,
        call: CallContext,
        request: JudgmentSpec,
        two_orders: bool,
        suffix: str,
    ) -> tuple[Judgment, Judgment | None]:
        """The judgment, and with ``two_orders`` the swapped-order one beside it (concurrently)."""
        if not two_orders:
            return await self._judgment(judge, call, request, suffix), None
        first, second = await gather_all(
            [
                self._judgment(judge, call, request, suffix),
                self._judgment(judge, call, swapped(request), suffix + "-swap"),
            ]
        )
        return first, second

    # --- identical calls: joined while in flight, answered from the cache after ----------------

    @staticmethod
    def _pair_key(tenant: str, ask: PairAsk, request: JudgmentSpec) -> Hashable:
        """What makes two pair calls identical: the tenant, the content and every setting that
        changes the answer (the seed as asked: an unseeded call matches an unseeded one)."""
        return (
            "pair",
            tenant,
            request.conversation,
            request.responses,
            request.mode,
            request.num_candidates,
            request.max_tokens,
            request.ablation,
            ask.options.seed,
            ask.options.debias,
            ask.check_swap,
        )

    async def _reused_pair(
        self, judge: Judge, call: CallContext, ask: PairAsk, request: JudgmentSpec, suffix: str
    ) -> tuple[PairResult, How]:
        key = self._pair_key(call.tenant, ask, request)
        result, how = await self.reuse.run(
            key, lambda: self._pair(judge, call, ask, request, suffix)
        )
        if how != "judged":
            self.metrics.observe_reuse(how)
            envelope = self._envelope(judge, call, call.request_id + suffix)
            result = dataclasses.replace(result, ask=ask, envelope=envelope, reused=how)
        return result, how

    async def _reused_group(
        self, judge: Judge, call: CallContext, spec: GroupSpec, suffix: str
    ) -> GroupResult:
        # The spec holds the drawn seed; an unseeded group is keyed without it.
        key = (
            "group",
            call.tenant,
            dataclasses.replace(spec, seed=-1) if spec.seed_drawn else spec,
        )
        result, how = await self.reuse.run(key, lambda: self._group(judge, call, spec, suffix))
        if how != "judged":
            self.metrics.observe_reuse(how)
            call.note(reused=how)
            result = dataclasses.replace(
                result, envelope=self._envelope(judge, call, call.request_id), reused=how
            )
        return result

    async def _pair(
        self, judge: Judge, call: CallContext, ask: PairAsk, request: JudgmentSpec, suffix: str
    ) -> PairResult:
        judgment, swap = await self._orders(judge, call, request, ask.two_orders, suffix)
        answer = answer_pair(judgment, swap, ask.options.debias)
        envelope = self._envelope(judge, call, call.request_id + suffix)
        return PairResult(ask, request, judgment, swap, answer, envelope)

    async def _batch_item(
        self, judge: Judge, call: CallContext, index: int, item: PairAsk | FailedItem
    ) -> PairResult | FailedItem:
        if isinstance(item, FailedItem):
            return item
        suffix = f"-i{index}"
        try:
            request = self.limits.pair_request(item)
            result, how = await self._reused_pair(judge, call, item, request, suffix)
        except (InvalidRequestError, PromptTooLongError) as exc:
            return FailedItem(item.options.mode, exc)
        if how == "judged":
            self._offer_swap_check(judge, result)
        return result

    async def _group(
        self, judge: Judge, call: CallContext, spec: GroupSpec, suffix: str = ""
    ) -> GroupResult:
        """The group's design round by round (each round's comparisons concurrently, the next
        round paired from their results), then one reward each."""
        group = design(spec.strategy, spec.completions, spec.seed, spec.pivot)
        judged: list[Judged] = []
        while comparisons := group.next_round([(j.comparison, j.answer) for j in judged]):
            start = len(judged)
            judged += await gather_all(
                [
                    self._comparison(judge, call, spec, c, f"{suffix}-c{start + k}")
                    for k, c in enumerate(comparisons)
                ]
            )
        rewards = group.rewards([(j.comparison, j.answer) for j in judged])
        self.metrics.observe_group(
            spec.strategy,
            sum(len(j.judgments) for j in judged),
            len(spec.completions),
            len(group.duplicate_of),
        )
        for j in judged:
            if len(j.judgments) == 2:  # both orders ran: a positional-consistency sample
                self._count_swap(*j.judgments)
        return GroupResult(
            spec, group.pivot, rewards, judged, self._envelope(judge, call, call.request_id)
        )

    async def _comparison(
        self, judge: Judge, call: CallContext, spec: GroupSpec, comp: Comparison, suffix: str
    ) -> Judged:
        text_a = spec.completions[comp.a]
        text_b = spec.reference if comp.b is None else spec.completions[comp.b]
        assert text_b is not None  # strategy reference always has a reference

        def request(first: str, second: str) -> JudgmentSpec:
            return spec.judging.spec(spec.conversation, (first, second), comp.seed)

        try:
            if spec.judging.debias == "swap":
                j, s = await self._orders(judge, call, request(text_a, text_b), True, suffix)
                assert s is not None
                return Judged(comp, both_orders(j, s), (comp.a, comp.b), (j, s))
            if comp.a_first:
                j, _ = await self._orders(judge, call, request(text_a, text_b), False, suffix)
                return Judged(comp, single_order(j), (comp.a,), (j,))
            j, _ = await self._orders(judge, call, request(text_b, text_a), False, suffix)
            return Judged(comp, flipped(single_order(j)), (comp.b,), (j,))
        except PromptTooLongError as exc:
            against = "the reference" if comp.b is None else f"completion {comp.b}"
            what = f"the judging prompt of completion {comp.a} against {against}"
            raise PromptTooLongError(exc.needed, exc.limit, what) from None

    # --- accounting ---------------------------------------------------------------------------

    def _envelope(self, judge: Judge, call: CallContext, request_id: str) -> Envelope:
        return Envelope(
            request_id=request_id,
            latency_ms=call.latency_ms,
            model=judge.engine.model_name,
            template_version=judge.template.version,
        )

    @contextlib.contextmanager
    def _observed(self, call: CallContext, mode: str) -> Iterator[None]:
        """A failure is counted once, under the outcome it will be answered with."""
        try:
            yield
        except BaseException as exc:
            outcome = outcome_of(exc)
            if isinstance(exc, OverloadedError):
                self.metrics.refused(call.tenant, exc.bound)
            elif isinstance(exc, TooMuchWorkError):
                self.metrics.refused(call.tenant, "call_work")
            self.metrics.observe_request(mode, outcome)
            call.note(mode=mode, outcome=outcome)
            raise

    def _offer_swap_check(self, judge: Judge, result: PairResult) -> None:
        """A pair answered in one order may be judged again, swapped, in the background."""
        if result.swap is None and result.request.ablation == "none":  # ablations: not traffic
            self.swap_checks.offer(
                judge, result.request, result.judgment, result.envelope.request_id
            )

    def _count_swap(self, judgment: Judgment, swap: Judgment) -> None:
        self.metrics.observe_swap_check("requested", swap_result(consistent(judgment, swap)))

    def _record_pair(self, call: CallContext, result: PairResult, how: How) -> None:
        """One pair: its judgment, the swapped-order one if it ran, and the answer's outcome;
        an answer reused from an identical call adds no engine work."""
        mode, outcome = result.ask.options.mode, _counted(result.answer.outcome, result.answer.tie)
        if result.swap is not None and how == "judged":
            self._count_swap(result.judgment, result.swap)
        self.metrics.observe_request(mode, outcome, call.seconds)
        usage = result.usage
        call.note(mode=mode, outcome=outcome)
        call.note(winner=result.judgment.winner)
        if how != "judged":
            call.note(reused=how)
            return
        call.count(
            engine_requests=usage.engine_requests,
            prompt_tokens=usage.prompt_tokens,
            generated_tokens=usage.generated_tokens,
        )

    def _record_many(
        self,
        call: CallContext,
        mode: str,
        what: str,
        outcomes: Sequence[tuple[str, str]],
        generated_tokens: int,
    ) -> None:
        """Several pairs answered in one call (a batch, a group): each is counted as a pair
        judgment by (mode, outcome), the outcome an answer's or an item's error's."""
        seconds = call.seconds
        for pair_mode, outcome in outcomes:
            self.metrics.observe_request(pair_mode, outcome, seconds)
        call.note(mode=mode, pairs=len(outcomes), what=what)
        call.count(generated_tokens=generated_tokens)

    @staticmethod
    def _group_outcomes(result: GroupResult) -> list[tuple[str, str]]:
        mode = result.spec.judging.mode
        return [(mode, _counted(j.answer.outcome, j.answer.tie)) for j in result.judged]
