"""What `/v1/judge` with the default judge's pair defaults (margin, both orders pooled) answers on
the held-out pairs of docs/records/default-judge-heldout, each pair as the record first sent it:
the share of verdicts naming Response 1, ties, and accuracy. The pooled scores are the mean of
the record's two margin-mode orders, as a `debias: swap` reply pools them.

    .venv/bin/python -m studies.pair_defaults_share
"""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path
from typing import Any

RECORD = Path(__file__).resolve().parents[1] / "docs/records/default-judge-heldout/results.jsonl"


def shares(path: Path = RECORD) -> dict[str, float]:
    orders: dict[str, dict[int, dict[str, Any]]] = defaultdict(dict)
    for line in path.read_text().splitlines():
        row = json.loads(line)
        if row.get("type") == "result" and row["mode"] == "margin":
            orders[row["pair_id"]][row["chosen_position"]] = row
    pairs = first = ties = right = 0
    for by_position in orders.values():
        if set(by_position) != {1, 2}:
            continue
        chosen = (by_position[1]["scores"][0] + by_position[2]["scores"][1]) / 2
        sent = next(r for r in by_position.values() if r["primary"])["chosen_position"]
        shown_first = chosen if sent == 1 else 1 - chosen
        pairs += 1
        ties += shown_first == 0.5
        first += shown_first > 0.5
        right += chosen > 0.5
    return {
        "pairs": pairs,
        "names_response_1": 100 * first / pairs,
        "ties": 100 * ties / pairs,
        "accuracy": 100 * right / pairs,
    }


if __name__ == "__main__":
    print(json.dumps({k: round(v, 1) for k, v in shares().items()}))
