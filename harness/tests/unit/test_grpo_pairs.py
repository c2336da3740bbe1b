"""The GRPO recipe's counterfactual pairs (training/grpo/pairs.py): split non-answer families,
no trap wording, half of every kind's pairs with the chosen reply longer, deterministic."""

from __future__ import annotations

import argparse
import gzip
import itertools
import json
import random
import re
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from reflectrm_harness.datasets import pair_from_row
from reflectrm_harness.evaluation.data import TRAP
from reflectrm_harness.training.grpo import pairs as gp
from support.prerequisites import require_shared_data  # ../shared/data beside the repo

NGRAM = 4  # a shared run of this many words is a shared wording

WORDS = re.findall(
    r"\w+",
    "the a water light garden river stone market engine letter window music paper bridge "
    "winter summer coffee table signal number code system answer method result value",
)


def synthetic_rows(n: int = 240, seed: int = 7) -> list[dict[str, Any]]:
    """Rows of the shared schema with replies from one sentence to many paragraphs."""
    rng = random.Random(seed)
    rows = []
    for i in range(n):
        sentences = [
            " ".join(rng.choice(WORDS) for _ in range(rng.randint(6, 16))).capitalize() + "."
            for _ in range(rng.choice((1, 2, 3, 5, 8, 15, 30)))
        ]
        question = f"Question {i}: how does the {rng.choice(WORDS)} affect the {rng.choice(WORDS)}?"
        row: dict[str, Any] = {
            "id": i,
            "source": "synthetic",
            "chosen": " ".join(sentences),
            "rejected": "a worse reply",
        }
        if i % 2:
            row["messages"] = [{"role": "user", "content": question}]
        else:
            row["prompt"] = question
        rows.append(row)
    return rows


def words(text: str) -> list[str]:
    return re.findall(r"[a-z0-9']+", text.casefold().replace("\u2019", "'"))


def ngrams(text: str, n: int = NGRAM) -> set[tuple[str, ...]]:
    w = words(text)
    return {tuple(w[i : i + n]) for i in range(len(w) - n + 1)}


def contains(text: str, part: str) -> bool:
    """``part``'s words appear, in a row, among ``text``'s."""
    t, p = words(text), words(part)
    return bool(p) and any(t[i : i + len(p)] == p for i in range(len(t) - len(p) + 1))


def trap_rejected() -> list[str]:
    with TRAP.open(encoding="utf-8") as f:
        return [json.loads(line)["rejected"] for line in f if line.strip()]


def split_wordings(split: str) -> list[str]:
    return [
        w.replace(gp.QUESTION, " ") for f in gp.families(split) for w in f.wordings() if w.strip()
    ]


def non_answers(split: str) -> list[dict[str, Any]]:
    made, _ = gp.build_pairs(synthetic_rows(), 100, split, seed=3, kinds=("non_answer",))
    return made


# --- (a) families split ------------------------------------------------------------------------


def test_training_and_heldout_families_are_disjoint_and_cover_every_family() -> None:
    assert not set(gp.TRAIN_FAMILIES) & set(gp.HELDOUT_FAMILIES)
    assert set(gp.TRAIN_FAMILIES) | set(gp.HELDOUT_FAMILIES) == set(gp.FAMILIES)
    for split, names in (("train", gp.TRAIN_FAMILIES), ("heldout", gp.HELDOUT_FAMILIES)):
        assert {p["family"] for p in non_answers(split)} == set(names)


def test_no_wording_is_shared_between_the_splits() -> None:
    train, heldout = split_wordings("train"), split_wordings("heldout")
    leads = {w for f in gp.FAMILIES.values() for w in f.leads if w}
    assert not {w.casefold() for w in train} & {w.casefold() for w in heldout}
    for a, b in itertools.product(train, heldout):
        assert not ngrams(a) & ngrams(b), (a, b)
        # whole openings and bodies (not the short lead-ins) never appear inside each other
        if a not in leads and b not in leads:
            assert not contains(a, b), (a, b)
            assert not contains(b, a), (a, b)
    # and so the built non-answers of one split share no 4-word run with the other's wordings
    heldout_grams = set().union(*map(ngrams, heldout))
    for pair in non_answers("train"):
        question = words(gp.last_user_message(pair))
        grams = {g for g in ngrams(pair["rejected"]) if not set(g) <= set(question)}
        assert not grams & heldout_grams, pair["rejected"]


def test_a_split_other_than_train_or_heldout_is_refused() -> None:
    with pytest.raises(ValueError, match="split"):
        gp.build_pairs(synthetic_rows(10), 2, "test")


