"""Counterfactual pairs for the GRPO recipe whose length and position carry no signal.

Each pair is a dataset's chosen reply against one of three kinds of worse reply:

- ``non_answer``: a non-answer composed from one wording *family* (flat refusals, hedges,
  padded apologies, restatements of the question, "that hinges on things" evasions, redirections
  to an expert, deferrals). A family has several opening wordings and many filler sentences, so
  its non-answers come in every length: in half of the pairs the non-answer is longer than the
  chosen reply (filler added past the reply's length), in the other half shorter. Families are
  split: a training split draws only from ``TRAIN_FAMILIES``, a held-out split only from
  ``HELDOUT_FAMILIES``, and no wording is shared between the two or with the evaluation set's
  trap pairs (harness/tests/unit/test_grpo_pairs.py checks both).
- ``other_prompt``: the chosen reply of another prompt, the one nearest in length to this
  pair's chosen reply (the nearest longer one in half of the pairs, the nearest shorter one in
  the other half).
- ``truncated_padded``: a truncated copy of the chosen reply (shorter, cut mid-thought) in half
  of the pairs and a padded copy (its own sentences said again: longer) in the other half.

Length is counted in characters, and a pair is kept only when its replies differ the same way
counted in words (and in tokens, given a tokenizer: ``--tokenizer``). Within every kind exactly
half of the pairs have the longer reply chosen, so "the longer reply is better" scores 50% on
each kind by every count; when a kind cannot fill both halves equally (too few rows, or an odd
count asked) the extra pairs of the fuller half are dropped and the counts say so. Which
position the chosen reply is shown in is build-data's choice (half in each). The output rows
have the shared schema (``reflectrm_harness.datasets``) with ``source: "counterfactual"``,
``subset`` (the kind), ``family`` (non-answers), ``variant`` (truncated or padded), ``split``,
``chosen_longer`` and ``origin`` (the row's own source); the same rows, seed and options always
give the same pairs.

    reflectrm train grpo-pairs --pairs train-pool.jsonl --out train-pairs.jsonl --split train \\
        --per-kind 120
"""

from __future__ import annotations

import argparse
import functools
import json
import math
import random
import re
import sys
from bisect import bisect_left, bisect_right
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import product
from pathlib import Path
from typing import Any

from reflectrm_harness.datasets import read_rows

KINDS = ("non_answer", "other_prompt", "truncated_padded")
SPLITS = ("train", "heldout")
SOURCE = "counterfactual"
QUESTION = "{question}"
_SENTENCE = re.compile(r"(?<=[.!?])\s+")
Measure = Callable[[str], int]


@dataclass(frozen=True)
class Family:
    """One way of not answering: opening wordings (one of which may quote the question with
    ``{question}``) and filler sentences, each a lead-in and a body (an empty lead-in
    capitalises the body), to pad a non-answer to any length."""

    name: str
    openings: tuple[str, ...]
    leads: tuple[str, ...]
    bodies: tuple[str, ...]
    fillers: tuple[str, ...] = field(init=False)

    def __post_init__(self) -> None:
        made = tuple(
            f"{lead} {body}" if lead else body[:1].upper() + body[1:]
            for lead, body in product(self.leads, self.bodies)
        )
        object.__setattr__(self, "fillers", made)

    def wordings(self) -> tuple[str, ...]:
        """Every fixed piece of text this family writes (the question it may quote aside)."""
        return (*self.openings, *self.leads, *self.bodies, *self.fillers)


