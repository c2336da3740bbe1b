"""Judging groups for evaluation: the pool of pairwise judgments, or each design served.

Two ways to get a design's rewards for a group, both with the service's own code:

- **Pooled** (the default): one pool per group holds every pair of its distinct non-empty
  completions judged in both orders: exactly the judgments of strategy ``round_robin`` with
  ``debias: swap`` as the service runs it (pair (a, b), a < b, seed
  ``comparison_seed(group_seed, a, b)`` for both orders). Every design, adaptive ones included,
  only ever compares completions of the group, so each is then *scored* from the pool without new
  engine work (``pooled_rewards``): the design is driven round by round
  (``GroupDesign.next_round``) and each comparison it asks for is answered by the pool's
  judgments of that pair. With ``debias: swap`` a comparison takes both orders; with ``none`` it
  takes the one order the served design would show, drawn by the design's own coin
  (``Comparison.a_first``). What differs from serving the design: a comparison (a, b) with a > b
  (pivot, circular, knockout and swiss can ask for one) is served with the seed of (a, b), and
  pooled with the seed of (b, a): the same pair and orders, other sampling noise. Round robin is
  scored exactly as served, with swap and without. A design's engine work is what the pooled
  judgments it uses cost (each judgment's own tokens and requests, as recorded).
- **Direct** (``--direct``): every design run as the service runs it, each with its own engine
  work: through ``POST /v1/rewards``, of the service's app in this process (over ASGI) or of a
  running service (``--url``); the record is the response's body (latency and ids aside), the
  same either way.

Records are JSONL lines appended as each finishes (``records.Writer``): ``{"type": "pool"}``
per judgment of a pair in one order, ``{"type": "group"}`` per design served; a rerun judges only
what is missing.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from reflectrm.judging.debias import Debias, Debiased, average_scores, unswap_scores, winner_of
from reflectrm.judging.groups import (
    Comparison,
    CompletionReward,
    GroupDesign,
    Result,
    Strategy,
    design,
)
from reflectrm.judging.types import Mode
from reflectrm_harness.evaluation import records
from reflectrm_harness.evaluation.common import (
    Progress,
    RunSummary,
    Tally,
    TransientError,
    answer_error,
    conversation_fields,
    exhausted,
    run_jobs,
    service_retry_policy,
    stable_int,
)
from reflectrm_harness.evaluation.groups.data import Group

if TYPE_CHECKING:
    import httpx

    from reflectrm.engines.base import Engine


POOL_STRATEGY: Strategy = "round_robin"
NO_SCORES = (0.5, 0.5)
Source = Literal["pooled", "direct"]


@dataclass(frozen=True)
class GroupSettings:
    mode: Mode
    num_candidates: int
    max_tokens: int
    seed: int


def group_seed(seed: int, group: Group) -> int:
    """The group's seed (its comparisons' seeds derive from it, as in the service)."""
    return stable_int("group", seed, group.benchmark, group.id)


def strategies_for(group: Group, wanted: Sequence[Strategy]) -> list[Strategy]:
    """The designs that apply to a group: ``reference`` needs a reference answer."""
    return [s for s in wanted if s != "reference" or group.reference is not None]


# --- the pool ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class PoolUnit:
    """One judgment of the pool: completions ``a`` < ``b`` of a group, ``first`` shown first."""

    group: Group
    a: int
    b: int
    first: int
    seed: int

    @property
    def key(self) -> tuple[str, str, int, int, int]:
        return ("pool", self.group.id, self.a, self.b, self.first)

    @property
    def responses(self) -> tuple[str, str]:
        second = self.b if self.first == self.a else self.a
        return self.group.completions[self.first], self.group.completions[second]


def pool_plan(groups: Sequence[Group], seed: int) -> list[PoolUnit]:
    """Every judgment of every group's pool: round robin's comparisons, both orders."""
    units = []
    for group in groups:
        d = design(POOL_STRATEGY, group.completions, group_seed(seed, group))
        for comp in d.next_round([]):
            assert comp.b is not None
            for first in (comp.a, comp.b):
                units.append(PoolUnit(group, comp.a, comp.b, first, comp.seed))
    return units


@dataclass(frozen=True)
class PoolJudgment:
    """A pool judgment as recorded: the winner and scores as shown (1 = ``first``)."""

    status: str
    winner: int | None
    scores: tuple[float, float]
    prompt_tokens: int
    generated_tokens: int
    engine_requests: int

    @staticmethod
    def of(row: Mapping[str, Any]) -> PoolJudgment:
        verdict = row.get("status") == "verdict"
        scores = row.get("scores")
        return PoolJudgment(
            status=str(row.get("status")),
            winner=row.get("winner") if verdict else None,
            scores=(float(scores[0]), float(scores[1])) if verdict and scores else NO_SCORES,
            prompt_tokens=int(row.get("prompt_tokens", 0)),
            generated_tokens=int(row.get("generated_tokens", 0)),
            engine_requests=int(row.get("engine_requests", 0)),
        )


Pool = Mapping[tuple[int, int, int], PoolJudgment]  # (a, b, first) -> judgment, a < b


def _order(pool: Pool, a: int, b: int) -> tuple[PoolJudgment, tuple[float, float], int | None]:
    """The pool's judgment with ``a`` shown first, its scores and winner in (a, b) numbering."""
    lo, hi = min(a, b), max(a, b)
    j = pool[(lo, hi, a)]
    return j, j.scores, j.winner


