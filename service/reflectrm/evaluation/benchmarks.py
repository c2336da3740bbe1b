"""Benchmark pairs: loading local files or hub copies, and sampling them deterministically.

Rows are read and validated by ``reflectrm.pairs`` (the shared schema, ../shared/data/README.md);
this module adds what is benchmark-specific: which benchmark a file holds, the metadata keys each
official metric needs (see ``scoring``), and resolving a ``--dataset`` value. Hugging Face copies
are converted to the same schema in ``hub.py``.
"""

from __future__ import annotations

import os
import random
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from reflectrm.evaluation.hub import hub_rows
from reflectrm.evaluation.names import (
    BENCHMARKS,
    JUDGEBENCH,
    PPE,
    REWARDBENCH,
    RMB,
    RMBENCH,
    canonical_name,
    is_benchmark_name,
)
from reflectrm.evaluation.scoring import rewardbench_section
from reflectrm.pairs import DatasetError, Pair, pair_from_row, read_rows

# The metadata keys each benchmark's official metric reads (see scoring.py).
META_KEYS = {
    REWARDBENCH: ("subset", "section"),
    RMBENCH: ("subset", "difficulty", "chosen_style", "rejected_style"),
    RMB: ("subset", "goal"),
    PPE: ("subset",),
    JUDGEBENCH: ("subset", "split"),
}
DATA_DIR_ENV = "REFLECTRM_DATA_DIR"


@dataclass(frozen=True)
class Benchmark:
    name: str
    source: str  # the file path or hub id it came from
    pairs: tuple[Pair, ...]


def default_data_dir() -> Path:
    """$REFLECTRM_DATA_DIR, else ../shared/data beside the working directory (the repo root)."""
    return Path(os.environ.get(DATA_DIR_ENV) or Path.cwd().parent / "shared" / "data")


# --- a benchmark's pairs ---------------------------------------------------------------------


def benchmark_meta(row: Mapping[str, Any], benchmark: str) -> dict[str, str]:
    """What the benchmark's official metric reads from a row; RewardBench's section is derived
    from the subset when the row lacks it."""
    meta = {k: str(row[k]) for k in META_KEYS[benchmark] if row.get(k) is not None}
    meta.setdefault("subset", "all")
    if benchmark == REWARDBENCH and "section" not in meta:
        meta["section"] = rewardbench_section(meta["subset"])
    return meta


def benchmark_pair(row: Mapping[str, Any], benchmark: str, where: str | None = None) -> Pair:
    """A shared-schema row as a pair of ``benchmark``, with its official metadata."""
    pair = pair_from_row(row, where=where, benchmark=benchmark)
    try:
        meta = benchmark_meta(row, benchmark)
    except ValueError as exc:
        raise DatasetError(f"{where or f'pair {pair.id!r}'}: {exc}") from None
    return replace(pair, meta=meta)


def _benchmark_of_rows(rows: Sequence[Mapping[str, Any]], path: Path) -> str:
    names = {str(r.get("benchmark") or "") for r in rows}
    if len(names) == 1 and "" not in names:
        return canonical_name(names.pop())
    stem = path.name.split(".")[0]
    try:
        return canonical_name(stem)
    except DatasetError:
        raise DatasetError(
            f"cannot tell which benchmark {path} holds (its rows' `benchmark` field is "
            f"{sorted(names)!r}); name it: --dataset rewardbench={path}"
        ) from None


def load_file(path: Path, benchmark: str | None = None) -> Benchmark:
    rows = list(read_rows(path))
    if not rows:
        raise DatasetError(f"{path} holds no pairs")
    name = (
        canonical_name(benchmark) if benchmark else _benchmark_of_rows([r for _, r in rows], path)
    )
    pairs = tuple(benchmark_pair(row, name, where) for where, row in rows)
    if len({p.id for p in pairs}) != len(pairs):
        raise DatasetError(f"{path}: pair ids are not unique")
    return Benchmark(name, str(path), pairs)


