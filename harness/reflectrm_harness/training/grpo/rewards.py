"""GRPO rewards: the verdict the service would read from a completion, against the label.

A completion is read exactly as the service reads an output: generation there stops at the first
``</Result>``, so text after it is ignored here too, and ``parse_output`` picks the verdict.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
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
    completions: Sequence[Any],
    label: Sequence[int],
    kind: Sequence[str],
    chosen_longer: Sequence[bool | None] | None = None,
    log_metric: Callable[[str, float], None] | None = None,
    **_: Any,
) -> list[float]:
    """1 when the parsed verdict matches the label, 0 otherwise (a malformed output gets 0).

    The same rule for preference and reflection items (docs/method.md section 3). With TRL's
    ``log_metric``, the batch's mean reward by stratum goes into the step's metrics as well
    (``reward_strata``).
    """
    rewards = [
        1.0 if verdict_of(completion_text(c), k) == int(y) else 0.0
        for c, y, k in zip(completions, label, kind, strict=True)
    ]
    if log_metric is not None:
        for name, value in reward_strata(rewards, label, chosen_longer).items():
            log_metric(name, value)
    return rewards


def reward_strata(
    rewards: Sequence[float],
    label: Sequence[int],
    chosen_longer: Sequence[bool | None] | None = None,
) -> dict[str, float]:
    """The mean reward of the completions whose item's right answer is in position 1
    (``reward_by/right_1``) and in position 2 (``reward_by/right_2``), and of those whose pair's
    chosen reply is the longer (``reward_by/chosen_longer``) or the shorter
    (``reward_by/chosen_shorter``); a stratum with no completion in the batch is left out."""
    strata: dict[str, list[float]] = {}
    for i, (r, y) in enumerate(zip(rewards, label, strict=True)):
        strata.setdefault(f"reward_by/right_{int(y)}", []).append(r)
        longer = chosen_longer[i] if chosen_longer is not None else None
        if longer is not None:
            side = "longer" if longer else "shorter"
            strata.setdefault(f"reward_by/chosen_{side}", []).append(r)
    return {name: sum(v) / len(v) for name, v in sorted(strata.items())}


def format_reward(completions: Sequence[Any], kind: Sequence[str], **_: Any) -> list[float]:
    """1 for any parseable verdict. Not the paper's: an optional shaping term (weight 0 by
    default) for a base model that almost never writes the format, whose groups would otherwise
    all score 0 and teach nothing."""
    return [
        0.0 if verdict_of(completion_text(c), k) is None else 1.0
        for c, k in zip(completions, kind, strict=True)
    ]