@dataclass(frozen=True)
class Work:
    judgments: int = 0
    prompt_tokens: int = 0
    generated_tokens: int = 0
    engine_requests: int = 0

    def __add__(self, other: Work) -> Work:
        return Work(
            self.judgments + other.judgments,
            self.prompt_tokens + other.prompt_tokens,
            self.generated_tokens + other.generated_tokens,
            self.engine_requests + other.engine_requests,
        )

    def as_dict(self) -> dict[str, int]:
        return {
            "judgments": self.judgments,
            "prompt_tokens": self.prompt_tokens,
            "generated_tokens": self.generated_tokens,
            "engine_requests": self.engine_requests,
        }


def _work(j: PoolJudgment) -> Work:
    return Work(1, j.prompt_tokens, j.generated_tokens, j.engine_requests)


def pooled_answer(
    comp: Comparison, pool: Pool, debias: Debias, canon: Mapping[int, int] | None = None
) -> tuple[Debiased, Work]:
    """A design's comparison answered from the pool, as the service would answer it from these
    judgments (``debias.both_orders`` / ``single_order``, in (a, b) numbering). ``canon`` maps a
    completion to the one standing for its text in the pool (a pivot may be a later duplicate)."""
    assert comp.b is not None  # the pool holds completion-against-completion pairs
    canon = canon or {}
    a, b = canon.get(comp.a, comp.a), canon.get(comp.b, comp.b)
    ja, sa, wa = _order(pool, a, b)  # a shown first
    jb, sb_shown, wb_shown = _order(pool, b, a)  # b shown first: numbering (b, a)
    sb = unswap_scores(sb_shown)
    wb = None if wb_shown is None else 3 - wb_shown
    if debias == "swap":
        scores = average_scores(sa, sb_shown)
        verdicts = int(wa is not None) + int(wb is not None)
        answer = Debiased(
            scores=scores,
            winner=winner_of(scores) if verdicts else None,
            verdicts=verdicts,
            order_winners=(wa, wb),
            order_scores=(sa, sb),
            consistent=None if wa is None or wb is None else wa == wb,
        )
        return answer, _work(ja) + _work(jb)
    if comp.a_first:
        scores, winner, used = sa, wa, ja
    else:
        scores, winner, used = sb, wb, jb
    single = Debiased(scores, winner, int(winner is not None), (winner,), (scores,), None)
    return single, _work(used)


@dataclass(frozen=True)
class DesignOutcome:
    rewards: list[CompletionReward]
    work: Work
    rounds: int
    comparisons: int


def pooled_rewards(
    group: Group, strategy: Strategy, debias: Debias, pool: Pool, seed: int
) -> DesignOutcome:
    """A design's rewards for a group, driven round by round with the pool's judgments."""
    d: GroupDesign = design(strategy, group.completions, group_seed(seed, group))
    canon = design(POOL_STRATEGY, group.completions, group_seed(seed, group)).duplicate_of
    judged: list[Result] = []
    work = Work()
    while comparisons := d.next_round(judged):
        for comp in comparisons:
            answer, cost = pooled_answer(comp, pool, debias, canon)
            judged.append((comp, answer))
            work = work + cost
    rounds = max((c.round for c, _ in judged), default=0)
    return DesignOutcome(d.rewards(judged), work, rounds, len(judged))


