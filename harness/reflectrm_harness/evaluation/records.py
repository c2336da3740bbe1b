"""The per-judgment results file: append-only JSONL, written as each judgment finishes.

Line types: ``{"type": "run", ...}`` once per invocation (what was asked, and the judging
settings every later invocation must match to add to the same file), and ``{"type": "result",
...}`` per judgment with everything scoring needs, so a finished file can be re-scored without
the datasets or the model. A run killed mid-write leaves at most one partial last line, which
loading skips; judging resumes with the keys not yet in the file. The group workload writes its
own record types (``pool``, ``group``) with the same ``Writer``, reads them with ``rows`` and
checks its settings with ``check_compatible``.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

log = logging.getLogger(__name__)

Status = Literal["verdict", "no_verdict", "error"]
# Settings that change what a judgment means; a results file holds one value of each.
FINGERPRINT_KEYS = (
    "model",
    "template_version",
    "max_tokens",
    "num_candidates",
    "seed",
    "temperature",
    "enforce_format",
    "early_exit",
)


class ResultsMismatchError(ValueError):
    """The results file was written with other judging settings."""


@dataclass(frozen=True)
class Key:
    benchmark: str
    pair_id: str
    mode: str
    chosen_position: int


@dataclass(frozen=True)
class JudgmentResult:
    """What one judgment gave, whichever backend made it."""

    status: Status
    winner: int | None = None
    # The judge's scores of the responses as shown (vote shares, summing to 1); (0.5, 0.5) for no
    # verdict, None for an error. Files written before scores were recorded have none.
    scores: tuple[float, float] | None = None
    prompt_tokens: int = 0
    generated_tokens: int = 0
    engine_requests: int = 0
    latency_ms: float = 0.0
    early_exit: bool | None = None
    parse_failures: int | None = None
    outputs: int | None = None  # stage-1 candidates plus reflections
    error: str | None = None
    # Of the stage-1 candidates that gave a verdict, how many distinct analyses (None with one
    # candidate, or over HTTP, whose reply carries no trace): what reflection has to compare.
    distinct_analyses: int | None = None


@dataclass(frozen=True, kw_only=True)
class Record(JudgmentResult):
    """One judgment of one pair, in one order, in one mode: what was judged, and its outcome."""

    benchmark: str
    pair_id: str
    mode: str
    chosen_position: int  # where the gold-preferred response was shown: 1 or 2
    primary: bool  # this order is the pair's seeded random one (the other is the swap)
    seed: int
    meta: Mapping[str, str] = field(default_factory=dict)
    # The lengths in characters of the chosen and the rejected response (for length-balanced
    # accuracy); None in files written before they were recorded.
    lengths: tuple[int, int] | None = None

    @property
    def key(self) -> Key:
        return Key(self.benchmark, self.pair_id, self.mode, self.chosen_position)

    def to_json(self) -> dict[str, Any]:
        row = {**asdict(self), "meta": dict(self.meta)}
        # What was judged, then its outcome (asdict lists the inherited outcome fields first).
        result = JudgmentResult.__dataclass_fields__
        judged = {k: v for k, v in row.items() if k not in result}
        return {"type": "result", **judged, **{k: row[k] for k in result}}

    @staticmethod
    def from_json(row: Mapping[str, Any]) -> Record:
        fields = {k: v for k, v in row.items() if k in Record.__dataclass_fields__}
        for name in ("scores", "lengths"):
            if fields.get(name) is not None:
                fields[name] = tuple(fields[name])
        return Record(**fields)


@dataclass(frozen=True)
class Loaded:
    runs: tuple[dict[str, Any], ...]  # "run" (settings, at start) and "run_end" (summary) rows
    records: tuple[Record, ...]  # the last record of each key, in file order


def rows(path: Path) -> Iterator[dict[str, Any]]:
    """Every complete line of a results file (none when it does not exist). A line cut by a
    kill is skipped with a warning: its judgment is simply redone."""
    if not path.exists():
        return
    bad = 0
    with path.open("r", encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError:
                bad += 1
                log.warning("%s:%d is not complete JSON; skipping it", path, number)
                continue
            yield row
    if bad > 1:
        log.warning("%s has %d unreadable lines", path, bad)


def load(path: Path) -> Loaded:
    runs: list[dict[str, Any]] = []
    latest: dict[Key, Record] = {}
    for row in rows(path):
        if row.get("type") in ("run", "run_end"):
            runs.append(row)
        elif row.get("type") == "result":
            record = Record.from_json(row)
            latest.pop(record.key, None)
            latest[record.key] = record
    return Loaded(tuple(runs), tuple(latest.values()))


def fingerprint(run: Mapping[str, Any], keys: Sequence[str] = FINGERPRINT_KEYS) -> dict[str, Any]:
    return {k: run.get(k) for k in keys}


def check_compatible(
    existing: Loaded | Sequence[Mapping[str, Any]],
    run: Mapping[str, Any],
    path: Path,
    keys: Sequence[str] = FINGERPRINT_KEYS,
) -> None:
    """Refuse to mix judgments made with different settings (``keys``) in one file; ``existing``
    is the file as loaded, or its run rows."""
    runs = existing.runs if isinstance(existing, Loaded) else existing
    starts = [r for r in runs if r.get("type") == "run"]
    if not starts:
        return
    before = fingerprint(starts[0], keys)
    now = fingerprint(run, keys)
    # A service run may not know every setting (None); only values both sides know must agree.
    diff = {
        k: (before[k], now[k])
        for k in keys
        if before[k] is not None and now[k] is not None and before[k] != now[k]
    }
    if diff:
        shown = ", ".join(f"{k}: {a!r} in the file, {b!r} now" for k, (a, b) in diff.items())
        raise ResultsMismatchError(
            f"{path} was written with other judging settings ({shown}); use another --out-dir "
            "or the same settings"
        )


class Writer:
    """Appends lines and flushes each one, so a kill loses at most the judgments in flight."""

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        needs_newline = path.exists() and path.stat().st_size > 0 and not _ends_with_newline(path)
        self._f = path.open("a", encoding="utf-8")
        if needs_newline:
            self._f.write("\n")  # end a line cut by a kill so the next record starts cleanly

    def write(self, row: Mapping[str, Any]) -> None:
        self._f.write(json.dumps(row, ensure_ascii=False) + "\n")
        self._f.flush()
        os.fsync(self._f.fileno())

    def close(self) -> None:
        self._f.close()

    def __enter__(self) -> Writer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _ends_with_newline(path: Path) -> bool:
    with path.open("rb") as f:
        f.seek(-1, os.SEEK_END)
        return f.read(1) == b"\n"
