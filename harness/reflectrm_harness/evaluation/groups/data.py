"""Group benchmarks: a prompt, its completions, and which of them are best (or their full
preference order), read from the group-shaped files a user has.

A ``Group`` ranks its completions by ``ranks`` (0 is best; equal ranks are tied in the gold
order). Three layouts are read, every row checked before anything is judged:

- **RM-Bench items**, regrouped from the pairwise file (``rm-bench.jsonl.gz``): the 9 pairs of
  one ``item_id`` are 3 chosen and 3 rejected styles of one answer; the group is the 6 distinct
  texts, chosen rank 0, rejected rank 1, each completion's style and side in ``completion_meta``
  and the 9 pairs' difficulty (hard, normal, easy) kept for RM-Bench's style matrix.
- **The group schema** (JSONL, plain or gzip; docs/schemas/groups.schema.json): ``id``,
  ``prompt`` or ``messages`` (as in the pairwise schema), ``completions`` (at least two
  strings), and either ``best`` (the index of the one best completion: best-of-N; an integer,
  never a boolean) or ``ranks`` (one integer per completion, lower is better, ties allowed);
  optional ``reference`` (for strategy ``reference``), ``subset`` and ``meta``.
- **RMB's best-of-N layout** (``bon_uid``, ``conversation_input``, ``bon_best.answer``,
  ``loser_list[].answer``, ``category_path``), JSON arrays or JSONL, for users who have the
  files: the best answer is completion 0 of its group (rank 0), the losers rank 1.
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from reflectrm.judging.types import Message
from reflectrm_harness.datasets import DatasetError, pair_from_row, read_rows
from reflectrm_harness.evaluation.benchmarks import default_data_dir, find_local
from reflectrm_harness.evaluation.names import RMB, RMBENCH, canonical_name, is_benchmark_name

CHOSEN, REJECTED = "chosen", "rejected"


@dataclass(frozen=True)
class Group:
    """One group to reward: its completions in order and their gold ranks (0 best)."""

    id: str
    benchmark: str
    conversation: tuple[Message, ...]
    completions: tuple[str, ...]
    ranks: tuple[int, ...]
    reference: str | None = None
    meta: Mapping[str, str] = field(default_factory=dict)  # e.g. subset
    # Per completion: what the benchmark says of it (RM-Bench: side and style).
    completion_meta: tuple[Mapping[str, str], ...] = ()
    # RM-Bench: (chosen style, rejected style) -> difficulty, for its 3x3 matrix.
    cells: Mapping[tuple[str, str], str] = field(default_factory=dict)

    @property
    def best(self) -> tuple[int, ...]:
        """The completions of the best rank."""
        top = min(self.ranks)
        return tuple(i for i, r in enumerate(self.ranks) if r == top)

    @property
    def ordered(self) -> bool:
        """The gold order tells some completions apart (Kendall tau is defined)."""
        return len(set(self.ranks)) > 1


def _check_group(group: Group, where: str) -> Group:
    n = len(group.completions)
    if n < 2:
        raise DatasetError(f"{where}: a group needs at least two completions, it has {n}")
    if len(group.ranks) != n:
        raise DatasetError(f"{where}: {len(group.ranks)} ranks for {n} completions")
    if not group.ordered:
        raise DatasetError(f"{where}: every completion has the same rank: nothing to score")
    for k, text in enumerate(group.completions):
        if not isinstance(text, str):
            raise DatasetError(f"{where}: completion {k} is not a string")
    if not any(m.content for m in group.conversation):
        raise DatasetError(f"{where}: the conversation is empty")
    return group


def _conversation(row: Mapping[str, Any], where: str) -> tuple[Message, ...]:
    """The row's prompt or messages, validated as the pairwise schema does."""
    probe = {k: row[k] for k in ("prompt", "messages") if k in row}
    pair = pair_from_row({**probe, "id": "x", "chosen": "a", "rejected": "b"}, where=where)
    return pair.conversation


# --- RM-Bench items --------------------------------------------------------------------------


