"""What both evaluation workloads (pairwise benchmarks and group designs) run on.

The user's errors and how the command ends on them, the messages it prints, the library logs it
keeps quiet, the service it asks over ``--url`` (its model, the retry policy, what an error answer
means), the engine it opens in-process with the work counted, seeds that do not depend on the
process, and the run loop: jobs from one queue, ``concurrency`` of them in flight, each record
written as it finishes, a progress bar, and the ``run`` and ``run_end`` rows of a results file.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import hashlib
import logging
import math
import os
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import PurePath
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from reflectrm.engines import EngineConfig, open_engine, resolve
from reflectrm.engines.base import Engine, GenerationResult, MeteredEngine
from reflectrm.judging.judge import Judge
from reflectrm_harness.datasets import DatasetError
from reflectrm_harness.evaluation.records import ResultsMismatchError

if TYPE_CHECKING:  # imported where used: judging in-process needs no HTTP client
    import httpx

    from reflectrm.judging.types import Message
    from reflectrm.retry import RetryPolicy

log = logging.getLogger(__name__)


# --- errors and messages --------------------------------------------------------------------


class UsageError(ValueError):
    """Options that cannot work together; the message says which."""


class ServiceRefusedError(RuntimeError):
    """The service refuses what the whole run needs (e.g. ablations it was not started to
    allow, or an answer no retry fixes): the run stops, keeping what is already recorded."""


class TransientError(RuntimeError):
    """The judgment may succeed if retried later: it is not recorded, so a rerun redoes it."""


# What the command answers with its usage line and status 2 instead of a traceback.
USER_ERRORS = (DatasetError, UsageError, ResultsMismatchError, ServiceRefusedError)


def say(*parts: object, file: Any = None) -> None:
    """A line for the user (stderr unless told): what the command prints is its output."""
    (file or sys.stderr).write(" ".join(map(str, parts)) + "\n")


def run_workload(
    score_only: bool,
    judge: Callable[[], object],
    report: Callable[[], int],
    interrupted: Callable[[], str],
    errors: tuple[type[Exception], ...] = USER_ERRORS,
) -> int:
    """A workload's command: judge what is missing (unless ``score_only``), then write the
    report. Interrupted, it says how to resume (130); the user's ``errors`` end it with 2."""
    try:
        if not score_only:
            try:
                judge()
            except KeyboardInterrupt:
                say(interrupted())
                return 130
        return report()
    except errors as exc:
        say(f"reflectrm eval: {exc}")
        return 2


def configure_logging() -> None:
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )


def quiet_libraries(verbose: bool) -> None:
    """Unless ``verbose``, only reflectrm's and the harness's own informational lines: other
    libraries (httpx logs every request at INFO, vLLM its engine statistics) show warnings and
    errors only."""
    if verbose:
        return
    root = logging.getLogger()
    if root.getEffectiveLevel() < logging.WARNING:
        for own in ("reflectrm", "reflectrm_harness"):
            logging.getLogger(own).setLevel(root.getEffectiveLevel())
        root.setLevel(logging.WARNING)
    # vLLM configures its own logger when imported (the engine's processes inherit this).
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")


# --- seeds ----------------------------------------------------------------------------------


def stable_int(*parts: object) -> int:
    """A 31-bit integer from the parts, the same on every machine and Python version."""
    digest = hashlib.sha256(":".join(str(p) for p in parts).encode()).digest()
    return int.from_bytes(digest[:4], "big") & 0x7FFFFFFF


# --- a running service ----------------------------------------------------------------------

# Status codes of the judging routes that will not change on a retry: recorded as errors.
PERMANENT_STATUS = (400, 413, 422)
# Status codes that may: retried, and when the retries run out, left for a rerun.
TRANSIENT_STATUSES = frozenset({429, 499, 500, 502, 503, 504})


def service_retry_policy(retries: int = 5, backoff_s: float = 2.0) -> RetryPolicy:
    """``retries`` more attempts after a ``TRANSIENT_STATUSES`` answer or any transport error
    (read timeouts included), waiting ``backoff_s`` doubled per retry (no jitter, no cap), or
    the service's Retry-After when that is longer."""
    import httpx

    from reflectrm.retry import RetryPolicy

    return RetryPolicy(
        max_retries=retries,
        backoff_s=backoff_s,
        max_backoff_s=math.inf,
        jitter=0.0,
        statuses=TRANSIENT_STATUSES,
        errors=(httpx.TransportError,),
    )


