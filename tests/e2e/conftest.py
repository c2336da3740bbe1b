"""One real vLLM engine (CPU build, default model) and one live HTTP server per test session.

The engine runs on its own event loop in a background thread, behind a real uvicorn server on a
free loopback port. Fixtures:

- ``live``: the running service (``live.url``, ``live.settings``, ``live.run(coro)``).
- ``engine``: the same engine, usable from any event loop (e.g. inside ``asyncio.run``): its
  calls are forwarded to the engine's own loop.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import os
import threading
from collections.abc import Coroutine, Iterator, Sequence
from typing import Any, TypeVar

import httpx
import pytest
import uvicorn

from loadtests.common.ports import free_port
from reflectrm.app import create_app
from reflectrm.engines import open_engine
from reflectrm.engines.base import Engine, GenerationResult, Prompt, SamplingSpec
from reflectrm.settings import Settings

T = TypeVar("T")

# The judge these tests serve: the SmolLM2-135M judge (artifacts/smollm2), the smallest shipped,
# so that the suite's many real judgments stay fast. Every service started here, in process or
# as a child process, reads it (``e2e_model``); the default judge has its own test
# (test_default_judge_e2e).
E2E_MODEL = "smollm2"


@pytest.fixture(scope="package", autouse=True)
def e2e_model() -> Iterator[None]:
    """REFLECTRM_MODEL for this folder's tests and the processes they start, and only them."""
    before = os.environ.get("REFLECTRM_MODEL")
    os.environ["REFLECTRM_MODEL"] = E2E_MODEL
    yield
    if before is None:
        os.environ.pop("REFLECTRM_MODEL", None)
    else:
        os.environ["REFLECTRM_MODEL"] = before


# Short generations keep the suite fast; the analysis bound follows from max_tokens.
E2E_MAX_TOKENS = 48
# float32 on every machine: tests here compare judgments made by two paths (in process and over
# HTTP, in-process and a `vllm serve` replica) exactly, and in bf16 a log-prob or a greedy token
# can differ with the prefix cache's state and the batch. The bf16 default (dtype auto on CPUs
# with bf16 matrix units) is measured by the benchmark (docs/performance.md).
E2E_DTYPE = "float32"


def default_model_name() -> str:
    """The name responses carry for the default model: the shipped judge's built folder when
    the package ships one, else the base model's (resolving checks the hashes)."""
    from pathlib import Path

    from reflectrm.checkpoints.base import default_cache_dir
    from reflectrm.checkpoints.resolve import resolve_model

    return Path(resolve_model(E2E_MODEL, default_cache_dir(), None, E2E_DTYPE)).name


@pytest.fixture(scope="session", autouse=True)
def prepared_default_judge() -> None:
    """The preparation step of what these tests serve, in the dtypes they serve it in (float32,
    and bfloat16 where a test serves as `make serve` does): the suite's judge and the untrained
    base model (the reliability tests' long judgments). A server finds its model built, it never
    builds it; set-up prepares the default judge."""
    from reflectrm.checkpoints.base import default_cache_dir
    from reflectrm.checkpoints.resolve import BASE_MODEL, prepare_model

    for model in (E2E_MODEL, BASE_MODEL):
        for dtype in (E2E_DTYPE, "bfloat16"):
            prepare_model(model, default_cache_dir(), dtype, say=lambda _: None)


def e2e_settings(**overrides: Any) -> Settings:
    base: dict[str, Any] = {
        "model": E2E_MODEL,
        "kv_cache_gib": 2.0,
        "dtype": E2E_DTYPE,
        "max_model_len": 4096,
        "max_tokens": E2E_MAX_TOKENS,
        # Reflections always run here (the weak model's unanimous votes would skip them).
        "early_exit": False,
        "request_timeout_s": 300.0,
    }
    base.update(overrides)
    return Settings(**base)