# --- (b) the length rule scores chance on every kind ------------------------------------------


def assert_balanced(made: list[dict[str, Any]], counts: dict[str, gp.KindCount]) -> None:
    score = gp.length_rule_score(made)
    by_words = gp.length_rule_score(made, gp.word_count)
    for kind, count in counts.items():
        mine = [p for p in made if p["subset"] == kind]
        assert mine
        assert len(mine) == count.pairs
        assert len(mine) % 2 == 0
        assert sum(p["chosen_longer"] for p in mine) == len(mine) // 2
        assert all(len(p["chosen"]) != len(p["rejected"]) for p in mine)
        assert 0.45 <= score[kind] <= 0.55, (kind, score[kind])
        assert 0.45 <= by_words[kind] <= 0.55, (kind, by_words[kind])
        assert all(gp.same_order(p["chosen"], p["rejected"]) for p in mine)


def test_the_length_rule_scores_half_on_every_kind_of_synthetic_pairs() -> None:
    for split in gp.SPLITS:
        made, counts = gp.build_pairs(synthetic_rows(), 60, split)
        assert {k: c.pairs for k, c in counts.items()} == dict.fromkeys(gp.KINDS, 60)
        assert_balanced(made, counts)
        assert gp.length_rule_score(made) == dict.fromkeys(gp.KINDS, 0.5)
        assert gp.length_rule_score(made, gp.word_count) == dict.fromkeys(gp.KINDS, 0.5)


def test_the_length_rule_scores_half_on_every_kind_of_a_real_training_file() -> None:
    path = require_shared_data("train", "helpsteer2_ratings_pairs.jsonl.gz")
    with gzip.open(path, "rt", encoding="utf-8") as f:
        rows = [json.loads(line) for line in itertools.islice(f, 400)]
    made, counts = gp.build_pairs(rows, 120, "train")
    assert {k: c.pairs for k, c in counts.items()} == dict.fromkeys(gp.KINDS, 120)
    assert_balanced(made, counts)


def test_a_kind_that_cannot_fill_both_halves_drops_the_extra() -> None:
    # replies of a few words: no non-answer is shorter, no copy can be cut or padded
    rows = synthetic_rows(40)
    for row in rows[:30]:
        row["chosen"] = "Yes, it does."
    made, counts = gp.build_pairs(rows, 40, "train")
    assert_balanced(made, {k: c for k, c in counts.items() if c.pairs})
    na = counts["non_answer"]
    assert na.chosen_longer == na.chosen_shorter < 20
    assert na.dropped_to_balance > 0
    assert counts["truncated_padded"].pairs == 10  # the 10 long rows, 5 cut and 5 padded


def test_every_measure_of_length_orders_each_pair_alike() -> None:
    """A third measure (as a tokenizer's token count would be): every kept pair is ordered alike
    by it, and the length rule scores half by it too."""

    def letters_e(text: str) -> int:  # a measure that disagrees with characters now and then
        return text.count("e") + len(text) // 10

    measures = {**gp.MEASURES, "e": letters_e}
    made, counts = gp.build_pairs(synthetic_rows(), 40, "train", measures=measures)
    assert all(c.pairs == 40 for c in counts.values())
    assert all(gp.same_order(p["chosen"], p["rejected"], measures) for p in made)
    assert gp.length_rule_score(made, letters_e) == dict.fromkeys(gp.KINDS, 0.5)
    assert not gp.same_order("ab cd", "abcdef")  # longer in characters, shorter in words


def test_an_odd_count_is_rounded_down_to_even() -> None:
    made, counts = gp.build_pairs(synthetic_rows(), 7, "train")
    assert all(c.pairs == 6 for c in counts.values())
    assert_balanced(made, counts)


# --- what each kind is -------------------------------------------------------------------------


def test_other_prompt_pairs_take_the_nearest_length_reply_of_another_prompt() -> None:
    rows = synthetic_rows()
    made, _ = gp.build_pairs(rows, 60, "train", kinds=("other_prompt",))
    by_chosen = {r["chosen"]: r for r in rows}
    for pair in made:
        assert pair["rejected"] in by_chosen
        assert gp.prompt_key(by_chosen[pair["rejected"]]) != gp.prompt_key(pair)
        c, r = len(pair["chosen"]), len(pair["rejected"])
        # no reply of another prompt, longer or shorter in words alike, of a length in between
        between = [
            x["chosen"]
            for x in rows
            if min(c, r) < len(x["chosen"]) < max(c, r)
            and gp.prompt_key(x) != gp.prompt_key(pair)
            and x["chosen"].strip() != pair["chosen"].strip()
            and gp.same_order(pair["chosen"], x["chosen"])
        ]
        assert between == [], (c, r)


