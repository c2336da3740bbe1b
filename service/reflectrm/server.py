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
from uvicorn.protocols.http.h11_impl import H11Protocol

from reflectrm.serving.lifecycle import Lifecycle
from reflectrm.settings import Settings

log = logging.getLogger(__name__)

# After the drain, how long uvicorn waits for connections still open before closing them.
CLOSE_CONNECTIONS_S = 5.0


class HeadDeadlineProtocol(H11Protocol):
    """uvicorn's h11 protocol with a deadline for each request's head: a connection whose request
    line and headers have not arrived within ``head_timeout_s`` (of the connection, or of the
    first byte after the previous response) is closed. uvicorn bounds idle keep-alive time but
    not a head sent slowly, so a client dripping its headers would hold its connection at will.
    The body has its own deadline (``api.body.BodyLimit``)."""

    head_timeout_s = 10.0

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._head_timer: asyncio.TimerHandle | None = None
        self._arm_head_timer()

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        if self.cycle is None or self.cycle.response_complete:
            self._arm_head_timer()  # the head of the next request is still coming
        else:
            self._disarm_head_timer()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm_head_timer()
        super().connection_lost(exc)

    def _arm_head_timer(self) -> None:
        if self._head_timer is None:
            self._head_timer = self.loop.call_later(self.head_timeout_s, self._head_too_slow)

    def _disarm_head_timer(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _head_too_slow(self) -> None:
        self._head_timer = None
        if (self.cycle is None or self.cycle.response_complete) and not self.transport.is_closing():
            self.transport.close()


def head_deadline_protocol(timeout_s: float) -> type[HeadDeadlineProtocol]:
    return type("HeadDeadline", (HeadDeadlineProtocol,), {"head_timeout_s": timeout_s})


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
        http=head_deadline_protocol(settings.head_timeout_s),
        timeout_keep_alive=settings.keep_alive_s,
    )
    DrainingServer(config, lifecycle).run()
    return lifecycle.exit_code or 0
