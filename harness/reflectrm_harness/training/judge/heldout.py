"""The held-out pairs as a file ``reflectrm eval`` reads.

``export_heldout`` writes the split's pairs in the shared schema, ``subset`` naming the source
file, so that the evaluation report's per-subset table is the per-source one. The judge's
comparison with the length heuristics on the same pairs is ``reflectrm eval vs-length``
(``reflectrm_harness.evaluation.vs_length``).
"""

from __future__ import annotations

import gzip
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from reflectrm_harness.datasets import pair_to_row
from reflectrm_harness.evaluation.vs_length import source_label
from reflectrm_harness.training.judge.split import SourcePairs, held_out_pairs


def export_heldout(split: dict[str, Any], sources: Sequence[SourcePairs], out: Path) -> int:
    """Write the held-out pairs (checked against the split's hashes) to ``out``."""
    pairs = held_out_pairs(split, sources)
    out.parent.mkdir(parents=True, exist_ok=True)
    opener = gzip.open if out.suffix == ".gz" else open
    with opener(out, "wt", encoding="utf-8") as f:
        given = {source.name for source in sources}
        entries = [e for e in split["pairs"] if e["source"] in given]
        for entry, pair in zip(entries, pairs, strict=True):
            row = pair_to_row(pair)
            row["id"] = f"{source_label(entry['source'])}/{pair.id}"
            row["subset"] = source_label(entry["source"])
            f.write(json.dumps(row, ensure_ascii=False) + "\n")
    return len(pairs)