FAMILIES: dict[str, Family] = {
    f.name: f
    for f in (
        # --- training families ------------------------------------------------------------
        Family(
            "flat_refusal",
            openings=(
                "I won't be taking this one on.",
                "This request is outside what I'll answer.",
                "I'm declining this request.",
                "No, I'll pass on this.",
                "That's a request I have to turn down.",
                "I'd prefer to stay out of this one.",
            ),
            leads=("", "Once more,", "Plainly put,", "To repeat,"),
            bodies=(
                "my answer here is no.",
                "I'm going to leave it there.",
                "this stays off the table for me.",
                "there's nothing further I'll add on the subject.",
                "my position on this won't change.",
                "I'll be keeping out of this topic.",
            ),
        ),
        Family(
            "hedge",
            openings=(
                "There could be a few answers here, and I'd hate to pick the wrong one.",
                "I'd be guessing if I tried to answer this.",
                "Perhaps, though I can't be certain either way.",
                "I can't be confident about this one.",
                "That might be so, or it might not.",
            ),
            leads=("", "Then again,", "On the other hand,", "At the same time,"),
            bodies=(
                "some people would see it one way and others another.",
                "there are arguments pointing in more than one direction.",
                "committing to a firm position seems unwise.",
                "the details could shift the picture quite a bit.",
                "reasonable people disagree about this kind of thing.",
                "any single answer would be an oversimplification.",
                "what holds in one case may not hold in the next.",
            ),
        ),
        Family(
            "padded_refusal",
            openings=(
                "My apologies, this falls outside what I can offer.",
                "Regrettably, I must decline to respond here.",
                "Apologies, but a response to this isn't something I'm permitted to give.",
                "I regret that I can't take up this request.",
            ),
            leads=(
                "",
                "Please note that",
                "As a matter of policy,",
                "In keeping with my guidelines,",
            ),
            bodies=(
                "there are rules limiting the topics I engage with.",
                "those guidelines exist to keep conversations safe and appropriate.",
                "I regret any inconvenience this may cause.",
                "I am unable to make exceptions to this.",
                "the same limits apply to everyone who asks.",
                "this decision is not a judgment of you or your request.",
                "I am required to follow these policies in every conversation.",
            ),
        ),
        Family(
            "restatement",
            openings=(
                "You're asking: {question}",
                "So the question is: {question}",
                "Let me make sure I have this: {question}",
                "If I follow, what you want to know is this: {question}",
            ),
            leads=("", "Put another way,", "In short,", "Restated,"),
            bodies=(
                "that's the heart of what you're asking.",
                "it's a question worth taking seriously.",
                "many people wonder about the same thing.",
                "getting the question clear is the first step.",
                "the question itself is a good one to pose.",
                "that is precisely the point you want addressed.",
            ),
        ),
        # --- held-out families ------------------------------------------------------------
        Family(
            "conditional_evasion",
            openings=(
                "That hinges on a lot of factors.",
                "The answer changes with the situation.",
                "Circumstances differ, so there's no single answer.",
                "Whether that holds comes down to particulars.",
                "No blanket answer fits every case here.",
            ),
            leads=("", "Of course,", "Naturally,", "Keep in mind that"),
            bodies=(
                "your situation might not match anyone else's.",
                "context matters a great deal with questions like this.",
                "what works for one case can fail in another.",
                "the relevant factors vary widely.",
                "conditions shift, and so would the answer.",
                "one size rarely fits all in these matters.",
            ),
        ),
        Family(
            "redirect",
            openings=(
                "An expert in this area is the person to consult.",
                "A specialist could walk you through this properly.",
                "Consider checking with a professional who knows the field.",
                "For a question like \u201c{question}\u201d, a qualified professional is your best "
                "resource.",
            ),
            leads=("", "In general,", "Usually,", "In most cases,"),
            bodies=(
                "a specialist can look at the particulars of your case.",
                "professional guidance is worth it for questions like these.",
                "someone with hands-on experience will give a fuller picture.",
                "a knowledgeable person can account for things I'd miss.",
                "an experienced practitioner is better placed to weigh in.",
                "reaching out to someone trained in this is the wise move.",
            ),
        ),
        Family(
            "deferral",
            openings=(
                "Let's come back to this another time.",
                "I'll leave this for a later conversation.",
                "We can revisit this down the line.",
                "This one will have to wait for now.",
            ),
            leads=("", "For the moment,", "At this point,", "As things stand,"),
            bodies=(
                "there's a lot to get through first.",
                "the timing isn't ideal for going into it.",
                "we can pick up this thread when things settle.",
                "it makes sense to hold off before getting into it.",
                "a future discussion would suit this better.",
                "we'll have more room to dig in on another occasion.",
            ),
        ),
    )
}
TRAIN_FAMILIES = ("flat_refusal", "hedge", "padded_refusal", "restatement")
HELDOUT_FAMILIES = ("conditional_evasion", "redirect", "deferral")
SPLIT_FAMILIES = {"train": TRAIN_FAMILIES, "heldout": HELDOUT_FAMILIES}


