"""The prompt templates: v2 lays v1's wording out so that reflections reuse stage 1's prefix."""

from __future__ import annotations

from reflectrm.judging.prompts import get_template
from reflectrm.judging.types import Message
from reflectrm_harness.prompts import preference_messages, reflection_messages

CONV = (Message("user", "What is 2 + 2?"), Message("assistant", "4"), Message("user", "Sure?"))


def shared_prefix(version: str) -> str:
    t = get_template(version)
    stage1 = preference_messages(t, CONV, "Yes, 4.", "No, 5.")
    stage2 = reflection_messages(t, CONV, "Yes, 4.", "No, 5.", "c-one", "c-two")
    assert stage1[0] == stage2[0]  # the same system turn
    a, b = stage1[1]["content"], stage2[1]["content"]
    n = next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b)))
    return a[:n]


def test_v3_reflection_prompt_begins_with_the_stage1_prompt_up_to_both_responses():
    prefix = shared_prefix("v3")
    assert prefix.startswith("# Context\n[User]\nWhat is 2 + 2?\n\n[Assistant]\n4")
    assert prefix.endswith("No, 5.\n[End of Response 2]\n\n# ")
    assert shared_prefix("v1") == ""  # v1 states the task first: only the system turn is shared


def test_v3_keeps_the_v1_verdict_sentences_and_critique_markers():
    v3 = get_template("v3")
    user = reflection_messages(v3, CONV, "a", "b", "c-one", "c-two")[1]["content"]
    assert "[Critique 1]\nc-one\n[End of Critique 1]" in user
    assert "# Critiques for Judgment" in user
    assert user.endswith(
        "Critique 1 is better than Critique 2\nCritique 2 is better than Critique 1"
    )
    pref = preference_messages(v3, CONV, "a", "b")[1]["content"]
    assert pref.endswith(
        "Response 1 is better than Response 2\nResponse 2 is better than Response 1"
    )
    assert v3.system == get_template("v1").system
