"""``reflectrm serve``: the app under uvicorn, with the service's own signal handling.

uvicorn alone stops listening on the first SIGTERM (so /ready cannot say 503), waits for
requests without a bound, and re-raises the signal at the end (the exit status says "killed").
Here the first SIGTERM or SIGINT drains the service (``serving.lifecycle``): it keeps answering,
/ready and new judgments with 503, while judgments in flight get the grace period; then the
server stops and the process exits 0. A second signal cuts the grace period short; a third
stops at once. When the engine fails, the lifecycle stops the server with status 1.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import socket
from types import FrameType

import uvicorn

from reflectrm.serving.lifecycle import Lifecycle
from reflectrm.settings import Settings

log = logging.getLogger(__name__)

# After the drain, how long uvicorn waits for connections still open before closing them.
CLOSE_CONNECTIONS_S = 5.0


class DrainingServer(uvicorn.Server):
    def __init__(self, config: uvicorn.Config, lifecycle: Lifecycle) -> None:
        super().__init__(config)
        self.lifecycle = lifecycle
        self.signals = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        lifecycle.on_exit = self.exit_soon

    async def serve(self, sockets: list[socket.socket] | None = None) -> None:
        self._loop = asyncio.get_running_loop()
        await super().serve(sockets)

    def exit_soon(self, code: int) -> None:
        self.should_exit = True

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        # Not uvicorn's: the signal is not re-raised after shutdown, and the first one drains.
        self.signals += 1
        name = signal.Signals(sig).name
        if self._loop is None or self.signals >= 3:
            self.should_exit = True
            self.force_exit = self.signals >= 3
            return
        if self.signals == 1:
            log.info("%s: draining (again to abort judgments in flight now)", name)
            self._loop.call_soon_threadsafe(self.lifecycle.begin_drain)
        else:
            log.info("%s: aborting judgments in flight now", name)
            self._loop.call_soon_threadsafe(self.lifecycle.abort_now)


def serve(settings: Settings, log_level: str = "info") -> int:
    """Serve until a signal drains the service (exit 0) or the engine fails (exit 1)."""
    from reflectrm.app import create_app

    app = create_app(settings)
    lifecycle: Lifecycle = app.state.lifecycle
    config = uvicorn.Config(
        app,
        host=settings.host,
        port=settings.port,
        log_level=log_level.lower(),
        # The service logs one structured line per request itself (reflectrm.access).
        access_log=False,
        timeout_graceful_shutdown=int(CLOSE_CONNECTIONS_S),
        # Slow and idle clients: a bound on connections (503 past it) and an idle keep-alive
        # longer than clients' pools keep theirs, so a pooled connection is not closed under
        # a client about to reuse it; the body's own deadline is api.body.BodyLimit's.
        limit_concurrency=settings.max_connections,
        timeout_keep_alive=settings.keep_alive_s,
    )
    DrainingServer(config, lifecycle).run()
    return lifecycle.exit_code or 0
