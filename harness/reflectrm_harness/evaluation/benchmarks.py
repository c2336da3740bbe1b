"""Datasets to evaluate on: loading local files or hub copies, and sampling them deterministically.

Rows are read and validated by ``reflectrm_harness.datasets`` (../shared/data/README.md);
this module adds what is benchmark-specific: which benchmark a file holds, the metadata keys each
official metric needs (see ``scoring``), and resolving a ``--dataset`` value. A file that is not
one of the known benchmarks is a generic dataset under a label of its own (``NAME=`` or its file
name), scored by the generic metric. Every row is checked for the fields its metric needs when
the file is loaded, before anything is judged. Hugging Face copies are converted to the same
schema in ``hub.py``.
"""

from __future__ import annotations

import os
import random
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from reflectrm_harness.datasets import DatasetError, Pair, pair_from_row, read_rows
from reflectrm_harness.evaluation.hub import hub_rows
from reflectrm_harness.evaluation.names import (
    BENCHMARKS,
    DISPLAY_NAMES,
    JUDGEBENCH,
    PPE,
    REWARDBENCH,
    RMB,
    RMBENCH,
    canonical_name,
    is_benchmark_name,
)
from reflectrm_harness.evaluation.scoring import DIFFICULTIES, rewardbench_section

# The metadata keys each benchmark's official metric reads (see scoring.py), and of them those a
# row must have (RewardBench's section is derived from the subset; a missing subset is "all"
# where the metric allows it).
META_KEYS = {
    REWARDBENCH: ("subset", "section"),
    RMBENCH: ("subset", "difficulty", "chosen_style", "rejected_style"),
    RMB: ("subset", "goal"),
    PPE: ("subset",),
    JUDGEBENCH: ("subset", "split"),
}
REQUIRED_KEYS = {
    REWARDBENCH: ("subset",),
    RMBENCH: ("subset", "difficulty", "chosen_style", "rejected_style"),
    RMB: ("subset", "goal"),
    PPE: (),
    JUDGEBENCH: ("subset",),
}
# A generic dataset: per-subset accuracy, and best-of-N groups of pairs sharing a group_id.
GENERIC_META_KEYS = ("subset", "group_id")
DATA_DIR_ENV = "REFLECTRM_DATA_DIR"
# A label for a generic dataset: what --dataset NAME=path and --limit NAME=N take.
LABEL = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")


@dataclass(frozen=True)
class Benchmark:
    name: str  # a known benchmark's canonical name, or a generic dataset's label
    source: str  # the file path or hub id it came from
    pairs: tuple[Pair, ...]

    @property
    def generic(self) -> bool:
        return self.name not in BENCHMARKS


def dataset_name(name: str) -> str:
    """A known benchmark's canonical name, else the name as a generic dataset's label."""
    if is_benchmark_name(name):
        return canonical_name(name)
    if not LABEL.fullmatch(name):
        raise DatasetError(
            f"{name!r} is neither a benchmark ({', '.join(BENCHMARKS)}) nor a usable label for "
            "a dataset of your own (letters, digits, '.', '_', '-'; at most 64 characters)"
        )
    return name


def default_data_dir() -> Path:
    """$REFLECTRM_DATA_DIR, else ../shared/data beside the working directory (the repo root)."""
    return Path(os.environ.get(DATA_DIR_ENV) or Path.cwd().parent / "shared" / "data")


# --- a benchmark's pairs ---------------------------------------------------------------------


