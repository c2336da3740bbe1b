"""Judging benchmark pairs concurrently, in-process or through a running service.

A run is a list of ``Unit``s (pair x order x mode), judged in jobs. In-process, a job is every
mode of one pair in one order: its sampled modes (vote, vote_matched, ReflectRM and its
ablations) share one seeded stage-1 request, so an all-modes run samples each pair-order once
instead of once per mode, with the same results (``Judge.run_from``). Over HTTP a job is one unit.
The shared run loop (``common.run_jobs``) keeps ``concurrency`` jobs in flight at once, so the
engine batches them; each finished judgment is appended to the results file.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any, Literal, Protocol

from reflectrm.aio import gather_all
from reflectrm.judging.judge import DrawnCandidates, Judge, PreparedJudgment, PromptTooLongError
from reflectrm.judging.modes import mode_spec
from reflectrm.judging.types import Ablation, Judgment, JudgmentSpec, Mode
from reflectrm_harness.datasets import Pair
from reflectrm_harness.evaluation.common import (
    Progress,
    RunSummary,
    ServiceRefusedError,
    Tally,
    TransientError,
    answer_error,
    conversation_fields,
    exhausted,
    run_jobs,
    service_retry_policy,
    stable_int,
)
from reflectrm_harness.evaluation.records import JudgmentResult, Key, Record, Writer

if TYPE_CHECKING:  # imported where used: judging in-process needs no HTTP client
    import httpx


# --- modes ----------------------------------------------------------------------------------

# How many candidates a row judges with: the request's n, or matched compute (2n - 1); a serving
# mode of one candidate (judging.modes) judges with one whatever this says.
Candidates = Literal["n", "matched"]


@dataclass(frozen=True)
class ModeSpec:
    """A row of the paper's tables: a judging mode, an ablation, and how many candidates."""

    name: str
    label: str
    mode: Mode
    ablation: Ablation = "none"
    candidates: Candidates = "n"

    def num_candidates(self, n: int) -> int:
        if mode_spec(self.mode).one_candidate:
            return 1
        # Matched compute: ReflectRM makes n sampled plus n-1 reflection generations.
        return 2 * n - 1 if self.candidates == "matched" else n


# The evaluation's modes by name (the serving modes, ``judging.types.MODES``, plus the
# matched-compute vote and the paper's ablations), in the tables' order.
EVAL_MODES: dict[str, ModeSpec] = {
    m.name: m
    for m in (
        # One candidate each, as the serving table says (judging.modes).
        ModeSpec("single", "Single judgment (greedy)", "single"),
        ModeSpec("margin", "Margin (verdict digit only)", "margin"),
        ModeSpec("vote", "Majority vote @N", "vote"),
        ModeSpec(
            "vote_matched", "Majority vote @2N-1 (matched compute)", "vote", candidates="matched"
        ),
        ModeSpec("reflect", "ReflectRM", "reflect"),
        ModeSpec("random_anchor", "ReflectRM, random anchor", "reflect", "random_anchor"),
        ModeSpec("random_winners", "ReflectRM, random winners", "reflect", "random_winners"),
        ModeSpec("anchor_only", "Anchor only", "reflect", "anchor_only"),
    )
}
BASELINE_MODE = "single"


def mode_label(name: str, n: int) -> str:
    spec = EVAL_MODES[name]
    return spec.label.replace("2N-1", str(2 * n - 1)).replace("@N", f"@{n}")


# --- the plan -------------------------------------------------------------------------------


def primary_position(pair: Pair, seed: int) -> int:
    """Where the chosen response goes in the pair's one seeded random order: 1 or 2."""
    return 1 + stable_int("order", seed, pair.benchmark, pair.id) % 2