def test_truncated_and_padded_copies_come_in_equal_numbers() -> None:
    made, _ = gp.build_pairs(synthetic_rows(), 60, "train", kinds=("truncated_padded",))
    assert Counter(p["variant"] for p in made) == {"truncated": 30, "padded": 30}
    for p in made:
        if p["variant"] == "truncated":
            assert p["chosen"].startswith(p["rejected"])
            assert p["chosen_longer"]
        else:
            assert p["rejected"].startswith(p["chosen"])
            assert not p["chosen_longer"]


def test_non_answers_come_in_many_lengths_and_half_are_longer() -> None:
    made = non_answers("train")
    ratios = [len(p["rejected"]) / len(p["chosen"]) for p in made]
    assert sum(r > 1 for r in ratios) == sum(r < 1 for r in ratios) == 50
    assert len({len(p["rejected"]) for p in made}) > 60


def test_rows_are_shared_schema_rows_with_their_labels() -> None:
    made, _ = gp.build_pairs(synthetic_rows(), 20, "heldout")
    for row in made:
        pair = pair_from_row(row)
        assert (row["source"], row["split"], row["origin"]) == (
            "counterfactual",
            "heldout",
            "synthetic",
        )
        assert row["subset"] in gp.KINDS
        assert pair.chosen == row["chosen"]
        assert ("family" in row) == (row["subset"] == "non_answer")
    assert len({r["id"] for r in made}) == len(made)


# --- (c) determinism ----------------------------------------------------------------------------


def test_the_same_seed_gives_the_same_pairs_and_another_seed_others() -> None:
    rows = synthetic_rows()
    first = gp.build_pairs(rows, 40, "train", seed=5)
    assert gp.build_pairs(rows, 40, "train", seed=5) == first
    assert gp.build_pairs(rows, 40, "train", seed=6)[0] != first[0]


# --- (d) none of the trap's wording -------------------------------------------------------------


def test_no_non_answer_wording_appears_in_the_trap_set() -> None:
    trap = trap_rejected()
    trap_grams = set().union(*map(ngrams, trap))
    for split in gp.SPLITS:
        for wording in split_wordings(split):
            assert not ngrams(wording) & trap_grams, wording
            if len(words(wording)) >= 3:
                assert not any(contains(t, wording) for t in trap), wording
            for t in trap:
                if len(words(t)) >= 3:
                    assert not contains(wording, t), (wording, t)
        for pair in non_answers(split):
            assert not any(contains(pair["rejected"], t) for t in trap if len(words(t)) >= 3)
            assert not ngrams(pair["rejected"]) & trap_grams, pair["rejected"]


# --- the command ---------------------------------------------------------------------------------


def test_the_command_writes_the_pairs_and_prints_counts_and_the_length_rule(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source = tmp_path / "rows.jsonl"
    source.write_text("".join(json.dumps(r) + "\n" for r in synthetic_rows()))
    parser = argparse.ArgumentParser()
    gp.add_command(parser.add_subparsers(dest="command"))
    out = tmp_path / "out.jsonl"
    args = parser.parse_args(
        [
            "grpo-pairs",
            "--pairs",
            str(source),
            "--out",
            str(out),
            "--per-kind",
            "20",
            "--kind",
            "non_answer",
            "--kind",
            "other_prompt",
            "--split",
            "heldout",
        ]
    )
    assert args.func(args) == 0
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert Counter(r["subset"] for r in rows) == {"non_answer": 20, "other_prompt": 20}
    printed = json.loads(capsys.readouterr().out.rsplit("}\n", 1)[0] + "}")
    assert printed["non_answer"]["length_rule_pct"] == {"chars": 50.0, "words": 50.0}
    assert printed["other_prompt"] == {
        "pairs": 20,
        "asked": 20,
        "chosen_longer": 10,
        "chosen_shorter": 10,
        "dropped_to_balance": 0,
        "length_rule_pct": {"chars": 50.0, "words": 50.0},
    }


def test_reflectrm_train_has_the_command_and_a_bad_input_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from reflectrm_harness.training.cli import add_parser

    parser = argparse.ArgumentParser()
    add_parser(parser.add_subparsers(dest="command"))
    args = parser.parse_args(
        ["train", "grpo-pairs", "--pairs", str(tmp_path / "absent.jsonl"), "--out", "o.jsonl"]
    )
    assert (args.split, args.per_kind, args.seed, args.kind) == ("train", 120, 0, [])
    assert args.func(args) == 2
    assert capsys.readouterr().err.startswith("error: ")