# --- the direct path ---------------------------------------------------------------------------


@dataclass(frozen=True)
class DesignUnit:
    group: Group
    strategy: Strategy
    debias: Debias

    @property
    def key(self) -> tuple[str, str, str, str]:
        return ("group", self.group.id, self.strategy, self.debias)


def design_plan(
    groups: Sequence[Group], strategies: Sequence[Strategy], debiases: Sequence[Debias]
) -> list[DesignUnit]:
    return [
        DesignUnit(g, s, d) for g in groups for s in strategies_for(g, strategies) for d in debiases
    ]


def rewards_body(unit: DesignUnit, settings: GroupSettings) -> dict[str, Any]:
    """The ``POST /v1/rewards`` body of a design unit (what the in-process path asks too)."""
    g = unit.group
    body = {
        **conversation_fields(g.conversation),
        "completions": list(g.completions),
        "strategy": unit.strategy,
        "mode": settings.mode,
        "debias": unit.debias,
        "num_candidates": settings.num_candidates,
        "max_tokens": settings.max_tokens,
        "seed": group_seed(settings.seed, g),
    }
    if unit.strategy == "reference":
        body["reference"] = g.reference
    return body


def judge_body(unit: PoolUnit, settings: GroupSettings) -> dict[str, Any]:
    """The ``POST /v1/judge`` body of a pool judgment."""
    return {
        **conversation_fields(unit.group.conversation),
        "responses": list(unit.responses),
        "mode": settings.mode,
        "debias": "none",  # a pool judgment is one order; the pool holds both
        "num_candidates": settings.num_candidates,
        "max_tokens": settings.max_tokens,
        "seed": unit.seed,
    }


# What of a /v1/rewards response a record keeps: everything but the call's own identity.
DROPPED = ("latency_ms", "request_id", "model", "template_version")


def group_row(unit: DesignUnit, body: Mapping[str, Any], latency_ms: float) -> dict[str, Any]:
    kept = {k: v for k, v in body.items() if k not in DROPPED}
    return {
        "type": "group",
        "benchmark": unit.group.benchmark,
        "group_id": unit.group.id,
        "strategy": unit.strategy,
        "debias": unit.debias,
        "status": "ok",
        "latency_ms": round(latency_ms, 1),
        "response": kept,
    }


def pool_row(unit: PoolUnit, body: Mapping[str, Any], latency_ms: float) -> dict[str, Any]:
    """A pool record from a ``/v1/judge`` response body (or the same built in-process)."""
    usage = body.get("usage") or {}
    return {
        "type": "pool",
        "benchmark": unit.group.benchmark,
        "group_id": unit.group.id,
        "a": unit.a,
        "b": unit.b,
        "first": unit.first,
        "seed": unit.seed,
        "status": body.get("outcome", "error"),
        "winner": body.get("winner"),
        "scores": body.get("scores"),
        "prompt_tokens": int(usage.get("prompt_tokens", 0)),
        "generated_tokens": int(usage.get("generated_tokens", 0)),
        "engine_requests": int(usage.get("engine_requests", 0)),
        "latency_ms": round(latency_ms, 1),
    }


def error_row(unit: PoolUnit | DesignUnit, error: str) -> dict[str, Any]:
    """A permanent failure (a prompt too long for the model): recorded, scored as no verdict."""
    if isinstance(unit, PoolUnit):
        row = pool_row(unit, {}, 0.0)
    else:
        row = {
            "type": "group",
            "benchmark": unit.group.benchmark,
            "group_id": unit.group.id,
            "strategy": unit.strategy,
            "debias": unit.debias,
            "latency_ms": 0.0,
            "response": None,
        }
    return {**row, "status": "error", "error": error[:500]}


# The base URL of the service's app called in this process (over ASGI, no socket).
IN_PROCESS = "http://in-process"


