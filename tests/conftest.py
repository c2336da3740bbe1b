"""Test doubles shared by the unit and API tests, and folder-based markers."""

from __future__ import annotations

import asyncio
import math
import os
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from reflectrm.engines.base import (
    ChatMessage,
    EngineError,
    Generation,
    GenerationResult,
    Prompt,
    SamplingSpec,
    plain_text,
)
from reflectrm.judging.parsing import parse_output

SHARED_DATA = Path(__file__).resolve().parents[2] / "shared" / "data"


def in_ci() -> bool:
    """Running in CI (``CI`` set, as CI services set it: ``CI=true``), where every
    prerequisite of the suite is installed."""
    return os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")


def unavailable(reason: str) -> None:
    """A prerequisite of this test is missing: a skip with ``reason`` on a developer's machine,
    a failure in CI, where a skip would let a check pass silently that never ran."""
    if in_ci():
        pytest.fail(f"{reason} (CI is set: a missing prerequisite fails, it does not skip)")
    pytest.skip(reason)


def require(present: bool, reason: str) -> None:
    """``unavailable(reason)`` unless ``present``."""
    if not present:
        unavailable(reason)


def require_shared_data(*parts: str) -> Path:
    """``../shared/data/<parts>`` beside the repository, required (see ``unavailable``)."""
    path = SHARED_DATA.joinpath(*parts)
    require(path.exists(), f"the shared data is absent ({path})")
    return path


def needs(present: bool, reason: str) -> pytest.MarkDecorator:
    """``require`` as a mark (a test, a class or a module's ``pytestmark``), checked before any
    fixture of the test is set up (none is started only to be skipped)."""
    return pytest.mark.needs(present=present, reason=reason)


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    for mark in item.iter_markers("needs"):
        require(mark.kwargs["present"], mark.kwargs["reason"])


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        folder = Path(str(item.fspath)).parent.name
        if folder in ("unit", "api", "e2e", "docker"):
            item.add_marker(getattr(pytest.mark, folder))


def judgment(
    verdict: int | None,
    analysis: str = "fine",
    logprobs: Sequence[float] = (-0.5,) * 10,
    finish: str = "stop",
    kind: str = "Response",
) -> Generation:
    """A stage-1 or reflection output in the template's format."""
    if verdict is None:
        text = f"<Analysis>{analysis}</Analysis>\n"
    else:
        other = 3 - verdict
        text = f"<Analysis>{analysis}</Analysis>\n<Result>{kind} {verdict} is better than {kind} {other}</Result>"
    return Generation(text=text, token_logprobs=tuple(logprobs), finish_reason=finish)  # type: ignore[arg-type]


def margin_output(probabilities: tuple[float, float] | None) -> Generation:
    """Margin mode's one output: the verdict digit with both digits' log-probs, or (None) a
    token that is no digit."""
    if probabilities is None:
        return Generation(" x", (-1.0,), "length", (" x",), (((" x", -1.0),),))
    p1, p2 = probabilities
    top = ((" 1", math.log(p1)), (" 2", math.log(p2)))
    best = max(top, key=lambda t: t[1])
    return Generation(best[0], (best[1],), "length", (best[0],), (top,))


Reflector = Callable[[str, str], int | None]


@dataclass
class ScriptedEngine:
    """Answers stage 1 from a list of outputs and reflections from a rule on the two critiques.

    ``reflect(critique_1, critique_2)`` returns the preferred slot (1 or 2) or None (unparseable).
    """

    stage1: list[Generation] = field(default_factory=list)
    reflect: Reflector = lambda c1, c2: 1
    max_model_len: int = 100_000
    model_name: str = "scripted"
    delay_s: float = 0.0
    dead: bool = False
    # Die (as a crashed engine would) once this many requests have been served.
    dies_after: int | None = None
    calls: list[tuple[str, SamplingSpec]] = field(default_factory=list)
    aborted: int = 0
    # Margin mode's answer, from the prompt's text: the probabilities of verdicts 1 and 2, or
    # None for an answer without them. Unset: the share of the stage-1 outputs naming each
    # (kept off 0 and 1), None when none of them has a verdict.
    margin: Callable[[str], tuple[float, float] | None] | None = None

    def render_chat(self, messages: Sequence[ChatMessage]) -> Prompt:
        text = "\n".join(f"<{m['role']}>{plain_text(m['content'])}" for m in messages)
        # A token per word, its id the word's checksum (so two texts differ where words do).
        return Prompt(text=text, token_ids=tuple(zlib.crc32(w.encode()) for w in text.split()))

    async def generate(
        self, prompt: Prompt, spec: SamplingSpec, request_id: str
    ) -> GenerationResult:
        if self.dies_after is not None and len(self.calls) >= self.dies_after:
            self.dead = True
        if self.dead:
            raise EngineError("the vLLM engine has stopped; restart the service")
        self.calls.append((prompt.text, spec))
        try:
            await asyncio.sleep(self.delay_s)
        except asyncio.CancelledError:
            self.aborted += 1
            raise
        if spec.max_tokens == 1 and spec.top_logprobs:
            gens = (margin_output((self.margin or self._stage1_shares)(prompt.text)),)
        elif "# Critiques for Judgment" in prompt.text:
            c1 = prompt.text.split("[Critique 1]\n", 1)[1].split("\n[End of Critique 1]", 1)[0]
            c2 = prompt.text.split("[Critique 2]\n", 1)[1].split("\n[End of Critique 2]", 1)[0]
            gens: tuple[Generation, ...] = (judgment(self.reflect(c1, c2), kind="Critique"),)
        else:
            gens = tuple(self.stage1[: spec.n])
        return GenerationResult(generations=gens, prompt_tokens=prompt.num_tokens)

    def _stage1_shares(self, text: str) -> tuple[float, float] | None:
        verdicts = [parse_output(g.text, "Response", False).verdict for g in self.stage1]
        ones, twos = verdicts.count(1), verdicts.count(2)
        if not ones + twos:
            return None
        p1 = min(0.99, max(0.01, ones / (ones + twos)))
        return p1, 1 - p1

    async def check_health(self) -> None:
        if self.dead:
            raise EngineError("the vLLM engine has stopped; restart the service")

    @property
    def reflection_calls(self) -> list[tuple[str, SamplingSpec]]:
        return [c for c in self.calls if "# Critiques for Judgment" in c[0]]