def load_hub(hub_id: str, benchmark: str | None = None) -> Benchmark:
    """A Hugging Face copy of a benchmark, converted to the shared schema (online users only)."""
    name, rows = hub_rows(hub_id, benchmark)
    pairs = tuple(benchmark_pair(r, name, f"{hub_id} row {i}") for i, r in enumerate(rows, 1))
    return Benchmark(name, hub_id, pairs)


# --- resolving a --dataset value ------------------------------------------------------------


def _local_candidates(name: str, data_dir: Path) -> list[Path]:
    stems = [name] if name != PPE else [PPE, "ppe-preference", "ppe-human-preference"]
    return [
        data_dir / sub / f"{stem}{ext}"
        for stem in stems
        for sub in ("benchmarks", ".")
        for ext in (".jsonl.gz", ".jsonl")
    ]


def find_local(name: str, data_dir: Path) -> Path | None:
    return next((p for p in _local_candidates(name, data_dir) if p.is_file()), None)


def load_dataset(spec: str, data_dir: Path) -> Benchmark:
    """Load one ``--dataset`` value: ``[benchmark=]`` then a file, a benchmark name or a hub id.

    A bare benchmark name is looked up in ``data_dir`` only; nothing is downloaded unless the
    value is a Hugging Face dataset id (owner/name) that is not a local path.
    """
    head, sep, rest = spec.partition("=")
    # File names may contain "=" (JudgeBench's upstream ones do): only a known name is a prefix.
    named, target = (head, rest) if sep and is_benchmark_name(head) else ("", spec)
    benchmark = canonical_name(named) if named else None
    path = Path(target).expanduser()
    if path.is_file():
        return load_file(path, benchmark)
    if is_benchmark_name(target) and not named:
        name = canonical_name(target)
        found = find_local(name, data_dir)
        if found is None:
            looked = ", ".join(str(p) for p in _local_candidates(name, data_dir)[:2])
            raise DatasetError(
                f"no local {name} file (looked for {looked}); pass --data-dir, a file path, "
                f"or a Hugging Face id such as {HUB_HINTS.get(name, 'owner/name')}"
            )
        return load_file(found, name)
    if "/" in target and not target.startswith((".", "/", "~")) and not path.exists():
        return load_hub(target, benchmark)
    names = ", ".join(BENCHMARKS)
    raise DatasetError(f"{spec!r} is not a file, a benchmark name ({names}) or a hub id")


HUB_HINTS = {
    REWARDBENCH: "allenai/reward-bench",
    RMBENCH: "THU-KEG/RM-Bench",
    RMB: "ilgee/RMB-Pairwise",
    PPE: "lmarena-ai/PPE-Human-Preference-V1",
    JUDGEBENCH: "ScalerLab/JudgeBench",
}


def local_benchmarks(data_dir: Path) -> list[str]:
    """The benchmarks with a file in ``data_dir``, in display order."""
    return [name for name in BENCHMARKS if find_local(name, data_dir) is not None]


# --- sampling --------------------------------------------------------------------------------


def sample(pairs: Sequence[Pair], limit: int | None, seed: int) -> tuple[Pair, ...]:
    """``limit`` pairs drawn without replacement, the same ones for the same seed, in file order.

    The draw is seeded by the seed and the benchmark name (``random.Random`` with a string seed
    is stable across Python versions), so one seed gives independent samples per benchmark. It
    takes a prefix of one seeded shuffle, so samples nest: a larger ``limit`` keeps every pair
    of a smaller one, and a finished small run can be extended by resuming with a larger limit.
    """
    if limit is None or limit >= len(pairs):
        return tuple(pairs)
    if limit < 0:
        raise ValueError("limit must be >= 0")
    benchmark = pairs[0].benchmark if pairs else ""
    order = list(range(len(pairs)))
    random.Random(f"{seed}:{benchmark}").shuffle(order)
    return tuple(pairs[i] for i in sorted(order[:limit]))


def interleave(groups: Iterable[Sequence[Pair]]) -> list[Pair]:
    """Round-robin over benchmarks, so a run stopped early has covered each of them evenly."""
    lists = [list(g) for g in groups]
    out: list[Pair] = []
    for i in range(max((len(g) for g in lists), default=0)):
        out.extend(g[i] for g in lists if i < len(g))
    return out