@dataclass(frozen=True)
class Unit:
    pair: Pair
    mode: ModeSpec
    chosen_position: int
    primary: bool
    seed: int
    num_candidates: int
    max_tokens: int

    @property
    def key(self) -> Key:
        return Key(self.pair.benchmark, self.pair.id, self.mode.name, self.chosen_position)

    @property
    def responses(self) -> tuple[str, str]:
        return self.pair.present(self.chosen_position).responses

    @property
    def sampled(self) -> bool:
        """Starts from seeded stage-1 candidates (every mode but the greedy single judgment and
        margin mode's one digit)."""
        return self.mode.mode not in ("single", "margin")

    def request(self) -> JudgmentSpec:
        return JudgmentSpec(
            conversation=self.pair.conversation,
            responses=self.responses,
            mode=self.mode.mode,
            num_candidates=self.num_candidates,
            seed=self.seed,
            max_tokens=self.max_tokens,
            ablation=self.mode.ablation,
        )


def plan(
    pairs: Sequence[Pair],
    modes: Sequence[str],
    both_orders: bool,
    seed: int,
    num_candidates: int,
    max_tokens: int,
) -> list[Unit]:
    """Units pair by pair (both orders, every mode), so a stopped run leaves whole pairs and the
    engine's prefix cache sees the same prompt several times in a row. Every mode of a pair in
    one order gets the same judging seed: vote and ReflectRM then start from the same
    candidates, which makes their comparison paired."""
    units = []
    for pair in pairs:
        first = primary_position(pair, seed)
        positions = (first, 3 - first) if both_orders else (first,)
        for position in positions:
            judge_seed = stable_int("judge", seed, pair.benchmark, pair.id, position)
            for name in modes:
                spec = EVAL_MODES[name]
                units.append(
                    Unit(
                        pair=pair,
                        mode=spec,
                        chosen_position=position,
                        primary=position == first,
                        seed=judge_seed,
                        num_candidates=spec.num_candidates(num_candidates),
                        max_tokens=max_tokens,
                    )
                )
    return units


def jobs(units: Sequence[Unit], share_samples: bool) -> list[tuple[Unit, ...]]:
    """Units in jobs: with ``share_samples``, the units of one pair in one order (consecutive in
    a plan, and sharing one judging seed) form one job; otherwise every unit is its own."""
    if not share_samples:
        return [(u,) for u in units]
    grouped: dict[tuple[str, str, int, int, int], list[Unit]] = {}
    for u in units:
        key = (u.pair.benchmark, u.pair.id, u.chosen_position, u.seed, u.max_tokens)
        grouped.setdefault(key, []).append(u)
    return [tuple(g) for g in grouped.values()]


def refusal(unit: Unit) -> str | None:
    """Why the service refuses to judge this pair, or None. The HTTP schema requires every turn
    and both responses to be at least one character long (422 otherwise); the in-process backend
    applies the same rule, so a pair is judged, or refused, the same way by both."""
    for i, m in enumerate(unit.pair.conversation, 1):
        if not m.content:
            return f"turn {i} ({m.role}) of the conversation is empty"
    for i, r in enumerate(unit.responses, 1):
        if not r:
            return f"response {i} is empty"
    return None


def refused(unit: Unit) -> JudgmentResult | None:
    problem = refusal(unit)
    if problem is None:
        return None
    return JudgmentResult(status="error", error=f"invalid_request: {problem}")


# --- backends -------------------------------------------------------------------------------


JobResult = list[tuple[Unit, "JudgmentResult | TransientError"]]


class Backend(Protocol):
    async def judge_job(self, units: Sequence[Unit], request_id: str) -> JobResult: ...


