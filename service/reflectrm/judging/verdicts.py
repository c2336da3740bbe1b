"""The judge's verdict probabilities: what it gives each verdict at the token that decides it.

Pure arithmetic on what an engine returned (``Generation.tokens`` and ``top_logprobs``). A
verdict is one digit ("1" or "2") after "Response" or "Critique"; the probability of verdict k is
that of digit k, renormalised over the two digits (an enforced format's mask forbids every other
token there, and leaves the ratio of the two the model's own). Tokenizers that write the space
before a digit as a token of its own (SmolLM2, Qwen2.5) and those that fold it into the digit
(" 1") are read alike: a token counts as digit k when its text, stripped, is k.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence

from reflectrm.engines.base import Alternatives, Generation

DIGITS = ("1", "2")
# Alternatives asked for at each generated position: both digits were always among the top 20
# of the judges measured (docs/method-choices.md). Margin mode asks for the two digits' own
# log-probs besides, which an engine that can gives whatever their rank (``digit_pair``).
TOP_LOGPROBS = 20
# The end of the text before a verdict digit ("... Response", "<Result>Critique ").
_BEFORE_DIGIT = re.compile(r"(Response|Critique)\s*$")


def digit_probabilities(alternatives: Alternatives) -> tuple[float, float] | None:
    """(p1, p2), summing to 1, from one position's likeliest tokens; None when neither digit is
    among them. A digit missing while the other is listed is below every listed token: it is
    given the least listed probability, an upper bound, so the other's is a lower bound."""
    mass = [0.0, 0.0]
    listed = [math.exp(lp) for _, lp in alternatives if math.isfinite(lp)]
    for text, lp in alternatives:
        digit = text.strip()
        if digit in DIGITS and math.isfinite(lp):
            mass[int(digit) - 1] += math.exp(lp)
    if mass[0] == 0.0 and mass[1] == 0.0:
        return None
    floor = min(listed)
    p1 = mass[0] or floor
    p2 = mass[1] or floor
    return p1 / (p1 + p2), p2 / (p1 + p2)


def digit_pair(logprobs: Sequence[float]) -> tuple[float, float] | None:
    """(p1, p2), summing to 1, from the two verdict digits' own log-probs (asked for by token id,
    so neither is ever missing): ``digit_probabilities`` of a list holding both, without its
    floor. None when neither has any probability."""
    lp1, lp2 = logprobs
    if math.isnan(lp1) or math.isnan(lp2) or lp1 == lp2 == -math.inf:
        return None
    # exp(lp1) / (exp(lp1) + exp(lp2)) and its complement, each from the log-odds (bounded so
    # that neither is 0, as the listed digits' never are): exact where the exps underflow.
    d = max(-700.0, min(700.0, lp1 - lp2))
    return 1.0 / (1.0 + math.exp(-d)), 1.0 / (1.0 + math.exp(d))


def deciding_index(tokens: Sequence[str], at_result: bool) -> int | None:
    """The position of the digit that decides an output: the first verdict digit after the
    output's last ``<Result>`` when ``at_result``, else the output's first verdict digit (a
    decision-first analysis, whose lead the format ties to the verdict). None when there is none."""
    text = "".join(tokens)
    begin = 0
    if at_result:
        opened = text.rfind("<Result>")
        if opened < 0:
            return None
        begin = opened + len("<Result>")
    at = 0
    for k, token in enumerate(tokens):
        if at >= begin and token.strip() in DIGITS and _BEFORE_DIGIT.search(text[begin:at]):
            return k
        at += len(token)
    return None


def verdict_probabilities(
    generation: Generation, verdict: int | None, at_result: bool
) -> tuple[float, float] | None:
    """The output's verdict probabilities at its deciding digit; None when the output has no
    verdict, the engine returned no alternatives (a fleet that ignores the request), or the
    digit found is not the verdict parsed (the two readings disagree: trust neither)."""
    if verdict is None or not generation.top_logprobs:
        return None
    k = deciding_index(generation.tokens, at_result)
    if k is None or k >= len(generation.top_logprobs):
        return None
    if generation.tokens[k].strip() != str(verdict):
        return None
    return digit_probabilities(generation.top_logprobs[k])


def mean_probabilities(probs: Sequence[tuple[float, float]]) -> tuple[float, float]:
    """The voters' mean verdict probabilities."""
    n = len(probs)
    return sum(p[0] for p in probs) / n, sum(p[1] for p in probs) / n
