"""The app on a scripted engine behind a real uvicorn server on loopback, for tests that call it
the way clients and trainers do (real HTTP, real connection pools)."""

from __future__ import annotations

import asyncio
import contextlib
import re
import socket
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import uvicorn

from reflectrm.app import create_app
from reflectrm.engines.base import GenerationResult, Prompt, SamplingSpec
from reflectrm.settings import Settings
from tests.conftest import ScriptedEngine, judgment

RESPONSES = re.compile(
    r"\[Response 1\]\n(.*)\n\[End of Response 1\].*\[Response 2\]\n(.*)\n\[End of Response 2\]",
    re.S,
)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class PreferenceEngine(ScriptedEngine):
    """Stage 1 votes by the responses' quality: of n samples, response 1 gets
    ``n/2 + quality(r1) - quality(r2) + first_bias`` votes (clamped to 0..n), so both the
    content and the position shown first move the vote, by amounts a test can add up."""

    quality: dict[str, int] = field(default_factory=dict)
    first_bias: int = 0

    async def generate(
        self, prompt: Prompt, spec: SamplingSpec, request_id: str
    ) -> GenerationResult:
        match = RESPONSES.search(prompt.text)
        if match is None or "# Critiques for Judgment" in prompt.text:
            return await super().generate(prompt, spec, request_id)
        r1, r2 = match.group(1), match.group(2)
        ones = spec.n // 2 + self.quality.get(r1, 0) - self.quality.get(r2, 0) + self.first_bias
        ones = max(0, min(spec.n, ones))
        self.calls.append((prompt.text, spec))
        await asyncio.sleep(self.delay_s)
        gens = (judgment(1),) * ones + (judgment(2),) * (spec.n - ones)
        return GenerationResult(generations=gens, prompt_tokens=prompt.num_tokens)


@contextlib.contextmanager
def served(engine: ScriptedEngine, **settings: Any) -> Iterator[str]:
    """The app with ``engine`` served on a free loopback port; yields its base URL."""
    app = create_app(Settings(**settings), engine=engine)
    port = free_port()
    server = uvicorn.Server(
        uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="on")
    )
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_until_complete, args=(server.serve(),), daemon=True)
    thread.start()
    try:
        while not server.started:
            if not thread.is_alive():
                raise RuntimeError("the test server did not start")
            threading.Event().wait(0.02)
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=30)
        loop.close()
