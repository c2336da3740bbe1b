"""The evaluation records how many different analyses a judgment's candidates wrote: what
reflection has to compare (docs/judges.md's mode table reads it)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from reflectrm_harness.evaluation.pairwise.runner import distinct_analyses


def _judgment(*candidates: tuple[str, int | None]) -> Any:
    cands = [SimpleNamespace(analysis=a, verdict=v) for a, v in candidates]
    return SimpleNamespace(trace=SimpleNamespace(candidates=cands))


def test_distinct_analyses_counts_the_different_texts_that_gave_a_verdict() -> None:
    # "a" twice (once with trailing space), "b"; "z" gave no verdict and is not counted.
    j = _judgment(("a", 1), ("a ", 2), ("b", 1), ("z", None))
    assert distinct_analyses(j) == 2


def test_one_candidate_has_no_count() -> None:
    assert distinct_analyses(_judgment(("a", 1))) is None
