"""The GRPO reward: the verdict the service would parse, against the label."""

from __future__ import annotations

from reflectrm_harness.training.grpo.rewards import format_reward, verdict_of, verdict_reward

R1 = "<Analysis>ok</Analysis>\n<Result>Response 1 is better than Response 2</Result>"
R2 = "<Analysis>ok</Analysis>\n<Result>Response 2 is better than Response 1</Result>"
C1 = "<Analysis>ok</Analysis>\n<Result>Critique 1 is better than Critique 2</Result>"


def test_right_verdict_scores_one_wrong_scores_zero() -> None:
    rewards = verdict_reward([R1, R2, R1, R2], label=[1, 1, 2, 2], kind=["preference"] * 4)
    assert rewards == [1.0, 0.0, 0.0, 1.0]


def test_malformed_outputs_score_zero() -> None:
    malformed = [
        "Response 1 is better than Response 2",  # no tags
        "<Analysis>ok</Analysis>\n<Result>Response 1 is better",  # cut before </Result>
        "<Analysis>ok</Analysis>\n<Result>Both are fine</Result>",
        "<Result>Response 1 is better than Response 1</Result>",
        "",
    ]
    assert verdict_reward(malformed, [1] * 5, ["preference"] * 5) == [0.0] * 5
    assert format_reward(malformed, ["preference"] * 5) == [0.0] * 5


def test_reflection_items_need_a_critique_verdict() -> None:
    assert verdict_reward([C1, R1], [1, 1], ["reflection", "reflection"]) == [1.0, 0.0]
    assert verdict_reward([C1], [1], ["preference"]) == [0.0]


def test_text_after_the_first_result_is_ignored_as_the_service_stops_there() -> None:
    rambling = R1 + "\n<Result>Response 2 is better than Response 1</Result>"
    assert verdict_of(rambling, "preference") == 1
    assert verdict_reward([rambling], [1], ["preference"]) == [1.0]


def test_conversational_completions_and_extra_columns() -> None:
    completions = [[{"role": "assistant", "content": R2}]]
    assert verdict_reward(completions, [2], ["preference"], prompts=[[]], trainer_state=None) == [
        1.0
    ]
    assert format_reward(completions, ["preference"]) == [1.0]
