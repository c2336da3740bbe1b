"""The held-out file of ``train heldout``, against hand-computed values."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

from reflectrm.judging.types import Message
from reflectrm_harness.datasets import Pair, read_pairs
from reflectrm_harness.training.judge.heldout import export_heldout
from reflectrm_harness.training.judge.split import SourcePairs, make_split


def _pair(i: str, chosen: str, rejected: str) -> Pair:
    return Pair(i, (Message("user", f"q {i}"),), chosen, rejected)


def test_the_held_out_file_names_each_pair_by_source(tmp_path: Path) -> None:
    source = SourcePairs("x.jsonl.gz", tuple(_pair(f"p{i}", f"a{i}", f"b{i}") for i in range(8)))
    split = make_split([source], 0.25, seed=0)
    out = tmp_path / "heldout.jsonl.gz"
    assert export_heldout(split, [source], out) == 2
    with gzip.open(out, "rt") as f:
        rows = [json.loads(line) for line in f]
    assert [r["id"] for r in rows] == [f"x/{e['id']}" for e in split["pairs"]]
    assert {r["subset"] for r in rows} == {"x"}
    assert [p.chosen for p in read_pairs(out)] == [
        next(p.chosen for p in source.pairs if p.id == e["id"]) for e in split["pairs"]
    ]
