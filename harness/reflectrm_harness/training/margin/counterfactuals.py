"""Counterfactual pairs built from a pairs file, no other model needed: each pair's chosen reply
against (a) a reply written for another prompt, (b) a non-answer (a refusal, "I don't know.",
an evasion), (c) a truncated copy of itself, (d) a padded copy of itself (its first sentence
repeated at the end): longer but worse, so that (c) teaches no "longer wins", (e) a copy with one
of its numbers changed (a wrong answer of the same length and style).

    reflectrm train counterfactuals --pairs dev.jsonl --out dev-counterfactual.jsonl --per-kind 25

The non-answers are written here, in other words than the project's trap set
(evaluation/data/trap.jsonl), so that a fit on these pairs is not a fit on the trap.
"""

from __future__ import annotations

import json
import random
import re
from collections.abc import Sequence
from pathlib import Path

from reflectrm_harness.datasets import read_rows, write_rows

NON_ANSWERS = (
    "Unfortunately I cannot provide an answer to this.",
    "I'm not sure about that one.",
    "That's a good question, and there are many ways to look at it.",
    "I would rather not get into that.",
    "You might want to ask someone else about this.",
    "Hmm, hard to say.",
    "I have no idea, sorry.",
    "This is not something I can answer.",
)
KINDS = ("other_prompt", "non_answer", "truncated", "padded", "wrong_number")
_SENTENCE = re.compile(r"(?<=[.!?])\s+")
_NUMBER = re.compile(r"(?<![\w.])\d{1,4}(?![\w.])")


def wrong_number(text: str, rng: random.Random) -> str | None:
    """The reply with one of its numbers (1 to 4 digits, not part of a word or decimal) moved
    by 1 to 3, keeping its digit count where it can; None when it holds no number."""
    found = list(_NUMBER.finditer(text))
    if not found:
        return None
    m = rng.choice(found)
    value = int(m.group())
    other = value + rng.choice((-3, -2, -1, 1, 2, 3))
    if other < 0 or len(str(other)) != len(m.group()):
        other = value + 1 if len(str(value + 1)) == len(m.group()) else value - 1
    if other < 0:
        return None
    return text[: m.start()] + str(other) + text[m.end() :]


def truncated(text: str) -> str | None:
    """The first third of the reply's words, cut mid-thought; None when too short to cut."""
    words = text.split()
    if len(words) < 24:
        return None
    return " ".join(words[: len(words) // 3])


def padded(text: str) -> str | None:
    """The reply with its first sentence said again, twice, at the end: longer, worse."""
    first = _SENTENCE.split(text.strip(), maxsplit=1)[0]
    if len(first) < 20 or first == text.strip():
        return None
    return f"{text.strip()}\n\n{first} {first}"


def _prompt_of(row: dict) -> str:
    return json.dumps(row.get("messages") or row.get("prompt"), sort_keys=True)


def build(rows: list[dict], per_kind: int, seed: int, kinds: tuple[str, ...] = KINDS) -> list[dict]:
    rng = random.Random(seed)
    order = list(range(len(rows)))
    out: list[dict] = []
    for kind in kinds:
        rng.shuffle(order)
        made = 0
        for i in order:
            if made >= per_kind:
                break
            row = rows[i]
            chosen = str(row["chosen"])
            if kind == "other_prompt":
                # another prompt's reply: never one of the same prompt's other pairs (a
                # HelpSteer2 prompt has several), which would answer this prompt too
                asked = _prompt_of(row)
                other = rows[rng.choice([k for k in order if _prompt_of(rows[k]) != asked])]
                rejected: str | None = str(other["chosen"])
            elif kind == "non_answer":
                rejected = rng.choice(NON_ANSWERS)
            elif kind == "truncated":
                rejected = truncated(chosen)
            elif kind == "wrong_number":
                rejected = wrong_number(chosen, rng)
            else:
                rejected = padded(chosen)
            if not rejected or rejected == chosen:
                continue
            new = {k: v for k, v in row.items() if k in ("prompt", "messages")}
            new.update(
                id=f"{row.get('source', '')}/{row['id']}/{kind}",
                source="counterfactual",
                subset=kind,
                chosen=chosen,
                rejected=rejected,
            )
            out.append(new)
            made += 1
    return out


def write_counterfactuals(
    pairs: Path,
    out: Path,
    per_kind: int,
    seed: int,
    sources: Sequence[str] = (),
    kinds: Sequence[str] = (),
) -> int:
    """``build`` on the rows of ``pairs`` (of ``sources`` only, when given; every kind unless
    ``kinds``), written to ``out`` as JSONL; how many pairs."""
    rows = [r for _, r in read_rows(pairs)]
    if sources:
        rows = [r for r in rows if r.get("source") in sources]
    return write_rows(build(rows, per_kind, seed, tuple(kinds) or KINDS), out)
