"""Pairwise preference data in the shared schema: reading, validating and presenting pairs.

The shared schema (../shared/data/README.md): one JSON object per line, in a plain or
gzip-compressed JSONL file, with ``id``, ``prompt`` (a single user turn) or ``messages`` (a
conversation ending with a user turn), ``chosen`` (the gold preference) and ``rejected``; a
``benchmark`` or ``source`` key names the release, and extra keys carry what a benchmark's
official metric needs. Evaluation (benchmark names, metadata, hub copies) and training
(HelpSteer3, folders of files) build on this module; it depends on nothing of theirs.
"""

from __future__ import annotations

import gzip
import json
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple, get_args

from reflectrm.judging.types import Message, Role

ROLES: tuple[str, ...] = get_args(Role)


class DatasetError(ValueError):
    """A dataset cannot be found or read; the message says where and what to fix."""


class Presented(NamedTuple):
    """A pair as a judge sees it: the two responses in the shown order, and the gold position."""

    responses: tuple[str, str]
    gold: int  # the position (1 or 2) of the chosen response


@dataclass(frozen=True)
class Pair:
    """One comparison. ``chosen`` is the gold preference; the judge never sees which it is."""

    id: str
    conversation: tuple[Message, ...]  # ends with a user turn
    chosen: str
    rejected: str
    benchmark: str = ""  # the release the pair comes from; "" when the row does not say
    meta: Mapping[str, str] = field(default_factory=dict)  # what an official metric reads

    def present(self, chosen_position: int) -> Presented:
        """The responses with the chosen one shown first (1) or second (2)."""
        if chosen_position == 1:
            return Presented((self.chosen, self.rejected), 1)
        if chosen_position == 2:
            return Presented((self.rejected, self.chosen), 2)
        raise ValueError(f"chosen_position must be 1 or 2, not {chosen_position!r}")


# --- reading and writing ---------------------------------------------------------------------


def read_rows(path: Path) -> Iterator[tuple[str, dict[str, Any]]]:
    """The rows of a JSONL file, gzip-compressed or plain (told apart by the gzip magic bytes),
    each with where it is (``path:line``) for error messages. Blank lines are skipped."""
    with path.open("rb") as raw:
        gzipped = raw.read(2) == b"\x1f\x8b"
    opener = gzip.open if gzipped else open
    with opener(path, "rt", encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            if not line.strip():
                continue
            where = f"{path}:{number}"
            try:
                row = json.loads(line)
            except json.JSONDecodeError as exc:
                raise DatasetError(f"{where}: not JSON ({exc.msg} at column {exc.colno})") from None
            if not isinstance(row, dict):
                raise DatasetError(f"{where}: a row must be a JSON object, not {_kind(row)}")
            yield where, row


def read_pairs(path: Path) -> Iterator[Pair]:
    """The pairs of one shared-schema file, validated row by row."""
    for where, row in read_rows(path):
        yield pair_from_row(row, where=where)


def write_rows(rows: Iterable[Mapping[str, Any]], path: Path) -> int:
    """Rows as a JSONL file, gzip-compressed when its name ends in ``.gz``; how many."""
    path.parent.mkdir(parents=True, exist_ok=True)
    opener = gzip.open if path.suffix == ".gz" else open
    n = 0
    with opener(path, "wt", encoding="utf-8") as f:
        for row in rows:
            f.write(json.dumps(row, ensure_ascii=False) + "\n")
            n += 1
    return n


def pair_to_row(pair: Pair) -> dict[str, Any]:
    """A pair as a shared-schema row (``messages`` form), e.g. held-out pairs for any tool."""
    return {
        "id": pair.id,
        "messages": [{"role": m.role, "content": m.content} for m in pair.conversation],
        "chosen": pair.chosen,
        "rejected": pair.rejected,
    }


# --- validating ------------------------------------------------------------------------------


def row_conversation(row: Mapping[str, Any], where: str | None = None) -> tuple[Message, ...]:
    """``messages`` (a conversation ending with a user turn) or else ``prompt`` (one user turn)."""
    at = where or _default_where(row)
    messages = row.get("messages")
    if messages:
        if not isinstance(messages, list):
            raise DatasetError(f"{at}: field `messages` must be a list, not {_kind(messages)}")
        conv = tuple(_message(m, f"messages[{i}]", at) for i, m in enumerate(messages))
    elif row.get("prompt") is not None:
        conv = (Message("user", _text(row, "prompt", at)),)
    else:
        raise DatasetError(f"{at}: the row has neither `prompt` nor `messages`")
    if conv[-1].role != "user":
        raise DatasetError(f"{at}: the conversation in `messages` must end with a user turn")
    return conv


def pair_from_row(
    row: Mapping[str, Any],
    *,
    where: str | None = None,
    default_id: str | int | None = None,
    benchmark: str | None = None,
    meta: Mapping[str, str] | None = None,
) -> Pair:
    """A shared-schema row as a Pair, or a DatasetError naming the row (``where``) and the field.

    ``default_id`` names a row without an ``id`` (e.g. its position); ``benchmark`` overrides the
    row's own ``benchmark``/``source``; ``meta`` is whatever the caller's metric needs.
    """
    at = where or _default_where(row)
    conversation = row_conversation(row, at)
    row_id = row.get("id")
    if row_id is None:
        if default_id is None:
            raise DatasetError(f"{at}: missing field `id` (the row has {_keys(row)})")
        row_id = default_id
    if isinstance(row_id, bool) or not isinstance(row_id, str | int):
        raise DatasetError(f"{at}: field `id` must be a string or an integer, not {_kind(row_id)}")
    for key in ("chosen", "rejected"):
        if key not in row:
            raise DatasetError(f"{at}: missing field `{key}` (the row has {_keys(row)})")
    if benchmark is None:
        benchmark = str(row.get("benchmark") or row.get("source") or "")
    return Pair(
        id=str(row_id),
        conversation=conversation,
        chosen=_text(row, "chosen", at),
        rejected=_text(row, "rejected", at),
        benchmark=benchmark,
        meta=dict(meta or {}),
    )


def _message(m: Any, name: str, at: str) -> Message:
    if not isinstance(m, Mapping):
        raise DatasetError(f"{at}: `{name}` must be an object with `role` and `content`")
    role = m.get("role")
    if role not in ROLES:
        raise DatasetError(f"{at}: `{name}.role` must be one of {', '.join(ROLES)}, not {role!r}")
    return Message(role, _text(m, "content", at, name=f"{name}.content"))


def _text(row: Mapping[str, Any], key: str, at: str, name: str | None = None) -> str:
    value = row.get(key)
    if not isinstance(value, str):
        raise DatasetError(f"{at}: field `{name or key}` must be a string, not {_kind(value)}")
    return value


def _default_where(row: Mapping[str, Any]) -> str:
    return f"pair {row['id']!r}" if row.get("id") is not None else "a pair without an id"


def _keys(row: Mapping[str, Any]) -> str:
    return ", ".join(sorted(map(str, row))) or "no fields"


def _kind(value: Any) -> str:
    return "null" if value is None else type(value).__name__
