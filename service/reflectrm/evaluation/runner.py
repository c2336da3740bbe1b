"""Judging benchmark pairs concurrently, in-process or through a running service.

A run is a list of ``Unit``s (pair x order x mode). Workers take units from a queue, so
``concurrency`` judgments are in flight at once and the engine batches them; each finished
judgment is appended to the results file before the next is taken.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import sys
import time
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from typing import Any, Literal, Protocol

from reflectrm.evaluation.records import Key, Outcome, Record, Writer
from reflectrm.judging.judge import Judge, PromptTooLongError
from reflectrm.judging.types import Ablation, JudgeRequest, Mode
from reflectrm.pairs import Pair

log = logging.getLogger(__name__)

# --- modes ----------------------------------------------------------------------------------

Candidates = Literal["one", "n", "matched"]


@dataclass(frozen=True)
class ModeSpec:
    """A row of the paper's tables: a judging mode, an ablation, and how many samples."""

    name: str
    label: str
    mode: Mode
    ablation: Ablation = "none"
    candidates: Candidates = "n"

    def num_candidates(self, n: int) -> int:
        if self.candidates == "one":
            return 1
        # Matched compute: ReflectRM makes n sampled plus n-1 reflection generations.
        return 2 * n - 1 if self.candidates == "matched" else n