def families(split: str) -> tuple[Family, ...]:
    if split not in SPLIT_FAMILIES:
        raise ValueError(f"split must be one of {', '.join(SPLITS)}, not {split!r}")
    return tuple(FAMILIES[name] for name in SPLIT_FAMILIES[split])


# --- the rows ---------------------------------------------------------------------------------


def last_user_message(row: Mapping[str, Any]) -> str:
    messages = row.get("messages")
    if messages:
        users = [str(m.get("content", "")) for m in messages if m.get("role") == "user"]
        return users[-1] if users else ""
    return str(row.get("prompt") or "")


def prompt_key(row: Mapping[str, Any]) -> str:
    return json.dumps(row.get("messages") or row.get("prompt"), sort_keys=True)


def _quote(question: str, budget: int) -> str:
    """The question on one line, cut at a word to ``budget`` characters (with an ellipsis)."""
    text = " ".join(question.split())
    if text and text[-1] not in ".?!\u2026\"'":
        text += "."
    if len(text) <= budget:
        return text
    cut = text[: max(budget - 1, 0)].rsplit(" ", 1)[0]
    return f"{cut}\u2026" if cut else ""


# --- non-answers ------------------------------------------------------------------------------


def non_answer(
    family: Family, question: str, length: int, longer: bool, rng: random.Random
) -> str | None:
    """A non-answer of ``family`` longer (or shorter) than ``length`` characters; None when even
    its shortest opening is not shorter. A longer one runs past a target 10 to 60% over
    ``length`` (a quoted question can take it further); a shorter one stays within 35 to 90% of
    it (or is just its opening when that is all that fits)."""
    if longer:
        target = math.ceil(length * rng.uniform(1.1, 1.6))
    else:
        target = math.floor(length * rng.uniform(0.35, 0.9))
    text = _opening(family, question, length, target, longer, rng)
    if text is None:
        return None
    for sentence in _fillers(family, rng, rounds=None if longer else 1):
        nxt = f"{text} {sentence}"
        if longer:
            text = nxt
            if len(text) > max(target, length):
                break
        elif len(nxt) <= target:
            text = nxt
    if longer and len(text) <= length:
        return None
    if not longer and len(text) >= length:
        return None
    return text


def _opening(
    family: Family, question: str, length: int, target: int, longer: bool, rng: random.Random
) -> str | None:
    """One of the family's openings at random; for a shorter non-answer the first that fits
    under ``length``. The question, where an opening quotes it, is cut to ``target``."""
    openings = list(family.openings)
    rng.shuffle(openings)
    if not longer:
        openings.sort(key=lambda o: len(o.replace(QUESTION, "")) >= min(target, length - 1))
    for opening in openings:
        candidate = opening
        if QUESTION in opening:
            budget = target - (len(opening) - len(QUESTION))
            quoted = _quote(question, budget) if budget >= 12 else ""
            if not quoted:
                continue
            candidate = opening.replace(QUESTION, quoted)
        if longer or len(candidate) < length:
            return candidate
    return None


def _fillers(family: Family, rng: random.Random, rounds: int | None) -> Iterator[str]:
    """The family's filler sentences in rounds (all of them when ``rounds`` is None): each round
    says every body once, in a random order, each after a random lead-in."""
    done = 0
    while rounds is None or done < rounds:
        bodies = list(family.bodies)
        rng.shuffle(bodies)
        for body in bodies:
            lead = rng.choice(family.leads)
            yield f"{lead} {body}" if lead else body[:1].upper() + body[1:]
        done += 1