class LiveService:
    """The service on a real engine, served by uvicorn from a background thread."""

    def __init__(self, settings: Settings, start_timeout_s: float = 600.0) -> None:
        self.settings = settings
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.loop = asyncio.new_event_loop()
        self.engine: Engine | None = None
        self.app: Any = None
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self._server: uvicorn.Server | None = None
        self._thread = threading.Thread(target=self._main, name="live-service", daemon=True)
        self._thread.start()
        if not self._ready.wait(start_timeout_s):
            raise TimeoutError("the engine did not start in time")
        if self._error is not None:
            raise RuntimeError("the live service failed to start") from self._error

    def _main(self) -> None:
        asyncio.set_event_loop(self.loop)
        try:
            self.loop.run_until_complete(self._serve())
        except BaseException as exc:  # surfaced to the test session by __init__
            self._error = exc
            self._ready.set()

    async def _serve(self) -> None:
        async with open_engine(self.settings.engine_config()) as engine:
            self.engine = engine
            self.app = create_app(self.settings, engine=engine)
            config = uvicorn.Config(
                self.app, host="127.0.0.1", port=self.port, log_level="warning", lifespan="on"
            )
            self._server = uvicorn.Server(config)
            serving = asyncio.create_task(self._server.serve())
            while not self._server.started and not serving.done():
                await asyncio.sleep(0.05)
            self._ready.set()
            await serving

    def run(self, coro: Coroutine[Any, Any, T], timeout: float | None = 600) -> T:
        """Run a coroutine on the engine's loop and wait for its result."""
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def stop(self) -> None:
        if self._server is not None:
            self._server.should_exit = True
        self._thread.join(timeout=120)


class ForwardingEngine:
    """The live engine, callable from any event loop."""

    def __init__(self, live: LiveService) -> None:
        assert live.engine is not None
        self._inner = live.engine
        self._loop = live.loop

    @property
    def model_name(self) -> str:
        return self._inner.model_name

    @property
    def max_model_len(self) -> int:
        return self._inner.max_model_len

    def render_chat(self, messages: Sequence[dict[str, str]]) -> Prompt:
        return self._inner.render_chat(messages)

    async def generate(
        self, prompt: Prompt, spec: SamplingSpec, request_id: str
    ) -> GenerationResult:
        return await self._forward(self._inner.generate(prompt, spec, request_id))

    async def check_health(self) -> None:
        await self._forward(self._inner.check_health())

    async def _forward(self, coro: Coroutine[Any, Any, T]) -> T:
        fut: concurrent.futures.Future[T] = asyncio.run_coroutine_threadsafe(coro, self._loop)
        try:
            return await asyncio.wrap_future(fut)
        except asyncio.CancelledError:
            fut.cancel()  # cancels the task on the engine loop, which aborts the request
            raise


@pytest.fixture(scope="session")
def live() -> Iterator[LiveService]:
    service = LiveService(e2e_settings())
    try:
        yield service
    finally:
        service.stop()


@pytest.fixture(scope="session")
def engine(live: LiveService) -> ForwardingEngine:
    return ForwardingEngine(live)


@pytest.fixture
def client(live: LiveService) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=live.url, timeout=300) as c:
        yield c


@contextlib.contextmanager
def separate_service(**overrides: Any) -> Iterator[LiveService]:
    """A second service with its own engine, for tests that must break or reconfigure it."""
    with keeping_engine_metrics():
        service = LiveService(e2e_settings(kv_cache_gib=1.0, **overrides))
        try:
            yield service
        finally:
            service.stop()


@contextlib.contextmanager
def keeping_engine_metrics() -> Iterator[None]:
    """A second engine in this process replaces the vllm:* metrics in prometheus_client's
    registry (vLLM unregisters the previous ones); give the session engine's back afterwards."""
    from prometheus_client import REGISTRY

    def engine_collectors() -> list[Any]:
        collectors = list(REGISTRY._collector_to_names)  # vLLM's own way to find them
        return [c for c in collectors if str(getattr(c, "_name", "")).startswith("vllm:")]

    saved = engine_collectors()
    try:
        yield
    finally:
        for collector in engine_collectors():
            REGISTRY.unregister(collector)
        for collector in saved:
            REGISTRY.register(collector)