MODES: dict[str, ModeSpec] = {
    m.name: m
    for m in (
        ModeSpec("single", "Single judgment (greedy)", "single", candidates="one"),
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
    spec = MODES[name]
    return spec.label.replace("2N-1", str(2 * n - 1)).replace("@N", f"@{n}")


# --- the plan -------------------------------------------------------------------------------


def stable_int(*parts: object) -> int:
    """A 31-bit integer from the parts, the same on every machine and Python version."""
    digest = hashlib.sha256(":".join(str(p) for p in parts).encode()).digest()
    return int.from_bytes(digest[:4], "big") & 0x7FFFFFFF


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
    one order gets the same judging seed: vote and ReflectRM then start from the same samples,
    which makes their comparison paired."""
    units = []
    for pair in pairs:
        first = primary_position(pair, seed)
        positions = (first, 3 - first) if both_orders else (first,)
        for position in positions:
            judge_seed = stable_int("judge", seed, pair.benchmark, pair.id, position)
            for name in modes:
                spec = MODES[name]
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


def pending(units: Iterable[Unit], done: Iterable[Key]) -> list[Unit]:
    finished = set(done)
    return [u for u in units if u.key not in finished]


# --- backends -------------------------------------------------------------------------------


class TransientError(RuntimeError):
    """The judgment may succeed if retried later: it is not recorded, so a rerun redoes it."""


class Backend(Protocol):
    async def judge(self, unit: Unit, request_id: str) -> Outcome: ...


class EngineBackend:
    """Judges in-process with the service's own ``Judge`` on an engine."""

    def __init__(self, judge: Judge) -> None:
        self._judge = judge

    async def judge(self, unit: Unit, request_id: str) -> Outcome:
        request = JudgeRequest(
            conversation=unit.pair.conversation,
            responses=unit.responses,
            mode=unit.mode.mode,
            num_candidates=unit.num_candidates,
            seed=unit.seed,
            max_tokens=unit.max_tokens,
            ablation=unit.mode.ablation,
        )
        started = time.perf_counter()
        try:
            j = await self._judge.judge(request, request_id)
        except PromptTooLongError as exc:
            # Permanent for this model and max_tokens: recorded, and scored as no verdict.
            return Outcome(status="error", error=f"prompt_too_long: {exc}")
        return Outcome(
            status=j.outcome,
            winner=j.winner,
            prompt_tokens=j.usage.prompt_tokens,
            generated_tokens=j.usage.generated_tokens,
            engine_requests=j.usage.engine_requests,
            latency_ms=1000 * (time.perf_counter() - started),
            early_exit=j.early_exit,
            parse_failures=j.stage1_parse_failures + j.reflection_parse_failures,
            outputs=len(j.trace.candidates) + len(j.trace.reflections),
        )


# Status codes of POST /v1/judge that will not change on a retry.
PERMANENT_STATUS = (400, 413, 422)
RETRY_STATUS = (429, 499, 500, 502, 503, 504)


class HttpBackend:
    """Judges through a running service's ``POST /v1/judge``; retries what a retry can fix."""

    def __init__(self, client: Any, url: str, retries: int = 5, backoff_s: float = 2.0) -> None:
        self.client = client
        self.url = url.rstrip("/") + "/v1/judge"
        self.retries = retries
        self.backoff_s = backoff_s

    @staticmethod
    def body(unit: Unit) -> dict[str, Any]:
        conv = unit.pair.conversation
        body: dict[str, Any] = (
            {"prompt": conv[0].content}
            if len(conv) == 1 and conv[0].role == "user"
            else {"messages": [{"role": m.role, "content": m.content} for m in conv]}
        )
        body.update(
            responses=list(unit.responses),
            mode=unit.mode.mode,
            num_candidates=unit.num_candidates,
            seed=unit.seed,
            max_tokens=unit.max_tokens,
        )
        if unit.mode.ablation != "none":
            body["ablation"] = unit.mode.ablation
        return body

    async def judge(self, unit: Unit, request_id: str) -> Outcome:
        import httpx

        body = self.body(unit)
        problem = ""
        for attempt in range(self.retries + 1):
            if attempt:
                await asyncio.sleep(self.backoff_s * 2 ** (attempt - 1))
            started = time.perf_counter()
            try:
                headers = {"X-Request-ID": request_id}
                r = await self.client.post(self.url, json=body, headers=headers)
            except httpx.TransportError as exc:
                problem = f"{type(exc).__name__}: {exc}"
                continue
            if r.status_code == 200:
                return self._outcome(r.json(), unit, 1000 * (time.perf_counter() - started))
            detail = _detail(r)
            if r.status_code in PERMANENT_STATUS:
                return Outcome(status="error", error=f"http_{r.status_code}: {detail}")
            if r.status_code not in RETRY_STATUS:
                raise RuntimeError(f"POST {self.url} answered {r.status_code}: {detail}")
            problem = f"http_{r.status_code}: {detail}"
            retry_after = r.headers.get("Retry-After", "")
            if retry_after.isdigit():
                await asyncio.sleep(float(retry_after))
        raise TransientError(f"{request_id}: {problem} (after {self.retries + 1} attempts)")

    @staticmethod
    def _outcome(data: dict[str, Any], unit: Unit, measured_ms: float) -> Outcome:
        usage = data.get("usage") or {}
        requests = int(usage.get("engine_requests", 0))
        # The response counts engine requests, not outputs: stage 1 is one request of n outputs.
        outputs = unit.num_candidates + max(0, requests - 1) if requests else None
        return Outcome(
            status="verdict" if data.get("outcome") == "verdict" else "no_verdict",
            winner=data.get("winner"),
            prompt_tokens=int(usage.get("prompt_tokens", 0)),
            generated_tokens=int(usage.get("generated_tokens", 0)),
            engine_requests=requests,
            latency_ms=float(data.get("latency_ms", measured_ms)),
            early_exit=data.get("early_exit"),
            parse_failures=data.get("parse_failures"),
            outputs=outputs,
        )


def _detail(r: Any) -> str:
    try:
        return str(r.json().get("detail", r.text))[:500]
    except ValueError:
        return str(r.text)[:500]


# --- running --------------------------------------------------------------------------------


def to_record(unit: Unit, outcome: Outcome) -> Record:
    return Record(
        **{**asdict(outcome), "latency_ms": round(outcome.latency_ms, 1)},
        benchmark=unit.pair.benchmark,
        pair_id=unit.pair.id,
        mode=unit.mode.name,
        chosen_position=unit.chosen_position,
        primary=unit.primary,
        seed=unit.seed,
        meta=dict(unit.pair.meta),
    )


@dataclass(frozen=True)
class RunSummary:
    judged: int
    errors: int  # recorded permanent failures (e.g. a prompt too long for the model)
    retry_later: int  # transient failures, not recorded: a rerun judges them again
    seconds: float
    generated_tokens: int


class Progress:
    """A tqdm bar with judgments/s, ETA and generated tokens/s; silent when disabled."""

    def __init__(self, total: int, enabled: bool) -> None:
        from tqdm import tqdm

        tty = sys.stderr.isatty()
        self.bar = tqdm(
            total=total,
            unit="judgment",
            disable=not enabled,
            dynamic_ncols=True,
            mininterval=0.5 if tty else 30.0,
            smoothing=0.05,
        )
        self.started = time.monotonic()
        self.tokens = 0
        self.errors = 0

    def update(self, record: Record) -> None:
        self.tokens += record.generated_tokens
        self.errors += record.status == "error"
        elapsed = max(1e-6, time.monotonic() - self.started)
        rate = f"{self.tokens / elapsed:.0f}"
        self.bar.set_postfix(gen_tok_s=rate, errors=self.errors, refresh=False)
        self.bar.update(1)

    def close(self) -> None:
        self.bar.close()


async def run_units(
    units: Sequence[Unit],
    backend: Backend,
    writer: Writer,
    concurrency: int,
    progress: Progress | None = None,
) -> RunSummary:
    """Judge every unit with at most ``concurrency`` in flight, appending each result."""
    queue: asyncio.Queue[Unit] = asyncio.Queue()
    for unit in units:
        queue.put_nowait(unit)
    started = time.monotonic()
    counts = {"judged": 0, "errors": 0, "retry": 0, "tokens": 0}

    async def worker(index: int) -> None:
        while True:
            try:
                unit = queue.get_nowait()
            except asyncio.QueueEmpty:
                return
            k = unit.key
            rid = f"eval{index}-{k.benchmark}-{k.pair_id}-{k.mode}-{k.chosen_position}"
            try:
                outcome = await backend.judge(unit, rid)
            except TransientError as exc:
                counts["retry"] += 1
                log.warning("not recorded, a rerun will retry it: %s", exc)
                continue
            record = to_record(unit, outcome)
            writer.write(record.to_json())
            counts["judged"] += 1
            counts["errors"] += record.status == "error"
            counts["tokens"] += record.generated_tokens
            if progress is not None:
                progress.update(record)

    try:
        async with asyncio.TaskGroup() as group:
            for i in range(max(1, concurrency)):
                group.create_task(worker(i))
    finally:
        if progress is not None:
            with contextlib.suppress(Exception):
                progress.close()
    return RunSummary(
        judged=counts["judged"],
        errors=counts["errors"],
        retry_later=counts["retry"],
        seconds=time.monotonic() - started,
        generated_tokens=counts["tokens"],
    )