class EngineBackend:
    """Judges in-process with the service's own ``Judge`` on an engine.

    A job's sampled units share one stage-1 request of as many candidates as the largest of
    them needs (vote_matched's 2N-1 holds vote's and ReflectRM's N as its first N); each unit
    then judges from its first ``num_candidates`` candidates. Every record is what judging that
    unit alone gives, its cost included (``DrawnCandidates.first``)."""

    def __init__(self, judge: Judge) -> None:
        self._judge = judge

    async def judge(self, unit: Unit, request_id: str) -> JudgmentResult:
        ((_, outcome),) = await self.judge_job((unit,), request_id)
        assert isinstance(outcome, JudgmentResult)  # nothing is transient in-process
        return outcome

    async def judge_job(self, units: Sequence[Unit], request_id: str) -> JobResult:
        started = time.perf_counter()
        outcomes: dict[Key, JudgmentResult] = {}
        ready: list[tuple[Unit, PreparedJudgment]] = []
        checked = await asyncio.to_thread(self._prepare, units)
        for unit, prepared in zip(units, checked, strict=True):
            if isinstance(prepared, JudgmentResult):
                outcomes[unit.key] = prepared
            else:
                ready.append((unit, prepared))
        sampled = [(u, p) for u, p in ready if u.sampled]
        drawn: DrawnCandidates | None = None
        if sampled:
            largest = max(sampled, key=lambda up: up[0].num_candidates)
            drawn = await self._judge.draw_candidates(
                largest[1], f"{request_id}-shared", largest[0].num_candidates
            )

        async def one(unit: Unit, prepared: PreparedJudgment) -> JudgmentResult:
            rid = f"{request_id}-{unit.mode.name}"
            if drawn is not None and unit.sampled:
                j = await self._judge.run_from(prepared.request, drawn, rid)
            else:
                j = await self._judge.run(prepared, rid)
            # From the job's start (shared sampling included) to this unit's own end.
            return _result_of(j, 1000 * (time.perf_counter() - started))

        judged = await gather_all([one(u, p) for u, p in ready])
        for (unit, _), outcome in zip(ready, judged, strict=True):
            outcomes[unit.key] = outcome
        return [(u, outcomes[u.key]) for u in units]

    def _prepare(self, units: Sequence[Unit]) -> list[PreparedJudgment | JudgmentResult]:
        out: list[PreparedJudgment | JudgmentResult] = []
        for unit in units:
            refusal_outcome = refused(unit)
            if refusal_outcome is not None:
                out.append(refusal_outcome)
                continue
            try:
                out.append(self._judge.prepare(unit.request()))
            except PromptTooLongError as exc:
                # Permanent for this model and max_tokens: recorded, and scored as no verdict.
                out.append(JudgmentResult(status="error", error=f"prompt_too_long: {exc}"))
        return out


def _result_of(j: Judgment, latency_ms: float) -> JudgmentResult:
    return JudgmentResult(
        status=j.outcome,
        winner=j.winner,
        scores=j.scores,
        prompt_tokens=j.usage.prompt_tokens,
        generated_tokens=j.usage.generated_tokens,
        engine_requests=j.usage.engine_requests,
        latency_ms=latency_ms,
        early_exit=j.early_exit,
        parse_failures=j.stage1_parse_failures + j.reflection_parse_failures,
        outputs=len(j.trace.candidates) + len(j.trace.reflections),
        distinct_analyses=distinct_analyses(j),
    )


def distinct_analyses(j: Judgment) -> int | None:
    """How many different analyses the candidates with a verdict wrote (None for one)."""
    if len(j.trace.candidates) < 2:
        return None
    return len({c.analysis.strip() for c in j.trace.candidates if c.verdict is not None})


JUDGE_PATH = "/v1/judge"


