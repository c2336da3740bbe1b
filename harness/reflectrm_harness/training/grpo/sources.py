"""Where training pairs come from: shared-schema files on disk or, online, a hub dataset.

Rows are read and validated by ``reflectrm_harness.datasets`` (../shared/data/README.md);
HelpSteer3-Preference, the paper's training set, is converted to that schema here.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from reflectrm_harness.datasets import Pair, pair_from_row, read_rows

HELPSTEER3 = "nvidia/HelpSteer3"


def helpsteer3_row(row: Mapping[str, Any], index: int) -> dict[str, Any] | None:
    """HelpSteer3-Preference to the shared schema: the label is the sign of overall_preference.

    Negative means response1 is better, positive response2; ties (0) are dropped, as in the paper.
    """
    preference = int(row["overall_preference"])
    if preference == 0:
        return None
    first, second = row["response1"], row["response2"]
    chosen, rejected = (first, second) if preference < 0 else (second, first)
    return {
        "id": f"helpsteer3/{index}",
        "messages": [{"role": m["role"], "content": m["content"]} for m in row["context"]],
        "chosen": chosen,
        "rejected": rejected,
    }


def _hub_rows(name: str, split: str) -> Iterable[tuple[str, dict[str, Any]]]:
    """A Hugging Face dataset (online users only). HelpSteer3 is converted; others must already
    have the shared schema's columns."""
    import datasets

    if name == HELPSTEER3:
        rows = datasets.load_dataset(name, "preference", split=split)
        converted = ((i, helpsteer3_row(r, i)) for i, r in enumerate(rows))
        return ((f"{name} row {i + 1}", r) for i, r in converted if r is not None)
    rows = datasets.load_dataset(name, split=split)
    return ((f"{name} row {i + 1}", dict(r)) for i, r in enumerate(rows))


def load_pairs(source: str, split: str = "train", limit: int | None = None) -> list[Pair]:
    """Pairs from a JSONL(.gz) file or a folder of them, or else a hub dataset id. A row without
    an ``id`` is named by its position among the rows read."""
    path = Path(source).expanduser()
    if path.is_dir():
        files = sorted([*path.glob("*.jsonl"), *path.glob("*.jsonl.gz")])
        rows: Iterable[tuple[str, dict[str, Any]]] = (r for f in files for r in read_rows(f))
    elif path.exists() or source.startswith((".", "/", "~")):
        rows = read_rows(path)
    else:
        rows = _hub_rows(source, split)
    pairs: list[Pair] = []
    for i, (where, row) in enumerate(rows):
        if limit is not None and len(pairs) >= limit:
            break
        pairs.append(pair_from_row(row, where=where, default_id=i))
    return pairs