def rmbench_groups(rows: Iterator[tuple[str, dict[str, Any]]]) -> list[Group]:
    """RM-Bench's pairs regrouped by ``item_id``: 3 chosen and 3 rejected styles each."""
    items: dict[str, list[tuple[str, dict[str, Any]]]] = {}
    for where, row in rows:
        item = row.get("item_id")
        if item is None:
            raise DatasetError(f"{where}: no `item_id`: RM-Bench groups are its items")
        items.setdefault(str(item), []).append((where, row))
    groups = []
    for item, members in items.items():
        where = members[0][0]
        texts: dict[tuple[str, str], str] = {}
        cells: dict[tuple[str, str], str] = {}
        for w, row in members:
            for key in ("chosen_style", "rejected_style", "difficulty", "chosen", "rejected"):
                if row.get(key) is None:
                    raise DatasetError(f"{w}: missing field `{key}` (RM-Bench item {item})")
            for side in (CHOSEN, REJECTED):
                style = str(row[f"{side}_style"])
                old = texts.setdefault((side, style), row[side])
                if old != row[side]:
                    raise DatasetError(f"{w}: item {item} has two {side} texts of style {style}")
            cells[(str(row["chosen_style"]), str(row["rejected_style"]))] = str(row["difficulty"])
        sides = [s for s, _ in texts]
        if sides.count(CHOSEN) < 1 or sides.count(REJECTED) < 1:
            raise DatasetError(f"{where}: item {item} lacks a chosen or a rejected response")
        keys = sorted(texts, key=lambda k: (k[0] != CHOSEN, k[1]))  # chosen first, by style
        first = members[0][1]
        group = Group(
            id=item,
            benchmark=RMBENCH,
            conversation=_conversation(first, where),
            completions=tuple(texts[k] for k in keys),
            ranks=tuple(0 if side == CHOSEN else 1 for side, _ in keys),
            meta={"subset": str(first.get("subset", "all"))},
            completion_meta=tuple({"side": side, "style": style} for side, style in keys),
            cells=cells,
        )
        groups.append(_check_group(group, where))
    return groups


# --- the group schema and RMB's best-of-N layout ---------------------------------------------


