"""The figures of a set of verdicts on the judge recipe's items: accuracy with its Wilson
interval, the share naming Response 1, the pairs right in both orders and the length heuristic
on the same items, in all and per source (``verdict_layer`` reports them in the file named
here, which ``ship`` records in the artifact's manifest)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

VERDICT_REPORT = "verdict-report.json"


def summarize(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Accuracy (Wilson 95%), slot-1 share, pairs right in both orders, the length heuristic on
    the same items; per source too."""

    def block(sel: Sequence[dict[str, Any]]) -> dict[str, Any]:
        n = len(sel)
        right = sum(1 for r in sel if r["verdict"] == r["label"])
        by_pair: dict[str, list[bool]] = {}
        for r in sel:
            by_pair.setdefault(r["pair_id"], []).append(r["verdict"] == r["label"])
        both = [all(v) for v in by_pair.values() if len(v) == 2]
        length = sum(
            1.0 if r["longer"] == r["label"] else 0.5 if r["longer"] == 0 else 0.0 for r in sel
        )
        return {
            "items": n,
            "accuracy": right / n if n else math.nan,
            "accuracy_95": wilson(right, n),
            "slot1_share": sum(1 for r in sel if r["verdict"] == 1) / n if n else math.nan,
            "both_orders_right": sum(both) / len(both) if both else math.nan,
            "length_heuristic": length / n if n else math.nan,
        }

    out = {"all": block(rows)}
    for source in sorted({r["source"] for r in rows}):
        out[source] = block([r for r in rows if r["source"] == source])
    return out


def wilson(k: int, n: int, z: float = 1.96) -> list[float]:
    if n == 0:
        return [math.nan, math.nan]
    p = k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return [centre - half, centre + half]