def benchmark_meta(row: Mapping[str, Any], benchmark: str) -> dict[str, str]:
    """What the benchmark's metric reads from a row (official, or generic for a label), or a
    ValueError naming the field that is missing or wrong. RewardBench's section is derived from
    the subset when the row lacks it."""
    if benchmark not in BENCHMARKS:
        meta = {k: str(row[k]) for k in GENERIC_META_KEYS if row.get(k) is not None}
        meta.setdefault("subset", "all")
        return meta
    missing = [k for k in REQUIRED_KEYS[benchmark] if row.get(k) is None]
    if missing:
        fields = " and ".join(f"`{k}`" for k in missing)
        plural = len(missing) > 1
        keys = ", ".join(sorted(map(str, row))) or "no fields"
        raise ValueError(
            f"missing field{'s' if plural else ''} {fields}: {DISPLAY_NAMES[benchmark]}'s "
            f"official metric needs {'them' if plural else 'it'} (the row has {keys}); to "
            "score the file generically instead, give it a label of your own: "
            "--dataset mydata=PATH"
        )
    meta = {k: str(row[k]) for k in META_KEYS[benchmark] if row.get(k) is not None}
    meta.setdefault("subset", "all")
    if benchmark == REWARDBENCH and "section" not in meta:
        meta["section"] = rewardbench_section(meta["subset"])
    if benchmark == RMBENCH and meta["difficulty"] not in DIFFICULTIES:
        raise ValueError(
            f"field `difficulty` is {meta['difficulty']!r}; RM-Bench's are "
            f"{', '.join(DIFFICULTIES)}"
        )
    return meta


def benchmark_pair(row: Mapping[str, Any], benchmark: str, where: str | None = None) -> Pair:
    """A shared-schema row as a pair of ``benchmark`` (or of a generic dataset so labelled),
    with the metadata its metric needs; a DatasetError names the row and the field."""
    pair = pair_from_row(row, where=where, benchmark=benchmark)
    try:
        meta = benchmark_meta(row, benchmark)
    except ValueError as exc:
        raise DatasetError(f"{where or f'pair {pair.id!r}'}: {exc}") from None
    return replace(pair, meta=meta)


def _name_of_rows(rows: Sequence[Mapping[str, Any]], path: Path) -> str:
    """The known benchmark a file holds (its rows' common ``benchmark`` field, else its file
    name), or else a generic label from its file name."""
    names = {str(r.get("benchmark") or "") for r in rows}
    if len(names) == 1 and is_benchmark_name(next(iter(names))):
        return canonical_name(names.pop())
    stem = path.name.split(".")[0]
    if is_benchmark_name(stem):
        return canonical_name(stem)
    label = re.sub(r"[^A-Za-z0-9_.-]+", "-", stem).strip("-.")[:64] or "dataset"
    return dataset_name(label if label[0].isalnum() else f"d{label}")


def load_file(path: Path, name: str | None = None) -> Benchmark:
    """A file's pairs, every row checked for what its metric needs. ``name`` is a benchmark
    (official metric) or a label (generic); without it the file says, or its file name does."""
    rows = list(read_rows(path))
    if not rows:
        raise DatasetError(f"{path} holds no pairs")
    name = dataset_name(name) if name else _name_of_rows([r for _, r in rows], path)
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
    """Load one ``--dataset`` value: ``[NAME=]`` then a file, a benchmark name or a hub id.

    NAME is a benchmark (its official metric) or a label of the user's own (the file is scored
    generically). A bare benchmark name is looked up in ``data_dir`` only; nothing is downloaded
    unless the value is a Hugging Face dataset id (owner/name) that is not a local path.
    """
    whole = Path(spec).expanduser()
    if whole.is_file():  # file names may contain "=" (JudgeBench's upstream ones do)
        return load_file(whole)
    head, sep, rest = spec.partition("=")
    named, target = (head, rest) if sep and LABEL.fullmatch(head) else ("", spec)
    benchmark = canonical_name(named) if named and is_benchmark_name(named) else None
    label = named if named and benchmark is None else None
    path = Path(target).expanduser()
    if path.is_file():
        return load_file(path, benchmark or label)
    if label is not None:
        raise DatasetError(
            f"--dataset {spec!r}: {target!r} is not a file; {label!r} is not a benchmark "
            f"({', '.join(BENCHMARKS)}), so it labels a dataset of your own: give its JSONL file"
        )
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
    raise DatasetError(
        f"{spec!r} is not a file, a benchmark name ({names}), LABEL=FILE or a hub id"
    )


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
