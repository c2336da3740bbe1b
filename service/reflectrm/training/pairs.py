"""Pairwise preference data in the shared schema, from a local file or (online) the hub.

The shared schema (../shared/data/README.md): one JSON object per line with ``id``, ``messages``
(or ``prompt``), ``chosen`` and ``rejected``; files may be gzip-compressed.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from reflectrm.evaluation.benchmarks import conversation_of, read_jsonl
from reflectrm.judging.types import Message

HELPSTEER3 = "nvidia/HelpSteer3"


@dataclass(frozen=True)
class Pair:
    """One human preference: the conversation (ending with a user turn) and two responses."""

    id: str
    conversation: tuple[Message, ...]
    chosen: str
    rejected: str


def pair_from_row(row: Mapping[str, Any], index: int = 0) -> Pair:
    """A shared-schema row as a Pair; ``prompt`` is a single user turn, ``messages`` a history."""
    row = {"id": index, **row}  # rows without an id are named by their position
    return Pair(str(row["id"]), conversation_of(row), str(row["chosen"]), str(row["rejected"]))


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


def _hub_rows(name: str, split: str) -> Iterable[dict[str, Any]]:
    """A Hugging Face dataset (online users only). HelpSteer3 is converted; others must already
    have the shared schema's columns."""
    import datasets

    if name == HELPSTEER3:
        rows = datasets.load_dataset(name, "preference", split=split)
        converted = (helpsteer3_row(r, i) for i, r in enumerate(rows))
        return (r for r in converted if r is not None)
    return datasets.load_dataset(name, split=split)


def load_pairs(source: str, split: str = "train", limit: int | None = None) -> list[Pair]:
    """Pairs from a JSONL(.gz) file or a folder of them, or else a hub dataset id."""
    path = Path(source).expanduser()
    if path.is_dir():
        files = sorted([*path.glob("*.jsonl"), *path.glob("*.jsonl.gz")])
        rows: Iterable[dict[str, Any]] = (r for f in files for r in read_jsonl(f))
    elif path.exists() or source.startswith((".", "/", "~")):
        rows = read_jsonl(path)
    else:
        rows = _hub_rows(source, split)
    pairs: list[Pair] = []
    for i, row in enumerate(rows):
        if limit is not None and len(pairs) >= limit:
            break
        pairs.append(pair_from_row(row, i))
    return pairs
