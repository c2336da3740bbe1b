"""Benchmark pairs: loading local files (the shared schema) and sampling them deterministically.

The shared schema (../shared/data/README.md): one pair per JSON line with ``id``, ``benchmark``,
``subset``, ``prompt`` or ``messages``, ``chosen``, ``rejected`` and the extra keys each official
metric needs. Hugging Face copies are converted to the same schema in ``hub.py``.
"""

from __future__ import annotations

import gzip
import json
import os
import random
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from reflectrm.judging.types import Message

REWARDBENCH = "rewardbench"
RMBENCH = "rm-bench"
RMB = "rmb"
PPE = "ppe"
JUDGEBENCH = "judgebench"

# Display order: the paper's main table, then JudgeBench (consistency only in the paper).
BENCHMARKS = (REWARDBENCH, RMBENCH, RMB, PPE, JUDGEBENCH)
# The paper's headline average is the plain mean of these four.
MAIN_BENCHMARKS = (REWARDBENCH, RMBENCH, RMB, PPE)
DISPLAY_NAMES = {
    REWARDBENCH: "RewardBench",
    RMBENCH: "RM-Bench",
    RMB: "RMB",
    PPE: "PPE-Pref",
    JUDGEBENCH: "JudgeBench",
}
_ALIASES = {
    "rewardbench": REWARDBENCH,
    "reward-bench": REWARDBENCH,
    "rm-bench": RMBENCH,
    "rmbench": RMBENCH,
    "rmb": RMB,
    "ppe": PPE,
    "ppe-preference": PPE,
    "ppe-human-preference": PPE,
    "judgebench": JUDGEBENCH,
}
# The metadata keys each benchmark's official metric reads (see scoring.py).
META_KEYS = {
    REWARDBENCH: ("subset", "section"),
    RMBENCH: ("subset", "difficulty", "chosen_style", "rejected_style"),
    RMB: ("subset", "goal"),
    PPE: ("subset",),
    JUDGEBENCH: ("subset", "split"),
}
DATA_DIR_ENV = "REFLECTRM_DATA_DIR"


class DatasetError(ValueError):
    """A dataset cannot be found or read; the message says what to fix."""


@dataclass(frozen=True)
class Pair:
    """One comparison. ``chosen`` is the gold preference; the judge never sees which it is."""

    benchmark: str
    id: str
    conversation: tuple[Message, ...]
    chosen: str
    rejected: str
    meta: Mapping[str, str]


@dataclass(frozen=True)
class Benchmark:
    name: str
    source: str  # the file path or hub id it came from
    pairs: tuple[Pair, ...]


def canonical_name(name: str) -> str:
    key = name.strip().lower().replace("_", "-")
    if key not in _ALIASES:
        known = ", ".join(BENCHMARKS)
        raise DatasetError(f"unknown benchmark {name!r}; known: {known}")
    return _ALIASES[key]


def _is_alias(name: str) -> bool:
    return name.strip().lower().replace("_", "-") in _ALIASES


def default_data_dir() -> Path:
    """$REFLECTRM_DATA_DIR, else ../shared/data beside the working directory (the repo root)."""
    return Path(os.environ.get(DATA_DIR_ENV) or Path.cwd().parent / "shared" / "data")


# --- reading the shared schema ---------------------------------------------------------------


def read_jsonl(path: Path) -> Iterator[dict[str, Any]]:
    """Rows of a JSONL file, gzip-compressed or plain (told apart by the gzip magic bytes)."""
    with path.open("rb") as raw:
        gzipped = raw.read(2) == b"\x1f\x8b"
    opener = gzip.open if gzipped else open
    with opener(path, "rt", encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                yield json.loads(line)
            except json.JSONDecodeError as exc:
                raise DatasetError(f"{path}:{number}: not JSON ({exc.msg})") from None


def conversation_of(row: Mapping[str, Any]) -> tuple[Message, ...]:
    """``prompt`` (one user turn) or ``messages`` (ending with a user turn) as Messages."""
    messages = row.get("messages")
    if messages:
        conv = tuple(Message(m["role"], str(m["content"])) for m in messages)
    elif row.get("prompt") is not None:
        conv = (Message("user", str(row["prompt"])),)
    else:
        raise DatasetError(f"pair {row.get('id')!r} has neither `prompt` nor `messages`")
    if conv[-1].role != "user":
        raise DatasetError(f"pair {row.get('id')!r}: the conversation must end with a user turn")
    return conv


def pair_from_row(row: Mapping[str, Any], benchmark: str) -> Pair:
    for key in ("id", "chosen", "rejected"):
        if key not in row:
            raise DatasetError(f"a {benchmark} row lacks `{key}`: {sorted(row)}")
    meta = {k: str(row[k]) for k in META_KEYS[benchmark] if row.get(k) is not None}
    meta.setdefault("subset", "all")
    if benchmark == REWARDBENCH and "section" not in meta:
        from reflectrm.evaluation.scoring import rewardbench_section

        meta["section"] = rewardbench_section(meta["subset"])
    return Pair(
        benchmark=benchmark,
        id=str(row["id"]),
        conversation=conversation_of(row),
        chosen=str(row["chosen"]),
        rejected=str(row["rejected"]),
        meta=meta,
    )


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
    rows = list(read_jsonl(path))
    if not rows:
        raise DatasetError(f"{path} holds no pairs")
    name = canonical_name(benchmark) if benchmark else _benchmark_of_rows(rows, path)
    pairs = tuple(pair_from_row(r, name) for r in rows)
    if len({p.id for p in pairs}) != len(pairs):
        raise DatasetError(f"{path}: pair ids are not unique")
    return Benchmark(name, str(path), pairs)


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
    named, target = (head, rest) if sep and _is_alias(head) else ("", spec)
    benchmark = canonical_name(named) if named else None
    path = Path(target).expanduser()
    if path.is_file():
        return load_file(path, benchmark)
    if _is_alias(target) and not named:
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
        from reflectrm.evaluation.hub import load_hub

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
