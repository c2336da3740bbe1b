"""Engine request ids: one judgment's requests share its id, with a suffix naming the stage.

The judging code gives the ids; metrics read the stage back from them, and the remote engine the
judgment's id (its routing key, so one judgment's requests stay on one replica).
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


def judgment_id_of(engine_request_id: str) -> str:
    """The id shared by every engine request of one judgment: the id without its stage suffix
    (an id given otherwise is its own judgment)."""
    head, _, tail = engine_request_id.rpartition("-")
    if head and (tail == "s1" or (tail.startswith("r") and tail[1:].isdigit())):
        return head
    return engine_request_id