# --- truncated and padded copies ------------------------------------------------------------


def truncated(text: str, rng: random.Random) -> str | None:
    """The reply's first 30 to 70% of words, cut mid-thought; None when under 12 words."""
    words = text.split()
    if len(words) < 12:
        return None
    keep = max(4, round(len(words) * rng.uniform(0.3, 0.7)))
    cut = " ".join(words[:keep]).rstrip(".!?")
    return cut if len(cut) < len(text) else None


def padded(text: str, rng: random.Random) -> str | None:
    """The reply followed by its own sentences said again, from a random one on, until it is 20
    to 80% longer: the same content, worse; None when under 12 words."""
    body = text.strip()
    if len(body.split()) < 12:
        return None
    sentences = [s for s in _SENTENCE.split(body) if s.strip()]
    target = math.ceil(len(body) * rng.uniform(1.2, 1.8))
    out = body
    i = rng.randrange(len(sentences))
    while len(out) < target:
        out = f"{out} {sentences[i % len(sentences)]}"
        i += 1
    return out if len(out) > len(text) else None


# --- building -------------------------------------------------------------------------------


@dataclass
class KindCount:
    """What one kind gave: pairs kept with the chosen reply longer and shorter, and how many
    were dropped to keep the two equal."""

    chosen_longer: int = 0
    chosen_shorter: int = 0
    dropped_to_balance: int = 0

    @property
    def pairs(self) -> int:
        return self.chosen_longer + self.chosen_shorter


def _other_prompt_index(rows: Sequence[Mapping[str, Any]]) -> tuple[list[int], list[int]]:
    """The chosen replies' lengths, sorted, and the row of each."""
    order = sorted(range(len(rows)), key=lambda i: (len(str(rows[i]["chosen"])), i))
    return [len(str(rows[i]["chosen"])) for i in order], order


def other_prompt(
    rows: Sequence[Mapping[str, Any]],
    index: tuple[list[int], list[int]],
    i: int,
    longer: bool,
    measures: Mapping[str, Measure] | None = None,
) -> str | None:
    """The chosen reply of another prompt nearest in length to row ``i``'s: the nearest strictly
    longer one (``longer``) or strictly shorter one, in characters and by every other measure;
    None when there is none."""
    lengths, order = index
    chosen = str(rows[i]["chosen"])
    asked = prompt_key(rows[i])
    n = len(chosen)
    if longer:
        positions: Iterable[int] = range(bisect_right(lengths, n), len(order))
    else:
        positions = range(bisect_left(lengths, n) - 1, -1, -1)
    for p in positions:
        other = rows[order[p]]
        text = str(other["chosen"])
        differs = prompt_key(other) != asked and text.strip() != chosen.strip()
        if differs and same_order(chosen, text, measures):
            return text
    return None


def word_count(text: str) -> int:
    return len(text.split())


MEASURES: dict[str, Measure] = {"chars": len, "words": word_count}


def same_order(chosen: str, rejected: str, measures: Mapping[str, Measure] | None = None) -> bool:
    """Whether the two replies differ in length the same way by every measure (characters,
    words and any other, e.g. a tokenizer's tokens), none equal: a pair is kept only then, so
    that the length rule scores the same by each."""
    chars = len(chosen) - len(rejected)
    return chars != 0 and all(
        (size(chosen) - size(rejected)) * chars > 0 for size in (measures or MEASURES).values()
    )


def _pair(
    row: Mapping[str, Any], kind: str, rejected: str, split: str, **extra: str
) -> dict[str, Any]:
    chosen = str(row["chosen"])
    new: dict[str, Any] = {k: row[k] for k in ("messages", "prompt") if row.get(k)}
    origin = str(row.get("source") or row.get("benchmark") or "")
    new.update(
        id=f"{origin}/{row['id']}/{kind}",
        source=SOURCE,
        subset=kind,
        **extra,
        split=split,
        origin=origin,
        chosen=chosen,
        rejected=rejected,
        chosen_longer=len(chosen) > len(rejected),
    )
    return new


