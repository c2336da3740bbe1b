"""The composition root: settings + engine -> FastAPI app."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager

from fastapi import FastAPI

from reflectrm.api.routes import router
from reflectrm.api.state import ServiceState
from reflectrm.engines.base import Engine
from reflectrm.instrumentation import MeteredJudge
from reflectrm.judging.judge import JudgeConfig
from reflectrm.settings import Settings

log = logging.getLogger(__name__)

EngineFactory = Callable[[Settings], AbstractAsyncContextManager[Engine]]


def judge_config(settings: Settings) -> JudgeConfig:
    return JudgeConfig(
        template_version=settings.template_version,
        temperature=settings.temperature,
        enforce_format=settings.enforce_format,
        max_analysis_chars=settings.max_analysis_chars,
        early_exit=settings.early_exit,
        seeded_sampling=settings.seeded_sampling,
    )


@contextlib.asynccontextmanager
async def default_engine(settings: Settings) -> AsyncIterator[Engine]:
    """The vLLM engine for the configured model (the default model is prepared first)."""
    from reflectrm.engines.vllm_engine import vllm_engine
    from reflectrm.models import resolve_model

    path = await asyncio.to_thread(
        resolve_model, settings.model, settings.cache_dir, settings.template_version
    )
    async with vllm_engine(settings, path) as engine:
        yield engine


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
    return app
