"""A scripted engine whose votes follow the responses' content, and the app on it served over
loopback (tests/api/served.py) for tests that call it the way clients and trainers do."""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest

from reflectrm.app import create_app
from reflectrm.engines.base import GenerationResult, Prompt, SamplingSpec
from reflectrm.settings import Settings
from tests.api.served import served as served_app
from tests.conftest import ScriptedEngine, judgment, margin_output

RESPONSES = re.compile(
    r"\[Response 1\]\n(.*)\n\[End of Response 1\].*\[Response 2\]\n(.*)\n\[End of Response 2\]",
    re.S,
)


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
        if spec.max_tokens == 1 and spec.top_logprobs:  # margin mode: the share of 8 samples
            ones = 4 + self.quality.get(r1, 0) - self.quality.get(r2, 0) + self.first_bias
            p1 = min(0.99, max(0.01, ones / 8))
            self.calls.append((prompt.text, spec))
            return GenerationResult((margin_output((p1, 1 - p1)),), prompt.num_tokens)
        ones = spec.n // 2 + self.quality.get(r1, 0) - self.quality.get(r2, 0) + self.first_bias
        ones = max(0, min(spec.n, ones))
        self.calls.append((prompt.text, spec))
        await asyncio.sleep(self.delay_s)
        gens = (judgment(1),) * ones + (judgment(2),) * (spec.n - ones)
        return GenerationResult(generations=gens, prompt_tokens=prompt.num_tokens)


@pytest.fixture(scope="package", autouse=True)
def api_model() -> Iterator[None]:
    """The API tests' apps stand for the SmolLM2 judge (template v1, no margin weights): the
    scripted engines answer in that template, whatever the default judge is."""
    before = os.environ.get("REFLECTRM_MODEL")
    os.environ["REFLECTRM_MODEL"] = "smollm2"
    yield
    if before is None:
        os.environ.pop("REFLECTRM_MODEL", None)
    else:
        os.environ["REFLECTRM_MODEL"] = before


@contextlib.contextmanager
def served(engine: ScriptedEngine, **settings: Any) -> Iterator[str]:
    """The app with ``engine`` served on a free loopback port; yields its base URL."""
    with served_app(create_app(Settings(**settings), engine=engine), lifespan="on") as handle:
        yield handle.url