def build_kind(
    rows: Sequence[Mapping[str, Any]],
    kind: str,
    per_kind: int,
    split: str,
    rng: random.Random,
    measures: Mapping[str, Measure] | None = None,
) -> tuple[list[dict[str, Any]], KindCount]:
    """Up to ``per_kind`` pairs of one kind (rounded down to even), half with the chosen reply
    longer by every measure; a half that cannot be filled takes the other down to its size."""
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {', '.join(KINDS)}, not {kind!r}")
    half = per_kind // 2
    order = list(range(len(rows)))
    rng.shuffle(order)
    fams = families(split)
    index = _other_prompt_index(rows) if kind == "other_prompt" else ([], [])
    made: dict[bool, list[dict[str, Any]]] = {True: [], False: []}
    turn = 0
    for i in order:
        if len(made[True]) >= half and len(made[False]) >= half:
            break
        row = rows[i]
        chosen = str(row["chosen"])
        if not chosen.strip():
            continue
        # the rejected reply longer (chosen shorter) on alternate rows, the other way when
        # that half is full or this row cannot give it
        first = turn % 2 == 0
        for rejected_longer in (first, not first):
            if len(made[not rejected_longer]) >= half:
                continue
            pair = _make(row, kind, rejected_longer, split, fams, rows, (index, i), rng, measures)
            if pair is not None and same_order(pair["chosen"], pair["rejected"], measures):
                made[pair["chosen_longer"]].append(pair)
                turn += 1
                break
    keep = min(len(made[True]), len(made[False]), half)
    count = KindCount(
        chosen_longer=keep,
        chosen_shorter=keep,
        dropped_to_balance=len(made[True]) + len(made[False]) - 2 * keep,
    )
    pairs = made[True][:keep] + made[False][:keep]
    rng.shuffle(pairs)
    return pairs, count


def _make(
    row: Mapping[str, Any],
    kind: str,
    rejected_longer: bool,
    split: str,
    fams: Sequence[Family],
    rows: Sequence[Mapping[str, Any]],
    at: tuple[tuple[list[int], list[int]], int],
    rng: random.Random,
    measures: Mapping[str, Measure] | None,
) -> dict[str, Any] | None:
    chosen = str(row["chosen"])
    if kind == "non_answer":
        family = rng.choice(fams)
        text = non_answer(family, last_user_message(row), len(chosen), rejected_longer, rng)
        return None if text is None else _pair(row, kind, text, split, family=family.name)
    if kind == "other_prompt":
        text = other_prompt(rows, at[0], at[1], rejected_longer, measures)
        return None if text is None else _pair(row, kind, text, split)
    variant = "padded" if rejected_longer else "truncated"
    text = (padded if rejected_longer else truncated)(chosen, rng)
    return None if text is None else _pair(row, kind, text, split, variant=variant)


def build_pairs(
    rows: Sequence[Mapping[str, Any]],
    per_kind: int,
    split: str,
    seed: int = 0,
    kinds: Sequence[str] = KINDS,
    measures: Mapping[str, Measure] | None = None,
) -> tuple[list[dict[str, Any]], dict[str, KindCount]]:
    """Every asked kind's pairs, in kind order, and each kind's counts. Deterministic for the
    rows (in their order), ``per_kind``, ``split``, ``seed``, ``kinds`` and ``measures`` (of
    length, whose orders must agree in every pair: default characters and words)."""
    families(split)  # a bad split fails here
    rng = random.Random(seed)
    out: list[dict[str, Any]] = []
    counts: dict[str, KindCount] = {}
    for kind in kinds:
        pairs, counts[kind] = build_kind(rows, kind, per_kind, split, rng, measures)
        out.extend(pairs)
    return out, counts


