"""The one way to open an engine: resolve the model, start the backend, always shut it down."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from collections.abc import AsyncIterator

from reflectrm.checkpoints.resolve import builds_checkpoint, resolve_model
from reflectrm.engines.base import Engine
from reflectrm.engines.config import EngineConfig


def resolve(config: EngineConfig) -> EngineConfig:
    """The config with ``model`` replaced by what the engine loads: the prepared default model
    (built in the dtype the engine serves it in), a checked checkpoint folder, or a hub id.
    Idempotent; slow only the first time (conversion). A remote engine's model is a name the
    fleet serves: it stays as it is."""
    if config.resolved or config.kind == "remote":
        return config
    from reflectrm.engines.vllm_engine import served_dtype  # its vLLM import waits for a call

    # Only a checkpoint built here needs the served dtype (finding it may import vLLM).
    dtype = served_dtype(config) if builds_checkpoint(config.model) else "float32"
    path = resolve_model(config.model, config.cache_dir, config.template_version, dtype)
    return dataclasses.replace(config, model=path, resolved=True)


@contextlib.asynccontextmanager
async def open_engine(config: EngineConfig) -> AsyncIterator[Engine]:
    """Start the configured engine (the default model is prepared first) and shut it down on
    exit, whatever happens inside. A remote engine connects to its fleet instead."""
    if config.kind == "remote":
        from reflectrm.engines.remote import remote_engine

        async with remote_engine(config) as remote:
            yield remote
        return
    from reflectrm.engines.vllm_engine import vllm_engine  # vLLM is heavy: load it on use

    resolved = await asyncio.to_thread(resolve, config)
    async with vllm_engine(resolved) as engine:
        yield engine
