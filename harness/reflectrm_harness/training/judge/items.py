"""The judge recipe's training items, shared by its steps (``sft``, ``verdict_layer``).

An item is one judging prompt, rendered exactly as the service renders it (the versioned
template, the same chat template, judged texts tokenized as plain text), followed by the target
the judge is trained to write: ``<Analysis>Response k is the better answer to the
user.</Analysis>`` + newline + ``<Result>Response k is better than Response j</Result>`` and the
end of turn. The analysis states the decision first, so one token (the ``k`` of the analysis,
the *decision*) decides; every pair is presented in both orders.
"""

from __future__ import annotations

import random
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from reflectrm.judging.prompts import (
    CRITIQUE_VERDICTS,
    RESPONSE_VERDICTS,
    TEMPLATE_VERSION,
    get_template,
    preference_chat,
    reflection_chat,
)
from reflectrm_harness.datasets import Pair


def analysis_text(kind: str, winner: int) -> str:
    """The analysis the judge is trained to write: its conclusion first, in one sentence."""
    if kind == "preference":
        return f"Response {winner} is the better answer to the user."
    return f"Critique {winner} reaches the right conclusion about the two responses."


def target_text(kind: str, winner: int) -> str:
    """The whole output after the generation prompt (the end of turn is added as a token)."""
    verdicts = RESPONSE_VERDICTS if kind == "preference" else CRITIQUE_VERDICTS
    analysis = analysis_text(kind, winner)
    return f"<Analysis>{analysis}</Analysis>\n<Result>{verdicts[winner - 1]}</Result>"


@dataclass(frozen=True)
class Item:
    """One training sequence: prompt ids, target ids, where the decision token is."""

    pair_id: str
    kind: str  # preference | reflection
    label: int  # the slot of the preferred response (or critique)
    prompt_ids: tuple[int, ...]
    target_ids: tuple[int, ...]
    decision: int  # index in target_ids of the token that names the winner
    other_id: int  # the token the decision would be for the other slot


@dataclass
class Tokenized:
    """Targets tokenized once: per kind and winner, and the decision position per kind."""

    targets: dict[tuple[str, int], tuple[int, ...]] = field(default_factory=dict)
    decision: dict[str, int] = field(default_factory=dict)


def tokenize_targets(tokenizer: Any) -> Tokenized:
    eos = tokenizer.eos_token_id
    if eos is None:
        raise ValueError("the tokenizer has no end-of-turn token to end the target with")
    out = Tokenized()
    for kind in ("preference", "reflection"):
        for winner in (1, 2):
            ids = tokenizer.encode(target_text(kind, winner), add_special_tokens=False)
            out.targets[(kind, winner)] = (*ids, eos)
        a, b = out.targets[(kind, 1)], out.targets[(kind, 2)]
        first = next(i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y)
        out.decision[kind] = first
    return out


def pair_items(
    pair: Pair,
    renderer: Any,
    tokens: Tokenized,
    template_version: str,
    rng: random.Random,
    with_reflection: bool,
) -> list[Item]:
    """A pair in both orders (and, with ``with_reflection``, its reflection item in both
    critique orders, the responses in one random order)."""
    template = get_template(template_version)
    items: list[Item] = []
    for chosen_at in (1, 2):
        responses, gold = pair.present(chosen_at)
        chat = preference_chat(template, pair.conversation, *responses)
        items.append(_item(pair.id, "preference", gold, renderer.render(chat).token_ids, tokens))
    if with_reflection:
        responses, gold = pair.present(1 if rng.random() < 0.5 else 2)
        right = analysis_text("preference", gold)
        wrong = analysis_text("preference", 3 - gold)
        for right_at in (1, 2):
            critiques = (right, wrong) if right_at == 1 else (wrong, right)
            chat = reflection_chat(template, pair.conversation, *responses, *critiques)
            ids = renderer.render(chat).token_ids
            items.append(_item(pair.id, "reflection", right_at, ids, tokens))
    return items


def _item(pair_id: str, kind: str, label: int, prompt: Sequence[int], t: Tokenized) -> Item:
    target = t.targets[(kind, label)]
    d = t.decision[kind]
    other = t.targets[(kind, 3 - label)][d]
    return Item(pair_id, kind, label, tuple(prompt), target, d, other)


def planned_pairs(
    pairs: Sequence[Pair],
    renderer: Any,
    tokens: Any,
    seed: int,
    max_pairs: int,
    max_prompt_tokens: int,
) -> Iterator[tuple[Pair, list[Any]]]:
    """The pairs of a states pass, in a seeded order, each with its judging items in both orders
    (``pair_items``): at most ``max_pairs``, those with a prompt longer than
    ``max_prompt_tokens`` left out."""
    order = list(pairs)
    random.Random(seed).shuffle(order)
    rng = random.Random(seed)
    used = 0
    for pair in order:
        if used >= max_pairs:
            return
        items = pair_items(pair, renderer, tokens, TEMPLATE_VERSION, rng, False)
        if any(len(i.prompt_ids) > max_prompt_tokens for i in items):
            continue
        used += 1
        yield pair, items


def source_of(pair_id: str) -> str:
    """The release a pool pair comes from: its id's first part (``hh-rlhf/harmless-base/...``)."""
    return pair_id.split("/", 1)[0]


def longer_slot(pair: Pair, chosen_at: int) -> int:
    """The slot of the longer response (by characters) when the chosen one is at ``chosen_at``;
    0 for equal lengths."""
    c, r = len(pair.chosen), len(pair.rejected)
    if c == r:
        return 0
    return chosen_at if c > r else 3 - chosen_at


def digit_ids(tokenizer: Any) -> tuple[int, int]:
    tokens = tokenize_targets(tokenizer)
    d = tokens.decision["preference"]
    return tokens.targets[("preference", 1)][d], tokens.targets[("preference", 2)][d]