@contextlib.asynccontextmanager
async def in_process_groups(settings: Any, engine: Engine) -> AsyncIterator[HttpGroups]:
    """The service's own app on ``engine`` in this process, called as a client calls it over
    HTTP (``POST /v1/judge`` for the pool, ``POST /v1/rewards`` for a design), through
    ``httpx.ASGITransport``: the same answers as ``--url``, from the same code."""
    import httpx

    from reflectrm.app import create_app

    # Nothing listens on a port: no API keys; no background swap checks adding engine work.
    local = settings.model_copy(
        update={"api_keys": None, "api_key_file": None, "swap_check_fraction": 0.0}
    )
    app = create_app(local, engine=engine)
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, timeout=None) as client:
            yield HttpGroups(client, IN_PROCESS)


class HttpGroups:
    """The same over a running service: ``POST /v1/judge`` and ``POST /v1/rewards`` with the
    Python client, retrying what a retry can fix (the pairwise harness's policy)."""

    def __init__(self, http: httpx.AsyncClient, url: str, retries: int = 5) -> None:
        from reflectrm.client import AsyncClient

        self.url = url.rstrip("/")
        self.retry = service_retry_policy(retries)
        self.client = AsyncClient(http=http, retry=self.retry)

    async def _post(
        self, unit: PoolUnit | DesignUnit, path: str, body: dict[str, Any], rid: str
    ) -> tuple[dict[str, Any] | None, dict[str, Any] | None, float]:
        import httpx

        from reflectrm.client import ReflectRMError

        started = time.perf_counter()
        try:
            data = await self.client.post(self.url + path, body, headers={"X-Request-ID": rid})
        except ReflectRMError as exc:
            error = answer_error(exc.status, exc.detail, path, rid, self.retry)
            return None, error_row(unit, error), 0.0
        except httpx.TransportError as exc:
            problem = f"{type(exc).__name__}: {exc}"
            raise TransientError(exhausted(rid, problem, self.retry)) from None
        return data, None, 1000 * (time.perf_counter() - started)

    async def pool(self, unit: PoolUnit, settings: GroupSettings, rid: str) -> dict[str, Any]:
        data, error, ms = await self._post(unit, "/v1/judge", judge_body(unit, settings), rid)
        return error if data is None else pool_row(unit, data, ms)  # type: ignore[return-value]

    async def group(self, unit: DesignUnit, settings: GroupSettings, rid: str) -> dict[str, Any]:
        data, error, ms = await self._post(unit, "/v1/rewards", rewards_body(unit, settings), rid)
        return error if data is None else group_row(unit, data, ms)  # type: ignore[return-value]


# --- running and resuming -------------------------------------------------------------------


def load_rows(path: Path) -> tuple[list[dict[str, Any]], dict[tuple[Any, ...], dict[str, Any]]]:
    """The run headers and the last record of each key; a line cut by a kill is skipped."""
    runs: list[dict[str, Any]] = []
    latest: dict[tuple[Any, ...], dict[str, Any]] = {}
    for row in records.rows(path):
        kind = row.get("type")
        if kind in ("run", "run_end"):
            runs.append(row)
        elif kind in ("pool", "group"):
            latest[row_key(row)] = row
    return runs, latest


def row_key(row: Mapping[str, Any]) -> tuple[Any, ...]:
    if row["type"] == "pool":
        return ("pool", row["group_id"], row["a"], row["b"], row["first"])
    return ("group", row["group_id"], row["strategy"], row["debias"])


Unit = PoolUnit | DesignUnit


async def run_group_units(
    units: Sequence[Unit],
    backend: HttpGroups,
    settings: GroupSettings,
    write: Callable[[dict[str, Any]], object],
    concurrency: int,
    progress: Progress | None = None,
) -> RunSummary:
    """Each unit (a pool judgment, or a design served) with at most ``concurrency`` in flight,
    its record written as it finishes."""

    async def judge(index: int, unit: Unit, tally: Tally) -> None:
        rid = "geval{}-{}".format(index, "-".join(map(str, unit.key)))
        try:
            if isinstance(unit, PoolUnit):
                row = await backend.pool(unit, settings, rid)
            else:
                row = await backend.group(unit, settings, rid)
        except TransientError as exc:
            tally.not_recorded(exc)
            return
        write(row)
        tally.recorded(row.get("status") == "error", generated_tokens(row))

    return await run_jobs(units, judge, concurrency, progress)


def generated_tokens(row: Mapping[str, Any]) -> int:
    """What a record's judgments generated (a pool row's own, a served design's usage)."""
    usage = (row.get("response") or {}).get("usage") or {}
    return int(row.get("generated_tokens") or usage.get("generated_tokens") or 0)