def length_rule_score(pairs: Iterable[Mapping[str, Any]], size: Measure = len) -> dict[str, float]:
    """Per kind, the share of pairs on which "the longer reply is better" is right, length by
    ``size`` (default characters); a tie counts half."""
    right: dict[str, float] = {}
    total: dict[str, int] = {}
    for p in pairs:
        kind = str(p.get("subset", ""))
        c, r = size(str(p["chosen"])), size(str(p["rejected"]))
        right[kind] = right.get(kind, 0.0) + (1.0 if c > r else 0.5 if c == r else 0.0)
        total[kind] = total.get(kind, 0) + 1
    return {k: right[k] / total[k] for k in total}


# --- the command ------------------------------------------------------------------------------


def add_command(commands: Any) -> argparse.ArgumentParser:
    """Register ``grpo-pairs`` on an argparse subparsers object."""
    p = commands.add_parser(
        "grpo-pairs",
        help="counterfactual pairs for GRPO whose length and position predict nothing",
        description=(__doc__ or "").split("\n\n")[0],
    )
    p.add_argument("--pairs", required=True, type=Path, help="shared-schema JSONL(.gz) file")
    p.add_argument("--out", required=True, type=Path, help="output JSONL file")
    p.add_argument(
        "--split",
        choices=SPLITS,
        default="train",
        help="which non-answer families to draw from (train: "
        f"{', '.join(TRAIN_FAMILIES)}; heldout: {', '.join(HELDOUT_FAMILIES)})",
    )
    p.add_argument(
        "--per-kind", type=int, default=120, help="pairs per kind (rounded down to even)"
    )
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--kind",
        action="append",
        choices=KINDS,
        default=[],
        help="only this kind (repeatable); default every kind",
    )
    p.add_argument(
        "--tokenizer",
        help="a tokenizer (hub id or folder) whose token counts must order each pair's replies "
        "as characters and words do (e.g. the model to be trained)",
    )
    p.set_defaults(func=run_command)
    return p


def run_command(args: argparse.Namespace) -> int:
    if args.per_kind < 2:
        raise ValueError("--per-kind must be at least 2 (one pair of each length order)")
    rows = [row for _, row in read_rows(args.pairs)]
    measures = dict(MEASURES)
    if args.tokenizer:
        measures["tokens"] = token_counter(args.tokenizer)
    kinds = args.kind or KINDS
    pairs, counts = build_pairs(rows, args.per_kind, args.split, args.seed, kinds, measures)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    with args.out.open("w", encoding="utf-8") as f:
        for row in pairs:
            f.write(json.dumps(row, ensure_ascii=False) + "\n")
    report = summary(pairs, counts, args.per_kind, measures)
    sys.stdout.write(json.dumps(report, indent=2) + "\n")
    sys.stdout.write(f"{len(pairs)} pairs from {len(rows)} rows written to {args.out}\n")
    return 0


def token_counter(name: str) -> Measure:
    """A tokenizer's token count (no special tokens), remembered per text."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(name)

    @functools.cache
    def count(text: str) -> int:
        return len(tokenizer.encode(text, add_special_tokens=False))

    return count


def summary(
    pairs: Sequence[Mapping[str, Any]],
    counts: Mapping[str, KindCount],
    per_kind: int,
    measures: Mapping[str, Measure] | None = None,
) -> dict[str, Any]:
    """Per kind: pairs, how many have the chosen reply longer and shorter, those dropped to keep
    them equal, and the length rule's score (% right) by each measure of length."""
    scores = {name: length_rule_score(pairs, size) for name, size in (measures or MEASURES).items()}
    return {
        kind: {
            "pairs": c.pairs,
            "asked": per_kind - per_kind % 2,
            "chosen_longer": c.chosen_longer,
            "chosen_shorter": c.chosen_shorter,
            "dropped_to_balance": c.dropped_to_balance,
            "length_rule_pct": {
                name: round(100 * score[kind], 1) for name, score in scores.items() if kind in score
            },
        }
        for kind, c in counts.items()
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m reflectrm_harness.training.grpo.pairs")
    add_command(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["grpo-pairs", *(sys.argv[1:] if argv is None else argv)])
    return int(args.func(args))


if __name__ == "__main__":
    raise SystemExit(main())
