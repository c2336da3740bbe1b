"""A scripted engine for the harness's tests: stage-1 outputs from a list, reflections from a rule
on the two critiques, margin answers from the stage-1 outputs' shares; and the outputs it gives,
in the judge's format."""

from __future__ import annotations

import math
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from reflectrm.engines.base import (
    ChatMessage,
    Generation,
    GenerationResult,
    Prompt,
    SamplingSpec,
    plain_text,
)
from reflectrm.judging.parsing import parse_output

REFLECTION = "# Critiques for Judgment"


def judgment(
    verdict: int | None,
    analysis: str = "fine",
    logprobs: Sequence[float] = (-0.5,) * 10,
    finish: str = "stop",
    kind: str = "Response",
) -> Generation:
    """A stage-1 or reflection output in the template's format (no verdict: None)."""
    text = f"<Analysis>{analysis}</Analysis>\n"
    if verdict is not None:
        text += f"<Result>{kind} {verdict} is better than {kind} {3 - verdict}</Result>"
    return Generation(text=text, token_logprobs=tuple(logprobs), finish_reason=finish)  # type: ignore[arg-type]


def margin_output(p1: float | None) -> Generation:
    """Margin mode's one output: the likelier verdict digit with both digits' log-probs, or
    (None) a token that is no digit."""
    if p1 is None:
        return Generation(" x", (-1.0,), "length", (" x",), (((" x", -1.0),),))
    top = ((" 1", math.log(p1)), (" 2", math.log(1 - p1)))
    best = max(top, key=lambda t: t[1])
    return Generation(best[0], (best[1],), "length", (best[0],), (top,))


@dataclass
class ScriptedEngine:
    """Answers stage 1 with the first n of ``stage1``, a reflection with the slot that
    ``reflect(critique_1, critique_2)`` prefers (None: unparseable), and a margin request with the
    share of ``stage1`` naming response 1 (kept off 0 and 1; no digit when none has a verdict).
    Records every request in ``calls``."""

    stage1: list[Generation] = field(default_factory=list)
    reflect: Callable[[str, str], int | None] = lambda c1, c2: 1
    max_model_len: int = 100_000
    model_name: str = "scripted"
    calls: list[tuple[str, SamplingSpec]] = field(default_factory=list)

    def render_chat(self, messages: Sequence[ChatMessage]) -> Prompt:
        text = "\n".join(f"<{m['role']}>{plain_text(m['content'])}" for m in messages)
        # A token per word, its id the word's checksum (so two texts differ where words do).
        return Prompt(text=text, token_ids=tuple(zlib.crc32(w.encode()) for w in text.split()))

    async def generate(
        self, prompt: Prompt, spec: SamplingSpec, request_id: str
    ) -> GenerationResult:
        self.calls.append((prompt.text, spec))
        gens: tuple[Generation, ...]
        if spec.max_tokens == 1 and spec.top_logprobs:
            verdicts = [parse_output(g.text, "Response", False).verdict for g in self.stage1]
            ones, twos = verdicts.count(1), verdicts.count(2)
            p1 = min(0.99, max(0.01, ones / (ones + twos))) if ones + twos else None
            gens = (margin_output(p1),)
        elif REFLECTION in prompt.text:
            c1 = prompt.text.split("[Critique 1]\n", 1)[1].split("\n[End of Critique 1]", 1)[0]
            c2 = prompt.text.split("[Critique 2]\n", 1)[1].split("\n[End of Critique 2]", 1)[0]
            gens = (judgment(self.reflect(c1, c2), kind="Critique"),)
        else:
            gens = tuple(self.stage1[: spec.n])
        return GenerationResult(generations=gens, prompt_tokens=prompt.num_tokens)

    async def check_health(self) -> None:
        return None
