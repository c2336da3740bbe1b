"""The composition root: settings + engine -> FastAPI app."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager

from fastapi import FastAPI

from reflectrm.api import errors
from reflectrm.api.routes import router
from reflectrm.api.state import ServiceState
from reflectrm.engines import open_engine
from reflectrm.engines.base import Engine
from reflectrm.instrumentation import MeteredJudge
from reflectrm.runtime import engine_config, judge_config
from reflectrm.settings import Settings

log = logging.getLogger(__name__)

EngineFactory = Callable[[Settings], AbstractAsyncContextManager[Engine]]


def default_engine(settings: Settings) -> AbstractAsyncContextManager[Engine]:
    """The configured engine, opened through the one engine factory."""
    return open_engine(engine_config(settings))


def create_app(
    settings: Settings | None = None,
    engine: Engine | None = None,
    engine_factory: EngineFactory = default_engine,
) -> FastAPI:
    """Build the app. With ``engine`` given (tests) it is used as is; otherwise the factory's
    engine loads in the background so /health answers while /ready waits for it."""
    settings = settings or Settings()
    state = ServiceState(settings=settings)

    async def load(stack: contextlib.AsyncExitStack) -> None:
        try:
            loaded = await stack.enter_async_context(engine_factory(settings))
        except Exception as exc:  # any load failure must surface on /ready, not kill the app
            log.exception("engine failed to start")
            state.unavailable = f"the engine failed to start: {exc}"
            return
        state.judge = MeteredJudge(loaded, judge_config(settings), state.metrics)
        state.unavailable = None

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        async with contextlib.AsyncExitStack() as stack:
            loader = None
            if engine is not None:
                state.judge = MeteredJudge(engine, judge_config(settings), state.metrics)
                state.unavailable = None
            else:
                loader = asyncio.create_task(load(stack))
            try:
                yield
            finally:
                state.admission.close("the service is shutting down; retry on another replica")
                await state.swap_checks.close()  # before the engine shuts down
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
    app.state.reflectrm = state
    app.include_router(router)
    errors.install(app)
    return app
