"""The app (with a scripted engine) behind a real uvicorn server on a loopback port, in a
background thread: for tests that need real HTTP (raw sockets, chunked bodies, concurrency)."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Callable, Iterator
from typing import Any

import uvicorn

from loadtests.common.ports import free_port


class Served:
    def __init__(self, server: uvicorn.Server, port: int) -> None:
        self.server = server
        self.port = port
        self.url = f"http://127.0.0.1:{port}"


@contextlib.contextmanager
def served(
    app: Any,
    make_server: Callable[[uvicorn.Config], uvicorn.Server] = uvicorn.Server,
    port: int | None = None,
    **kw: Any,
) -> Iterator[Served]:
    """``app`` served on ``port`` (default: a free one)."""
    port = free_port() if port is None else port
    config = uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", **kw)
    server = make_server(config)
    handle = Served(server, port)
    errors: list[BaseException] = []

    def main() -> None:
        loop = asyncio.new_event_loop()
        try:
            loop.run_until_complete(server.serve())
        except BaseException as exc:  # surfaced below
            errors.append(exc)
        finally:
            loop.close()

    thread = threading.Thread(target=main, name="served-app", daemon=True)
    thread.start()
    while not server.started:
        if not thread.is_alive():
            raise RuntimeError("the server did not start") from (errors[0] if errors else None)
        threading.Event().wait(0.02)
    try:
        yield handle
    finally:
        server.should_exit = True
        thread.join(timeout=30)
