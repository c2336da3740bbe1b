"""A judge with nothing but position to say (the base model names the response shown first in
almost every verdict): under ``debias: swap`` every reward of a group is 0.5, and under
``debias: none`` the rewards are spread by the order drawn for each comparison, not by the
completions. docs/rlhf.md says so next to the base model's figures, with what to do."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from reflectrm.app import create_app
from reflectrm.settings import Settings
from tests.api.conftest import PreferenceEngine

ROOT = Path(__file__).resolve().parents[2]
COMPLETIONS = ["The answer is 4.", "It is 5.", "Four.", "I do not know."]


def group_rewards(debias: str) -> list[float]:
    # first_bias 4 of 8 votes on top of the even 4: response 1 gets all 8, whatever the texts.
    engine = PreferenceEngine(first_bias=4)
    with TestClient(create_app(Settings(swap_check_fraction=0.0), engine=engine)) as c:
        r = c.post(
            "/v1/rewards",
            json={
                "prompt": "What is 2 + 2?",
                "completions": COMPLETIONS,
                "strategy": "round_robin",
                "mode": "vote",
                "num_candidates": 8,
                "debias": debias,
                "seed": 3,
            },
        )
    assert r.status_code == 200, r.text
    rewards: list[float] = r.json()["rewards"]
    return rewards


def test_a_judge_of_position_only_gives_every_completion_half_under_swap():
    # Each pair: the first shown wins 8-0 in both orders, (1, 0) and (0, 1) average to a tie.
    assert group_rewards("swap") == [0.5] * 4
    # Without swap each comparison goes to the completion its seed's coin showed first.
    spread = group_rewards("none")
    assert len(set(spread)) > 1
    assert sum(spread) / len(spread) == pytest.approx(0.5)  # a win and a loss per pair


def test_the_rlhf_docs_say_so_next_to_the_base_models_figures():
    text = (ROOT / "docs" / "rlhf.md").read_text()
    match = re.search(
        r"^## Engine work per reward on the real engine$(.*?)(?=^## |\Z)", text, re.M | re.S
    )
    assert match, "the section with the base model's figures is gone"
    section = match.group(1)
    assert "every reward is 0.5" in section
    assert "SmolLM2-135M-Instruct" in section
    assert "REFLECTRM_MODEL=base" in section
    assert "trained judge" in section
    assert "`debias: none`" in section
    assert "position, not quality" in section