def _integer(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def schema_group(row: Mapping[str, Any], where: str, benchmark: str) -> Group:
    """One row of the group schema (docs/schemas/groups.schema.json)."""
    completions = row.get("completions")
    if not isinstance(completions, list):
        raise DatasetError(f"{where}: `completions` must be a list of strings")
    if ("best" in row) == ("ranks" in row):
        raise DatasetError(
            f"{where}: give either `best` (an index) or `ranks` (one per completion)"
        )
    if "best" in row:
        best = row["best"]
        # A boolean is an int in Python (true == 1), never an index in a group file.
        if not _integer(best) or not 0 <= best < len(completions):
            raise DatasetError(
                f"{where}: `best` must be an index into `completions` (an integer from 0 to "
                f"{len(completions) - 1}), not {json.dumps(best)}"
            )
        ranks = tuple(0 if i == best else 1 for i in range(len(completions)))
    else:
        raw = row["ranks"]
        if not isinstance(raw, list) or not all(_integer(r) for r in raw):
            raise DatasetError(f"{where}: `ranks` must be a list of integers (not booleans)")
        ranks = tuple(raw)
    meta = {str(k): str(v) for k, v in (row.get("meta") or {}).items()}
    meta["subset"] = str(row.get("subset", meta.get("subset", "all")))
    reference = row.get("reference")
    if reference is not None and (not isinstance(reference, str) or not reference.strip()):
        raise DatasetError(f"{where}: `reference` must be a non-empty string")
    group = Group(
        id=str(row.get("id", where)),
        benchmark=benchmark,
        conversation=_conversation(row, where),
        completions=tuple(completions),
        ranks=ranks,
        reference=reference,
        meta=meta,
    )
    return _check_group(group, where)


def rmb_bon_group(row: Mapping[str, Any], where: str) -> Group:
    """One row of RMB's best-of-N files: the best answer first, then the losers."""
    try:
        turns = row["conversation_input"]
        best = row["bon_best"]["answer"]
        losers = [x["answer"] for x in row["loser_list"]]
    except (KeyError, TypeError):
        raise DatasetError(
            f"{where}: an RMB best-of-N row needs `conversation_input`, `bon_best.answer` and "
            "`loser_list[].answer`"
        ) from None
    messages = [{"role": t.get("role"), "content": t.get("content")} for t in turns]
    path = str(row.get("category_path", "all"))
    goal = "Harmlessness" if "Harmlessness" in path else "Helpfulness"
    group = Group(
        id=str(row.get("bon_uid", where)),
        benchmark=RMB,
        conversation=_conversation({"messages": messages}, where),
        completions=(best, *losers),
        ranks=(0, *[1] * len(losers)),
        meta={"subset": path, "goal": goal},
    )
    return _check_group(group, where)


def _json_rows(path: Path) -> Iterator[tuple[str, dict[str, Any]]]:
    """Rows of a JSON array file, or of a JSONL file (plain or gzip)."""
    head = path.read_bytes()[:1] if path.stat().st_size else b""
    if head == b"[":
        try:
            items = json.loads(path.read_text(encoding="utf-8"))
        except json.JSONDecodeError as exc:
            raise DatasetError(
                f"{path}:{exc.lineno}: not JSON ({exc.msg} at column {exc.colno})"
            ) from None
        for k, row in enumerate(items, 1):
            if not isinstance(row, dict):
                raise DatasetError(f"{path} item {k}: a row must be a JSON object")
            yield f"{path} item {k}", row
        return
    yield from read_rows(path)


def read_groups(path: Path, name: str | None = None) -> list[Group]:
    """Every group of a file, each row checked; the layout is told from the rows."""
    rows = list(_json_rows(path))
    if not rows:
        raise DatasetError(f"{path} holds no rows")
    first = rows[0][1]
    if "item_id" in first and "chosen_style" in first:
        groups = rmbench_groups(iter(rows))
    elif "bon_uid" in first or "bon_best" in first:
        groups = [rmb_bon_group(row, where) for where, row in rows]
    elif "completions" in first:
        label = name or path.name.split(".")[0]
        groups = [schema_group(row, where, label) for where, row in rows]
    else:
        raise DatasetError(
            f"{path}: not a group file (RM-Bench pairs with `item_id`, rows with `completions` "
            "and `best` or `ranks`, or RMB best-of-N rows)"
        )
    if len({g.id for g in groups}) != len(groups):
        raise DatasetError(f"{path}: group ids are not unique")
    return groups


def load_groups(spec: str, data_dir: Path | None = None) -> tuple[str, list[Group]]:
    """A ``--dataset`` value for group evaluation: a benchmark name looked up in the data
    folder (``rm-bench``: its items regrouped), or a file ([NAME=]PATH). Returns the source."""
    head, sep, rest = spec.partition("=")
    name, target = (head, rest) if sep and not Path(spec).exists() else (None, spec)
    path = Path(target).expanduser()
    if path.is_file():
        return str(path), read_groups(path, name)
    if is_benchmark_name(target):
        found = find_local(canonical_name(target), data_dir or default_data_dir())
        if found is None:
            raise DatasetError(f"no local {canonical_name(target)} file; pass --data-dir or a path")
        return str(found), read_groups(found, canonical_name(target))
    raise DatasetError(f"--dataset {spec!r}: not a file or a benchmark name")


def sample_groups(groups: Sequence[Group], limit: int | None, seed: int) -> list[Group]:
    """``limit`` groups drawn as ``benchmarks.sample`` draws pairs: a prefix of one seeded
    shuffle (so samples nest: a larger limit keeps a smaller one's groups), in file order."""
    if limit is None or limit >= len(groups):
        return list(groups)
    benchmark = groups[0].benchmark if groups else ""
    order = list(range(len(groups)))
    random.Random(f"{seed}:{benchmark}:groups").shuffle(order)
    return [groups[i] for i in sorted(order[:limit])]
