"""The app on an engine behind a real uvicorn server on a loopback port, in a background thread:
for the harness's commands that take a ``--url``."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Iterator
from typing import Any

import uvicorn

from reflectrm.app import create_app
from reflectrm.settings import Settings


@contextlib.contextmanager
def served(engine: Any, **settings: Any) -> Iterator[str]:
    """``create_app(Settings(**settings), engine=engine)`` served on a free loopback port (the
    system picks it); yields its base URL."""
    app = create_app(Settings(**settings), engine=engine)
    config = uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning", lifespan="on")
    server = uvicorn.Server(config)
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
    port = server.servers[0].sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=30)
