"""`reflectrm train check`: one judgment per pair and order, counted per order, every verdict kept."""

from __future__ import annotations

import asyncio

from reflectrm.judging.types import Message
from reflectrm_harness.datasets import Pair
from reflectrm_harness.training.grpo.check import CheckConfig, check
from support.engines import ScriptedEngine, judgment

PAIRS = [
    Pair("a", (Message("user", "Capital of France?"),), "Paris.", "I have no idea."),
    Pair("b", (Message("user", "2 + 2?"),), "4", "Hmm, hard to say."),
    Pair("c", (Message("user", "A primary colour?"),), "Red.", "Green tea."),
]


def test_a_judge_that_always_names_response_1_is_right_only_when_the_chosen_is_first() -> None:
    engine = ScriptedEngine(stage1=[judgment(1)])
    result = asyncio.run(check(engine, PAIRS, CheckConfig(template_version="v3")))
    summary = result.summary()
    assert (result.pairs, result.judgments, result.parsed) == (3, 6, 6)
    assert result.correct_by_order == {"chosen_first": 3, "chosen_second": 0}
    assert summary["accuracy_by_order"] == {"chosen_first": 1.0, "chosen_second": 0.0}
    assert summary["accuracy"] == 0.5
    assert result.consistent_pairs == 0
    assert result.first_position_picks == 6
    assert sorted((v["id"], v["chosen_at"], v["verdict"]) for v in result.verdicts) == [
        ("a", 1, 1),
        ("a", 2, 1),
        ("b", 1, 1),
        ("b", 2, 1),
        ("c", 1, 1),
        ("c", 2, 1),
    ]


def test_a_malformed_output_is_wrong_in_its_order_and_kept_with_its_reason() -> None:
    engine = ScriptedEngine(stage1=[judgment(None)])
    result = asyncio.run(check(engine, PAIRS[:1], CheckConfig(template_version="v3")))
    assert (result.parsed, result.correct) == (0, 0)
    assert result.correct_by_order == {"chosen_first": 0, "chosen_second": 0}
    assert {v["parse_error"] for v in result.verdicts} == set(result.parse_errors)
    assert sum(result.parse_errors.values()) == 2
