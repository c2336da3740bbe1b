"""The split rule of the judge recipe, and the held-out split file of the default judge.

A prompt (the whole conversation the responses answer) is either held out or trained on, never
both: HelpSteer2 has several pairs per prompt, and a judge that saw one of them would be measured
on a prompt it has learned. The one rule: each prompt gets a seeded draw in [0, 1)
(``prompt_draw``: a hash of the salt and the prompt), and a prompt takes the first role whose
cumulative share is above its draw (``role_by_draw``), so the split does not depend on file
order. The shares are either given (``pool``: 22% held out, 15% development) or, per source, the
draw at which that source's prompts in draw order first hold ``fraction`` of its pairs
(``quota_share``; ``make_split``, the default judge's split: each source gives the same share).

The split is stored as a JSON file of ids with hashes: for each held-out pair its source file,
its id and the sha256 of its row's content (conversation, chosen, rejected), so that a changed
data file is noticed instead of silently measuring other pairs.
"""

from __future__ import annotations

import hashlib
import json
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from reflectrm_harness.datasets import Pair, read_pairs

# The held-out split of the SmolLM2 judge (REFLECTRM_MODEL=smollm2, artifacts/smollm2): the pairs
# its recipe never trained on; its manifest records the file's sha256.
JUDGE_SPLIT = Path(__file__).resolve().parents[2] / "splits" / "judge-holdout-split.json"


class SplitError(ValueError):
    """A split file does not match the data it names; the message says what differs."""


def prompt_key(pair: Pair) -> str:
    """The conversation a pair's responses answer, as a hash: the unit of the split."""
    turns = [[m.role, m.content] for m in pair.conversation]
    return hashlib.sha256(json.dumps(turns, ensure_ascii=False).encode()).hexdigest()


def pair_hash(pair: Pair) -> str:
    """The sha256 of what a judge is shown of a pair (conversation, chosen, rejected)."""
    turns = [[m.role, m.content] for m in pair.conversation]
    body = json.dumps([turns, pair.chosen, pair.rejected], ensure_ascii=False)
    return hashlib.sha256(body.encode()).hexdigest()


@dataclass(frozen=True)
class SourcePairs:
    """The pairs of one source file, named as the split file names it (its file name)."""

    name: str
    pairs: tuple[Pair, ...]


def read_sources(paths: Sequence[Path]) -> list[SourcePairs]:
    return [SourcePairs(p.name, tuple(read_pairs(p))) for p in paths]


def prompt_draw(pair: Pair, salt: str, bits: int = 64) -> float:
    """A pair's prompt's seeded draw in [0, 1): the first ``bits`` of sha256(``salt:prompt``)."""
    digest = hashlib.sha256(f"{salt}:{prompt_key(pair)}".encode()).digest()
    return int.from_bytes(digest[: bits // 8], "big") / 2**bits


def role_by_draw(draw: float, shares: Sequence[tuple[str, float]], rest: str = "train") -> str:
    """The first role whose cumulative share is above ``draw``; ``rest`` past them all."""
    edge = 0.0
    for role, share in shares:
        edge += share
        if draw < edge:
            return role
    return rest


def quota_share(draws: Sequence[tuple[float, int]], fraction: float) -> float:
    """The share that holds out ``fraction`` of the pairs, whole prompts at a time: the draw of
    the first prompt (in draw order) reached once ``round(fraction * pairs)`` are taken (1.0:
    every prompt). ``draws``: each prompt's draw and its number of pairs."""
    want = round(fraction * sum(n for _, n in draws))
    taken = 0
    for draw, n in sorted(draws):
        if taken >= want:
            return draw
        taken += n
    return 1.0


def make_split(sources: Sequence[SourcePairs], fraction: float, seed: int) -> dict[str, Any]:
    """Hold out ``fraction`` of each source's pairs, whole prompts at a time, in the order of a
    seeded draw of the prompt (a prompt's pairs go together, so a source may give a few more)."""
    if not 0 < fraction < 1:
        raise ValueError(f"fraction must be between 0 and 1, not {fraction}")
    held: list[dict[str, str]] = []
    counts: dict[str, dict[str, int]] = {}
    for source in sources:
        groups: dict[str, list[Pair]] = defaultdict(list)
        for pair in source.pairs:
            groups[prompt_key(pair)].append(pair)
        draws = {k: prompt_draw(g[0], str(seed)) for k, g in groups.items()}
        share = quota_share([(draws[k], len(g)) for k, g in groups.items()], fraction)
        taken = 0
        for key in sorted(groups, key=draws.__getitem__):
            if role_by_draw(draws[key], [("heldout", share)]) != "heldout":
                break
            for pair in groups[key]:
                held.append({"source": source.name, "id": pair.id, "sha256": pair_hash(pair)})
                taken += 1
        counts[source.name] = {"pairs": len(source.pairs), "held_out": taken}
    return {
        "what": "held-out pairs of the training pool: never trained on",
        "unit": "prompt (every pair of a held-out conversation is held out)",
        "fraction": fraction,
        "seed": seed,
        "sources": counts,
        "pairs": held,
    }


def held_out_keys(split: dict[str, Any], sources: Sequence[SourcePairs]) -> set[str]:
    """The prompt keys of the held-out pairs, after checking every named pair is in the data
    with the same content: a missing id or a changed hash is a SplitError naming it."""
    by_name = {s.name: {p.id: p for p in s.pairs} for s in sources}
    keys: set[str] = set()
    for entry in split["pairs"]:
        pairs = by_name.get(entry["source"])
        if pairs is None:
            continue  # a source not given to this run: nothing of it is trained on
        pair = pairs.get(entry["id"])
        if pair is None:
            raise SplitError(f"held-out pair {entry['source']}:{entry['id']} is not in the data")
        if pair_hash(pair) != entry["sha256"]:
            raise SplitError(
                f"held-out pair {entry['source']}:{entry['id']} has sha256 {pair_hash(pair)}, "
                f"the split records {entry['sha256']}: the data file changed"
            )
        keys.add(prompt_key(pair))
    return keys


def held_out_pairs(split: dict[str, Any], sources: Sequence[SourcePairs]) -> list[Pair]:
    """The held-out pairs themselves, checked as in ``held_out_keys``, in the split's order."""
    held_out_keys(split, sources)
    by_name = {s.name: {p.id: p for p in s.pairs} for s in sources}
    return [by_name[e["source"]][e["id"]] for e in split["pairs"] if e["source"] in by_name]


def training_pairs(split: dict[str, Any], sources: Iterable[SourcePairs]) -> list[Pair]:
    """Every pair whose prompt is not held out (in any source)."""
    sources = list(sources)
    keys = held_out_keys(split, sources)
    return [p for s in sources for p in s.pairs if prompt_key(p) not in keys]


def write_split(split: dict[str, Any], path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(split, indent=1, ensure_ascii=False) + "\n")


def read_split(path: Path) -> dict[str, Any]:
    return dict(json.loads(path.read_text()))


def load_or_make_split(
    path: Path, sources: Sequence[SourcePairs], fraction: float, seed: int
) -> tuple[dict[str, Any], bool]:
    """The split in ``path`` if the file exists, else one made (``fraction`` of each file's
    prompts held out) and written there; and whether it was made."""
    if path.is_file():
        return read_split(path), False
    split = make_split(sources, fraction, seed)
    write_split(split, path)
    return split, True