class HttpBackend:
    """Judges through a running service's ``POST /v1/judge`` with the Python client
    (``reflectrm.client.AsyncClient`` on the ``http`` pool); retries what a retry can fix.

    Over HTTP every unit is its own request: the API takes no precomputed candidates, so modes
    do not share them (the results are the same; the engine work is larger)."""

    def __init__(
        self, http: httpx.AsyncClient, url: str, retries: int = 5, backoff_s: float = 2.0
    ) -> None:
        from reflectrm.client import AsyncClient

        self.url = url.rstrip("/") + JUDGE_PATH  # absolute: ``http`` may have no base URL
        self.retry = service_retry_policy(retries, backoff_s)
        self.client = AsyncClient(http=http, retry=self.retry)

    @staticmethod
    def body(unit: Unit) -> dict[str, Any]:
        body = conversation_fields(unit.pair.conversation)
        body.update(
            responses=list(unit.responses),
            mode=unit.mode.mode,
            debias="none",  # a unit is one order: the evaluation judges both orders itself
            num_candidates=unit.num_candidates,
            seed=unit.seed,
            max_tokens=unit.max_tokens,
        )
        if unit.mode.ablation != "none":
            body["ablation"] = unit.mode.ablation
        return body

    async def judge_job(self, units: Sequence[Unit], request_id: str) -> JobResult:
        async def one(unit: Unit) -> JudgmentResult | TransientError:
            try:
                return await self.judge(unit, f"{request_id}-{unit.mode.name}")
            except TransientError as exc:
                return exc

        return list(zip(units, await gather_all([one(u) for u in units]), strict=True))

    async def judge(self, unit: Unit, request_id: str) -> JudgmentResult:
        import httpx

        from reflectrm.client import ReflectRMError

        refusal_outcome = refused(unit)  # the schema would answer 422: same record as in-process
        if refusal_outcome is not None:
            return refusal_outcome
        started = time.perf_counter()
        try:
            data = await self.client.post(
                self.url, self.body(unit), headers={"X-Request-ID": request_id}
            )
        except ReflectRMError as exc:
            return self._refused(unit, request_id, exc.status, exc.detail[:500])
        except httpx.TransportError as exc:
            problem = f"{type(exc).__name__}: {exc}"
            raise TransientError(exhausted(request_id, problem, self.retry)) from None
        return self._result(data, unit, 1000 * (time.perf_counter() - started))

    def _refused(self, unit: Unit, request_id: str, status: int, detail: str) -> JudgmentResult:
        """An error answer, after any retries: recorded (permanent), stopping the run (the
        service refuses what the run needs), or left for a rerun (transient)."""
        if unit.mode.ablation != "none" and status == 422 and "ablation" in detail:
            raise ServiceRefusedError(
                f"{self.url} refuses the ablation modes ({status}: {detail}); start "
                "the service with REFLECTRM_ALLOW_ABLATIONS=true, or drop those modes"
            )
        error = answer_error(status, detail, self.url, request_id, self.retry)
        return JudgmentResult(status="error", error=error)

    @staticmethod
    def _result(data: dict[str, Any], unit: Unit, measured_ms: float) -> JudgmentResult:
        usage = data.get("usage") or {}
        requests = int(usage.get("engine_requests", 0))
        # The response counts engine requests, not outputs: stage 1 is one request of n outputs.
        outputs = unit.num_candidates + max(0, requests - 1) if requests else None
        scores = data.get("scores")
        return JudgmentResult(
            status="verdict" if data.get("outcome") == "verdict" else "no_verdict",
            winner=data.get("winner"),
            scores=(float(scores[0]), float(scores[1])) if scores else None,
            prompt_tokens=int(usage.get("prompt_tokens", 0)),
            generated_tokens=int(usage.get("generated_tokens", 0)),
            engine_requests=requests,
            latency_ms=float(data.get("latency_ms", measured_ms)),
            early_exit=data.get("early_exit"),
            parse_failures=data.get("parse_failures"),
            outputs=outputs,
        )


# --- running --------------------------------------------------------------------------------


def to_record(unit: Unit, result: JudgmentResult) -> Record:
    return Record(
        **{**asdict(result), "latency_ms": round(result.latency_ms, 1)},
        benchmark=unit.pair.benchmark,
        pair_id=unit.pair.id,
        mode=unit.mode.name,
        chosen_position=unit.chosen_position,
        primary=unit.primary,
        seed=unit.seed,
        meta=dict(unit.pair.meta),
        lengths=(len(unit.pair.chosen), len(unit.pair.rejected)),
    )


async def run_units(
    units: Sequence[Unit],
    backend: Backend,
    writer: Writer,
    concurrency: int,
    progress: Progress | None = None,
    share_samples: bool = False,
) -> RunSummary:
    """Judge every unit with at most ``concurrency`` jobs in flight, appending each result as
    its job finishes. With ``share_samples`` a job is one pair in one order, all its modes."""

    async def judge(index: int, job: tuple[Unit, ...], tally: Tally) -> None:
        first = job[0]
        rid = f"eval{index}-{first.pair.benchmark}-{first.pair.id}-{first.chosen_position}"
        for unit, outcome in await backend.judge_job(job, rid):
            if isinstance(outcome, TransientError):
                tally.not_recorded(outcome)
                continue
            record = to_record(unit, outcome)
            writer.write(record.to_json())
            tally.recorded(record.status == "error", record.generated_tokens)

    return await run_jobs(jobs(units, share_samples), judge, concurrency, progress)
