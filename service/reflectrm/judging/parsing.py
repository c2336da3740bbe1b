"""Reading a verdict out of the model's own output, and only its output."""

from __future__ import annotations

import re
from dataclasses import dataclass

_RESULT = re.compile(r"<Result>(.*?)</Result>", re.DOTALL | re.IGNORECASE)
_ANALYSIS = re.compile(r"<Analysis>(.*?)</Analysis>", re.DOTALL | re.IGNORECASE)
_ANALYSIS_END = re.compile(r"</Analysis>", re.IGNORECASE)
_VERDICT = re.compile(
    r"^\s*(Response|Critique)\s+([12])\s+is\s+better\s+than\s+(?:Response|Critique)\s+([12])\s*\.?\s*$",
    re.IGNORECASE,
)


@dataclass(frozen=True)
class Parsed:
    verdict: int | None  # 1 or 2
    analysis: str
    # Why no verdict: "truncated" (cut at max tokens), "no_result" (no <Result> after
    # </Analysis>), "invalid_result" (a <Result> without one of the two verdict sentences).
    error: str | None


def parse_output(text: str, kind: str, truncated: bool) -> Parsed:
    """Parse a judgment. ``kind`` is "Response" or "Critique".

    The last well-formed ``<Result>`` after the closing ``</Analysis>`` wins. A ``<Result>``
    inside the analysis (say, the model quoting a response that carries one) never counts, and
    generation stops at the first ``</Result>``, so such an output has no verdict rather than a
    wrong one. An output cut at max tokens never counts either: the model had not finished.
    """
    analysis = _analysis_of(text)
    if truncated:
        return Parsed(None, analysis, "truncated")
    closed = _ANALYSIS_END.search(text)
    results = _RESULT.findall(text, closed.end()) if closed else []
    if not results:
        return Parsed(None, analysis, "no_result")
    for body in reversed(results):
        verdict = _verdict_of(body, kind)
        if verdict is not None:
            return Parsed(verdict, analysis, None)
    return Parsed(None, analysis, "invalid_result")


def _verdict_of(body: str, kind: str) -> int | None:
    m = _VERDICT.match(body)
    if m is None or m.group(1).lower() != kind.lower():
        return None
    first, second = int(m.group(2)), int(m.group(3))
    return first if first != second else None


def _analysis_of(text: str) -> str:
    """The critique shown in reflection prompts: the analysis, without the Result line."""
    m = _ANALYSIS.search(text)
    if m is not None:
        return m.group(1).strip()
    cut = re.search(r"<Result>", text, re.IGNORECASE)
    head = text[: cut.start()] if cut else text
    return re.sub(r"^\s*<Analysis>", "", head, flags=re.IGNORECASE).strip()
