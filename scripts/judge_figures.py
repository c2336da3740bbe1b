"""Write a judge's measured figures into its manifest's ``figures`` block, from the saved
reports of `reflectrm eval` (report.json), so that docs/judges.md (scripts/judges_table.py) is
generated from records, never typed by hand.

    .venv/bin/python -m scripts.judge_figures \
        --manifest service/reflectrm/artifacts/default/manifest.json \
        --mode margin+swap --heldout docs/records/X/report.json --heldout-name heldout \
        --trap docs/records/Y/report.json

Figures (percent): ``heldout`` (accuracy on the held-out pairs, the row ``--mode``, a no verdict
counted a miss), ``length_balanced`` (its length-balanced accuracy), ``trap`` and
``correctness`` (the project's two sets, from ``--trap``'s report), ``slot1`` (verdicts naming
Response 1, per order: the row without ``+swap``), ``ties`` (pairs without a winner) and
``cost`` (generated and prompt tokens per pooled answer; from ``--cost``'s report when given:
the engine work of the judging code as it is now, where the held-out run is older).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


def _record(path: Path) -> str:
    return str(path.resolve().parent.relative_to(ROOT))


def figures(
    heldout: dict[str, Any],
    heldout_name: str,
    heldout_path: Path,
    trap: dict[str, Any] | None,
    trap_path: Path | None,
    mode: str,
    cost: tuple[dict[str, Any], Path] | None = None,
) -> dict[str, Any]:
    one_order = mode.removesuffix("+swap")
    acc = heldout["accuracy"][mode]["benchmarks"][heldout_name]
    length = heldout["length"][mode][heldout_name]
    record = _record(heldout_path)
    out: dict[str, Any] = {
        "heldout": {
            "value": acc["value"],
            "ci95": acc["ci95"],
            "pairs": acc["n"],
            "record": record,
        },
        "length_balanced": {"value": length["value"], "ci95": length["ci95"], "record": record},
        "slot1": {
            "value": heldout["position"][one_order][heldout_name]["first_position_rate"],
            "record": record,
        },
        "ties": {
            "value": heldout["position"][mode][heldout_name]["no_verdict_rate"],
            "record": record,
        },
        "cost": {
            "value": (cost[0] if cost else heldout)["cost"][mode]["generated_tokens"],
            "unit": "generated tokens",
            "prompt_tokens": (cost[0] if cost else heldout)["cost"][mode]["prompt_tokens"],
            "record": _record(cost[1]) if cost else record,
        },
        "mode": mode,
    }
    if trap is not None and trap_path is not None:
        for name in ("trap", "correctness"):
            found = trap["accuracy"][mode]["benchmarks"].get(name)
            if found is not None:
                out[name] = {
                    "value": found["value"],
                    "ci95": found["ci95"],
                    "pairs": found["n"],
                    "record": _record(trap_path),
                }
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--manifest", type=Path, required=True)
    ap.add_argument("--mode", default="margin+swap")
    ap.add_argument("--heldout", type=Path, required=True, help="report.json of the held-out run")
    ap.add_argument("--heldout-name", default="heldout", help="its dataset's label")
    ap.add_argument("--trap", type=Path, help="report.json of the trap and correctness run")
    ap.add_argument("--cost", type=Path, help="report.json whose engine work gives the cost")
    args = ap.parse_args()
    heldout = json.loads(args.heldout.read_text())
    trap = json.loads(args.trap.read_text()) if args.trap else None
    manifest = json.loads(args.manifest.read_text())
    cost = (json.loads(args.cost.read_text()), args.cost) if args.cost else None
    manifest["figures"] = figures(
        heldout, args.heldout_name, args.heldout, trap, args.trap, args.mode, cost
    )
    args.manifest.write_text(json.dumps(manifest, indent=1) + "\n")
    print(json.dumps(manifest["figures"], indent=1))


if __name__ == "__main__":
    main()
