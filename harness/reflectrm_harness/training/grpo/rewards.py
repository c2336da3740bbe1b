"""GRPO rewards: the verdict the service would read from a completion, against the label.

A completion is read exactly as the service reads an output: generation there stops at the first
``</Result>``, so text after it is ignored here too, and ``parse_output`` picks the verdict.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from reflectrm.judging.judge import STOP
from reflectrm.judging.parsing import parse_output

# The verdict sentence each item kind must produce.
KIND_TO_VERDICT = {"preference": "Response", "reflection": "Critique"}


def completion_text(completion: Any) -> str:
    """TRL passes conversational completions as a list of messages, standard ones as strings."""
    if isinstance(completion, str):
        return completion
    return "".join(str(m.get("content", "")) for m in completion)


def verdict_of(text: str, kind: str) -> int | None:
    """The verdict (1 or 2) the service would parse from this output, or None if malformed."""
    for stop in STOP:
        cut = text.find(stop)
        if cut >= 0:
            text = text[: cut + len(stop)]
    return parse_output(text, KIND_TO_VERDICT[kind], truncated=False).verdict


def verdict_reward(
    completions: Sequence[Any], label: Sequence[int], kind: Sequence[str], **_: Any
) -> list[float]:
    """1 when the parsed verdict matches the label, 0 otherwise (a malformed output gets 0).

    The same rule for preference and reflection items (docs/method.md section 3).
    """
    return [
        1.0 if verdict_of(completion_text(c), k) == int(y) else 0.0
        for c, y, k in zip(completions, label, kind, strict=True)
    ]


def format_reward(completions: Sequence[Any], kind: Sequence[str], **_: Any) -> list[float]:
    """1 for any parseable verdict. Not the paper's: an optional shaping term (weight 0 by
    default) for a base model that almost never writes the format, whose groups would otherwise
    all score 0 and teach nothing."""
    return [
        0.0 if verdict_of(completion_text(c), k) is None else 1.0
        for c, k in zip(completions, kind, strict=True)
    ]