def exhausted(request_id: str, problem: str, retry: RetryPolicy) -> str:
    return f"{request_id}: {problem} (after {retry.attempts} attempts)"


def answer_error(status: int, detail: str, where: str, request_id: str, retry: RetryPolicy) -> str:
    """What an error answer of ``POST where`` means, after any retries: the error to record
    when no retry changes it (``PERMANENT_STATUS``); ``ServiceRefusedError`` (the run stops)
    for a status that is never retried; ``TransientError`` (left for a rerun) otherwise."""
    if status in PERMANENT_STATUS:
        return f"http_{status}: {detail}"
    if status not in retry.statuses:
        raise ServiceRefusedError(f"POST {where} answered {status}: {detail}")
    raise TransientError(exhausted(request_id, f"http_{status}: {detail}", retry))


def http_client(timeout: float, concurrency: int) -> httpx.AsyncClient:
    """The HTTP pool of a ``--url`` run: ``timeout`` seconds per answer, a connection per job in
    flight and two to spare."""
    import httpx

    return httpx.AsyncClient(
        timeout=httpx.Timeout(timeout, connect=10.0),
        limits=httpx.Limits(max_connections=concurrency + 2),
    )


async def served_model(client: Any, url: str) -> Any:
    """The model a running service at ``url`` serves (its GET /ready); UsageError when it cannot
    be reached or is not ready."""
    import httpx

    try:
        ready = await client.get(url.rstrip("/") + "/ready")
    except httpx.TransportError as exc:
        raise UsageError(f"cannot reach {url} ({type(exc).__name__}: {exc})") from None
    if ready.status_code != 200:
        raise UsageError(f"{url}/ready answered {ready.status_code}: {ready.text[:300]}")
    return ready.json().get("model")


def conversation_fields(conversation: Sequence[Message]) -> dict[str, Any]:
    """A conversation as a request body gives it: ``prompt`` for one user turn, else
    ``messages``."""
    if len(conversation) == 1 and conversation[0].role == "user":
        return {"prompt": conversation[0].content}
    return {"messages": [{"role": m.role, "content": m.content} for m in conversation]}


# --- an engine in-process -------------------------------------------------------------------


class EngineWork:
    """What was asked of the engine, counted as it ran (shared candidates counted once)."""

    def __init__(self) -> None:
        self.requests = 0
        self.prompt_tokens = 0
        self.generated_tokens = 0

    def count(self, request_id: str, result: GenerationResult) -> None:
        self.requests += 1
        self.prompt_tokens += result.prompt_tokens
        self.generated_tokens += result.generated_tokens

    def as_dict(self) -> dict[str, int]:
        return {
            "engine_requests": self.requests,
            "prompt_tokens": self.prompt_tokens,
            "generated_tokens": self.generated_tokens,
        }


class CountingEngine(MeteredEngine):
    """An Engine that counts every request it completes into an ``EngineWork``."""

    def __init__(self, inner: Engine, work: EngineWork) -> None:
        super().__init__(inner, work.count)
        self.work = work


def engine_config(settings: Any) -> EngineConfig:
    """The settings' engine, resolved once (before judging, and for the run's header)."""
    return resolve(settings.engine_config())


def engine_fingerprint(
    settings: Any, engine: EngineConfig, model_path: bool = True
) -> dict[str, Any]:
    """What an in-process run's header says of its judge."""
    path = engine.model
    out: dict[str, Any] = {
        "backend": "in-process",
        "model": settings.served_model_name or PurePath(path).name or path,
    }
    if model_path:
        out["model_path"] = path
    out.update(
        template_version=settings.template_version,
        temperature=settings.temperature,
        enforce_format=settings.enforce_format,
        early_exit=settings.early_exit,
    )
    return out


@contextlib.asynccontextmanager
async def counted_judge(
    engine: EngineConfig, settings: Any
) -> AsyncIterator[tuple[Judge, EngineWork]]:
    """The service's ``Judge`` on an engine of its own, every engine request counted."""
    async with open_engine(engine) as opened:
        work = EngineWork()
        yield Judge(CountingEngine(opened, work), settings.judge_config()), work


# --- the run --------------------------------------------------------------------------------


def now() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="seconds")


