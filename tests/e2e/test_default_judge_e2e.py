"""The shipped default judge (REFLECTRM_MODEL=default), served as `make serve` serves it (its
own template and margin weights, the served precision), on fixed slices of the project's
non-answer trap and correctness set: each pair through /v1/rewards, the reward endpoints'
default (margin mode, both orders pooled), and the helpful or right answer must be paid more.

The slices are the first pairs of each set by id, fixed before any result was seen; the bars are
below the judge's rates on the whole sets (docs/results.md), so that a judge that pays a
non-answer or a wrong answer as often as a chance judge fails here.
"""

from __future__ import annotations

import json
from typing import Any

import httpx

from reflectrm_harness.evaluation.data import CORRECTNESS, TRAP
from tests.e2e.conftest import separate_service

# The first 30 pairs of each set by id. A judge at chance pays the chosen answer more in 15 of
# 30 (20 or more in about 5% of runs); the default judge's rates on the whole sets are in
# docs/results.md.
SLICE = 30


def first_pairs(path: Any, n: int) -> list[dict[str, Any]]:
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return sorted(rows, key=lambda r: r["id"])[:n]


def paid_more(url: str, rows: list[dict[str, Any]]) -> tuple[int, list[dict[str, Any]]]:
    """How many pairs pay the chosen answer more than the rejected one, and the replies."""
    wins, replies = 0, []
    with httpx.Client(timeout=300) as client:
        for row in rows:
            body = {"prompt": row["prompt"], "completions": [row["chosen"], row["rejected"]]}
            r = client.post(f"{url}/v1/rewards", json=body)
            assert r.status_code == 200, r.text
            reply = r.json()
            replies.append(reply)
            assert (reply["mode"], reply["debias"], reply["scoring"]) == (
                "margin",
                "swap",
                "probability",
            )
            chosen, rejected = reply["rewards"]
            wins += chosen > rejected
    return wins, replies


def test_the_default_judge_pays_answers_over_non_answers_and_right_over_wrong():
    # As served: its own dtype, and a max_tokens that holds template v3's enforced format in
    # this model's tokens (the suite's short default is for the SmolLM2 judge).
    settings = {"model": "default", "dtype": "auto", "max_tokens": 256}
    with separate_service(**settings) as service:
        with httpx.Client(timeout=60) as client:
            info = client.get(f"{service.url}/v1/models").json()
        trap_wins, trap = paid_more(service.url, first_pairs(TRAP, SLICE))
        right_wins, right = paid_more(service.url, first_pairs(CORRECTNESS, SLICE))
    # Margin mode: per comparison, two verdict prefills and each answer's likelihood; a reward
    # is a probability strictly between 0 and 1, never a hard 1.0/0.0.
    assert all(0.0 < x < 1.0 for reply in trap + right for x in reply["rewards"])
    assert trap_wins >= 28, (trap_wins, info)
    assert right_wins >= 20, (right_wins, info)
