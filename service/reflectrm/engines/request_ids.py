"""Engine request ids: one judgment's requests share its id, with a suffix naming the stage.

The judging code gives the ids; metrics read the stage back from them.
"""

from __future__ import annotations

from typing import Literal

Stage = Literal["rollouts", "reflections"]


def rollout_request_id(request_id: str) -> str:
    return f"{request_id}-s1"


def reflection_request_id(request_id: str, candidate: int) -> str:
    return f"{request_id}-r{candidate}"


def stage_of(engine_request_id: str) -> Stage:
    """The stage an engine request belongs to, from the ids given above."""
    head, _, tail = engine_request_id.rpartition("-")
    if head and tail.startswith("r") and tail[1:].isdigit():
        return "reflections"
    return "rollouts"
