"""A pair whose call names no mode or debias is judged as the served judge is served (its
manifest's ``serving``, or REFLECTRM_PAIR_MODE and REFLECTRM_PAIR_DEBIAS), and the reply says
why; a call that names them gets what it named.

The engine votes by content and by position (``first_bias``): in margin mode response 1's
verdict probability is (4 + quality(r1) - quality(r2) + first_bias) / 8 in each order."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.testclient import TestClient

from reflectrm.app import create_app
from reflectrm.settings import Settings
from tests.api.conftest import PreferenceEngine

GOOD, BAD = "The capital of France is Paris.", "The capital of France is Berlin."
PAIR = {"prompt": "What is the capital of France?", "responses": [GOOD, BAD]}


def client(**settings: Any) -> TestClient:
    engine = PreferenceEngine(quality={GOOD: 1}, first_bias=2)
    return TestClient(create_app(Settings(**settings), engine=engine))


def swapped(body: dict[str, Any]) -> dict[str, Any]:
    return {**body, "responses": list(reversed(body["responses"]))}


def test_a_pair_left_unset_is_judged_in_both_orders_pooled_and_says_why():
    with client(pair_mode="margin", pair_debias="swap") as c:
        first = c.post("/v1/judge", json=PAIR).json()
        second = c.post("/v1/judge", json=swapped(PAIR)).json()
    # GOOD first: (4 + 1 + 2) / 8 = 0.875; BAD first: (4 - 1 + 2) / 8 = 0.625 for BAD, so
    # 0.375 for GOOD; pooled 0.625 for GOOD whichever order the call sent.
    assert (first["mode"], first["debias"]) == ("margin", "swap")
    assert first["winner"] == 1
    assert first["scores"] == pytest.approx([0.625, 0.375])
    assert second["winner"] == 2
    assert second["scores"] == pytest.approx([0.375, 0.625])
    assert "REFLECTRM_PAIR_MODE" in first["note"]


def test_the_default_judges_manifest_serves_pairs_in_margin_mode_both_orders():
    served = Settings(model="default").pair_defaults()
    assert (served.mode, served.debias) == ("margin", "swap")
    assert served.why is not None
    assert "Response 1" in served.why


def test_a_judge_without_serving_defaults_keeps_the_methods():
    with client() as c:  # the SmolLM2 judge (tests/api/conftest.py): no `serving` in its manifest
        reply = c.post("/v1/judge", json={**PAIR, "seed": 1}).json()
    assert (reply["mode"], reply["debias"], reply["note"]) == ("reflect", "none", None)


def test_what_a_call_names_it_gets_and_what_it_leaves_the_judge_fills_in():
    with client(pair_mode="margin", pair_debias="swap") as c:
        named = c.post("/v1/judge", json={**PAIR, "mode": "single", "debias": "none"}).json()
        mode_only = c.post("/v1/judge", json={**PAIR, "mode": "single"}).json()
        batch = c.post(
            "/v1/judge/batch", json={"items": [PAIR, {**PAIR, "mode": "single", "seed": 2}]}
        ).json()
    assert (named["mode"], named["debias"], named["note"]) == ("single", "none", None)
    assert (mode_only["mode"], mode_only["debias"]) == ("single", "swap")
    assert mode_only["note"] is not None
    modes = [(i["result"]["mode"], i["result"]["debias"]) for i in batch["results"]]
    assert modes == [("margin", "swap"), ("single", "swap")]


def test_an_ablation_is_of_reflect_mode_whatever_the_judge_serves():
    with client(pair_mode="margin", pair_debias="swap", allow_ablations=True) as c:
        reply = c.post("/v1/judge", json={**PAIR, "ablation": "anchor_only", "seed": 3}).json()
    assert reply["mode"] == "reflect"