def run_header(args: Any, **fields: Any) -> dict[str, Any]:
    """The ``run`` row an invocation starts its records with: when, the command line, and what
    it asks (``fields``)."""
    return {
        "type": "run",
        "started": now(),
        "argv": getattr(args, "argv", None) or sys.argv[1:],
        **fields,
    }


def run_end(counts: Mapping[str, Any], work: EngineWork | None = None) -> dict[str, Any]:
    """The ``run_end`` row an invocation closes its records with: ``counts``, and, in-process,
    what the engine was really asked for (the records' costs are each judgment's own)."""
    row: dict[str, Any] = {"type": "run_end", "finished": now(), **counts}
    if work is not None:
        row["engine_work"] = work.as_dict()
    return row


class Keyed(Protocol):
    @property
    def key(self) -> Any: ...


K = TypeVar("K", bound=Keyed)
J = TypeVar("J")


def pending(units: Iterable[K], done: Iterable[Any]) -> list[K]:
    """The units whose key has no record yet."""
    finished = set(done)
    return [u for u in units if u.key not in finished]


class Progress:
    """A tqdm bar with records/s, ETA and generated tokens/s; silent when disabled."""

    def __init__(self, total: int, enabled: bool, unit: str = "judgment") -> None:
        from tqdm import tqdm

        tty = sys.stderr.isatty()
        self.bar = tqdm(
            total=total,
            unit=unit,
            disable=not enabled,
            dynamic_ncols=True,
            mininterval=0.5 if tty else 30.0,
            smoothing=0.05,
        )
        self.started = time.monotonic()
        self.tokens = 0
        self.errors = 0

    def update(self, generated_tokens: int = 0, error: bool = False) -> None:
        self.tokens += generated_tokens
        self.errors += error
        elapsed = max(1e-6, time.monotonic() - self.started)
        rate = f"{self.tokens / elapsed:.0f}"
        self.bar.set_postfix(gen_tok_s=rate, errors=self.errors, refresh=False)
        self.bar.update(1)

    def close(self) -> None:
        self.bar.close()


@dataclass(frozen=True)
class RunSummary:
    recorded: int
    errors: int  # recorded permanent failures (e.g. a prompt too long for the model)
    retry_later: int  # transient failures, not recorded: a rerun judges them again
    seconds: float
    generated_tokens: int = 0

    @property
    def judged(self) -> int:
        """The pairwise word for ``recorded``: there, each record is one judgment."""
        return self.recorded


class Tally:
    """What a run recorded, as it goes; the progress bar follows it."""

    def __init__(self, progress: Progress | None = None) -> None:
        self.progress = progress
        self.started = time.monotonic()
        self.count = self.errors = self.retry_later = self.tokens = 0

    def recorded(self, error: bool, generated_tokens: int) -> None:
        self.count += 1
        self.errors += error
        self.tokens += generated_tokens
        if self.progress is not None:
            self.progress.update(generated_tokens, error)

    def not_recorded(self, problem: object) -> None:
        self.retry_later += 1
        log.warning("not recorded, a rerun will retry it: %s", problem)

    def summary(self) -> RunSummary:
        return RunSummary(
            recorded=self.count,
            errors=self.errors,
            retry_later=self.retry_later,
            seconds=time.monotonic() - self.started,
            generated_tokens=self.tokens,
        )


async def run_jobs(
    jobs: Sequence[J],
    judge: Callable[[int, J, Tally], Awaitable[None]],
    concurrency: int,
    progress: Progress | None = None,
) -> RunSummary:
    """Every job, with at most ``concurrency`` in flight (workers taking them from one queue, so
    the engine batches them): ``judge(worker, job, tally)`` writes the job's records as they
    finish and counts them. The first failure stops the run and is raised as itself (e.g.
    ``ServiceRefusedError``); what is recorded stays."""
    queue: asyncio.Queue[J] = asyncio.Queue()
    for job in jobs:
        queue.put_nowait(job)
    tally = Tally(progress)

    async def worker(index: int) -> None:
        while True:
            try:
                job = queue.get_nowait()
            except asyncio.QueueEmpty:
                return
            await judge(index, job, tally)

    try:
        async with asyncio.TaskGroup() as group:
            for i in range(max(1, concurrency)):
                group.create_task(worker(i))
    except BaseExceptionGroup as failed:
        raise failed.exceptions[0] from None
    finally:
        if progress is not None:
            with contextlib.suppress(Exception):
                progress.close()
    return tally.summary()
