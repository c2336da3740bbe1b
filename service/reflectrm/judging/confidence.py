"""Confidence of one output: the mean of its lowest 10% sampled-token log-probs."""

from __future__ import annotations

import heapq
import math
from collections.abc import Sequence

BOTTOM_FRACTION = 0.1


def bottom_fraction_confidence(token_logprobs: Sequence[float]) -> float:
    """Mean of the lowest ``k = max(1, floor(0.1 * n))`` log-probs; higher is more confident.

    An empty output has no evidence of confidence: -inf, so it is never preferred.
    """
    n = len(token_logprobs)
    if n == 0:
        return -math.inf
    k = max(1, n // 10)  # floor(0.1 * n) in integer arithmetic
    return sum(heapq.nsmallest(k, token_logprobs)) / k
