"""The composition root: settings + engine -> FastAPI app."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager

from fastapi import FastAPI

from reflectrm.api import errors
from reflectrm.api.access import AccessLog
from reflectrm.api.auth import ApiKeyAuth, load_keys
from reflectrm.api.body import BodyLimit
from reflectrm.api.nemo_gym import router as nemo_gym_router
from reflectrm.api.peers import Peers, close_peers
from reflectrm.api.routes import router
from reflectrm.checkpoints.validate import CheckpointError
from reflectrm.engines import open_engine
from reflectrm.engines.base import Engine
from reflectrm.instrumentation import metered_judge
from reflectrm.serving.lifecycle import Lifecycle
from reflectrm.serving.service import JudgingService
from reflectrm.settings import Settings, get_settings

log = logging.getLogger(__name__)

EngineFactory = Callable[[Settings], AbstractAsyncContextManager[Engine]]


def default_engine(settings: Settings) -> AbstractAsyncContextManager[Engine]:
    """The configured engine, opened through the one engine factory."""
    return open_engine(settings.engine_config())


def create_app(
    settings: Settings | None = None,
    engine: Engine | None = None,
    engine_factory: EngineFactory = default_engine,
) -> FastAPI:
    """Build the app. With ``engine`` given (tests) it is used as is; otherwise the factory's
    engine loads in the background so /health answers while /ready waits for it."""
    settings = settings or get_settings()
    service = JudgingService(settings)
    lifecycle = Lifecycle(service)
    keys = load_keys(settings)  # unusable keys stop the start here, never run open
    # With REFLECTRM_PEERS: a cohort member's call goes to its cohort's owner (api/peers.py).
    peers = Peers.from_settings(settings, service.metrics)

    async def load(stack: contextlib.AsyncExitStack) -> None:
        try:
            loaded = await stack.enter_async_context(engine_factory(settings))
        except Exception as exc:  # surfaces on /ready, and ends the process if so configured
            if isinstance(exc, CheckpointError):
                log.error("engine failed to start: %s", exc)  # a setting to fix: no traceback
            else:
                log.exception("engine failed to start")
            lifecycle.engine_failed(f"the engine failed to start: {exc}")
            return
        if lifecycle.draining:
            return  # stopping already: the engine closes with the stack
        serve_with(loaded)

    def serve_with(loaded: Engine) -> None:
        judge = metered_judge(loaded, settings.judge_config(), service.metrics)
        problem = service.settings_problem(judge)
        if problem is not None:  # a setting to fix: no traceback, and no judging
            lifecycle.engine_failed(f"the settings cannot work with this model: {problem}")
            return
        service.serve_with(judge)

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        async with contextlib.AsyncExitStack() as stack:
            stack.push_async_callback(close_peers, peers)
            loader = None
            if engine is not None:
                serve_with(engine)
            else:
                loader = asyncio.create_task(load(stack))
            lifecycle.start()
            try:
                yield
            finally:
                await lifecycle.stop()
                # Before the engine shuts down: admit nothing more, stop the background checks.
                await service.close("the service is shutting down; retry on another replica")
                if loader is not None and not loader.done():
                    loader.cancel()
                    with contextlib.suppress(asyncio.CancelledError):
                        await loader

    app = FastAPI(
        title="reflectrm",
        summary="Pairwise judgments from a generative reward model with ReflectRM two-stage "
        "inference (sampled judgments, a confidence anchor, self-reflection, a vote).",
        version="0.1.0",
        lifespan=lifespan,
    )
    app.state.reflectrm = service
    app.state.lifecycle = lifecycle
    app.state.peers = peers
    app.include_router(router)
    app.include_router(nemo_gym_router)  # NeMo Gym's GenRM judge (GENRM_BASE_URL)
    errors.install(app)
    # Outermost last: the access log sees every request (401 and 413 too), authentication
    # comes before any body is read, and the body is bounded before the routes parse it.
    app.add_middleware(
        BodyLimit, max_bytes=settings.max_body_bytes, timeout_s=settings.body_timeout_s
    )
    if keys:
        app.add_middleware(ApiKeyAuth, keys=keys, metrics_open=not settings.metrics_require_key)
    elif settings.host not in ("127.0.0.1", "localhost", "::1"):
        log.warning(
            "listening on %s without API keys: anyone who reaches the port can judge "
            "(set REFLECTRM_API_KEYS or REFLECTRM_API_KEY_FILE)",
            settings.host,
        )
    app.add_middleware(AccessLog)
    return app
