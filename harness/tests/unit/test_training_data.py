"""The data builder on hand-made judgments whose outcomes are known."""

from __future__ import annotations

import json
import random
from collections import Counter
from pathlib import Path

import pytest

from reflectrm.judging.prompts import get_template
from reflectrm.judging.types import Candidate, Message
from reflectrm_harness.datasets import Pair, pair_from_row
from reflectrm_harness.training.grpo.data import (
    JUDGMENTS_FILE,
    STATS_FILE,
    TRAIN_FILE,
    BuildConfig,
    JudgedPair,
    build,
    judged_from_json,
    judged_to_json,
    mix_counts,
    rebuild,
    refit,
    select_items,
    shown_order,
)
from reflectrm_harness.training.grpo.sources import helpsteer3_row
from support.engines import ScriptedEngine, judgment

CONVERSATION = (Message("user", "What is 2 + 2?"),)


def candidate(index: int, verdict: int | None, analysis: str | None = None) -> Candidate:
    return Candidate(
        index=index,
        verdict=verdict,
        confidence=-0.5,
        analysis=analysis or f"analysis {index} says {verdict}",
        text=f"<Analysis>analysis {index}</Analysis>",
        num_tokens=10,
    )


def judged(pair_id: str, label: int, verdicts: list[int | None]) -> JudgedPair:
    return JudgedPair(
        pair_id,
        CONVERSATION,
        ("four", "five") if label == 1 else ("five", "four"),
        label,
        tuple(candidate(i, v) for i, v in enumerate(verdicts)),
    )


def items_of(items: list[dict], kind: str) -> list[dict]:
    return [i for i in items if i["kind"] == kind]


def test_pairs_right_every_time_are_dropped() -> None:
    pairs = [judged("easy", 1, [1] * 8), judged("hard", 2, [1] * 8)]
    items, stats = select_items(
        pairs, BuildConfig(preference_per_reflection=None), random.Random(0)
    )
    assert [i["pair_id"] for i in items] == ["hard"]
    assert stats.dropped_all_correct == 1
    assert stats.all_wrong == 1
    assert stats.preference_available == 1


def test_preference_items_show_the_chosen_response_in_each_position_half_the_time() -> None:
    # A base that always names Response 1 gets a pair right 8/8 exactly when the chosen
    # response was shown first; the pairs kept are all the ones it saw second.
    pairs = [judged(f"p{i}", 1 + i % 2, [1] * 8) for i in range(20)]
    items, stats = select_items(
        pairs, BuildConfig(preference_per_reflection=None), random.Random(0)
    )
    assert stats.dropped_all_correct == 10
    assert {p.pair_id for p in pairs if p.label == 2} == {i["pair_id"] for i in items}
    assert sorted(i["label"] for i in items) == [1] * 5 + [2] * 5
    for item in items:
        # the label names the slot of the chosen response ("four"), in the prompt's own order
        text = item["prompt"][-1]["content"]
        first, second = text.index("four"), text.index("five")
        assert item["label"] == (1 if first < second else 2)


def test_one_reflection_item_per_mixed_pair_with_the_right_analysis_preferred() -> None:
    pairs = [judged(f"p{k}", 1 + k % 2, [1, 2, 1, 2, 1, 1, 2, 1]) for k in range(40)]
    items, stats = select_items(pairs, BuildConfig(preference_per_reflection=1.0), random.Random(0))
    reflection = items_of(items, "reflection")
    assert stats.mixed == 40
    assert len(reflection) == 40
    assert Counter(i["pair_id"] for i in reflection) == {f"p{k}": 1 for k in range(40)}
    by_id = {p.pair_id: p for p in pairs}
    for item in reflection:
        pair = by_id[item["pair_id"]]
        user = item["prompt"][1]["content"]
        shown = [
            user.split(f"[Critique {slot}]\n", 1)[1].split(f"\n[End of Critique {slot}]", 1)[0]
            for slot in (1, 2)
        ]
        analyses = {c.analysis: c.verdict for c in pair.candidates}
        verdicts = [analyses[text] for text in shown]
        # One right and one wrong analysis; the label points at the right one.
        assert sorted(v == pair.label for v in verdicts) == [False, True]
        assert verdicts[item["label"] - 1] == pair.label
    # The right analysis is shown first in some items and second in others.
    assert {i["label"] for i in reflection} == {1, 2}


def test_unparsed_judgments_are_not_wrong_analyses_unless_asked() -> None:
    pairs = [judged("p", 1, [1, None, None, 1, 1, 1, 1, 1])]
    items, stats = select_items(
        pairs, BuildConfig(preference_per_reflection=None), random.Random(0)
    )
    assert stats.mixed == 0
    assert stats.preference_available == 1
    config = BuildConfig(preference_per_reflection=1.0, unparsed_is_incorrect=True)
    items, stats = select_items(pairs, config, random.Random(0))
    assert stats.mixed == 1
    assert len(items_of(items, "reflection")) == 1


def test_mix_is_four_to_one_and_shuffled() -> None:
    # 20 all-wrong pairs (preference only) and 20 mixed pairs (preference + reflection).
    pairs = [judged(f"w{k}", 1, [2] * 8) for k in range(20)]
    pairs += [judged(f"m{k}", 2, [1, 2] * 4) for k in range(20)]
    items, stats = select_items(pairs, BuildConfig(), random.Random(0))
    assert stats.preference_available == 40
    assert stats.reflection_available == 20
    assert (stats.preference_used, stats.reflection_used) == (40, 10)
    kinds = [i["kind"] for i in items]
    assert kinds.count("preference") == 4 * kinds.count("reflection")
    assert kinds != sorted(kinds)  # the two sets are interleaved, not concatenated


def test_too_long_items_are_dropped_before_the_mix_so_it_stays_four_to_one() -> None:
    """GRPO's max_prompt_tokens: 40 preference + 10 reflection items, of which 5 reflection
    items are too long. Filtering alone would train on 40:5 (8:1); refit keeps 20:5."""
    items = [{"id": f"p{k}", "kind": "preference"} for k in range(40)]
    items += [{"id": f"r{k}", "kind": "reflection"} for k in range(10)]
    random.Random(0).shuffle(items)
    long_ones = {"r0", "r3", "r5", "r6", "r9"}
    kept = refit(items, lambda i: i["id"] not in long_ones)
    kinds = Counter(i["kind"] for i in kept)
    assert (kinds["preference"], kinds["reflection"]) == (20, 5)
    assert not long_ones & {i["id"] for i in kept}
    assert [i for i in items if i in kept] == kept  # file order kept
    assert refit(items, lambda i: True) == items  # nothing too long: the file as it is


@pytest.mark.parametrize(
    ("preference", "reflection", "ratio", "expected"),
    [
        (40, 20, 4.0, (40, 10)),  # reflection in excess: trimmed
        (40, 5, 4.0, (20, 5)),  # preference in excess: trimmed
        (40, 10, 4.0, (40, 10)),
        (40, 20, None, (40, 0)),  # RFT baseline: preference only
        (0, 0, 4.0, (0, 0)),
    ],
)
def test_mix_counts(
    preference: int, reflection: int, ratio: float | None, expected: tuple[int, int]
) -> None:
    assert mix_counts(preference, reflection, ratio) == expected


def test_response_order_is_randomised_and_the_label_follows_the_chosen_response() -> None:
    rng = random.Random(0)
    pair = Pair("x", CONVERSATION, "chosen", "rejected")
    labels = []
    for _ in range(200):
        responses, label = shown_order(pair, rng)
        assert responses[label - 1] == "chosen"
        labels.append(label)
    assert 70 < labels.count(1) < 130


def test_items_carry_the_template_version_and_the_service_prompts() -> None:
    items, _ = select_items([judged("p", 2, [2, 1] * 4)], BuildConfig(), random.Random(0))
    template = get_template("v1")
    for item in items:
        assert item["template_version"] == "v1"
        assert item["prompt"][0] == {"role": "system", "content": template.system}
    preference = items_of(items, "preference")[0]
    assert "[Response 1]\nfive\n[End of Response 1]" in preference["prompt"][1]["content"]
    assert preference["label"] == 2


def test_judgments_round_trip_through_json() -> None:
    pair = judged("p", 1, [1, None, 2])
    assert judged_from_json(json.loads(json.dumps(judged_to_json(pair)))) == pair


def test_helpsteer3_conversion_follows_the_sign_of_overall_preference() -> None:
    row = {
        "context": [{"role": "user", "content": "q"}],
        "response1": "a",
        "response2": "b",
        "overall_preference": 2,
    }
    converted = helpsteer3_row(row, 7)
    assert converted is not None
    assert (converted["chosen"], converted["rejected"]) == ("b", "a")
    assert helpsteer3_row({**row, "overall_preference": -1}, 7)["chosen"] == "a"  # type: ignore[index]
    assert helpsteer3_row({**row, "overall_preference": 0}, 7) is None
    pair = pair_from_row(converted)
    assert pair.conversation == (Message("user", "q"),)


def test_pair_from_row_accepts_prompt_and_rejects_a_conversation_ending_with_the_assistant() -> (
    None
):
    assert pair_from_row({"id": 1, "prompt": "q", "chosen": "a", "rejected": "b"}).conversation == (
        Message("user", "q"),
    )
    with pytest.raises(ValueError, match="end with a user turn"):
        pair_from_row(
            {"messages": [{"role": "assistant", "content": "hi"}], "chosen": "a", "rejected": "b"}
        )


async def test_build_judges_through_the_service_judge_and_writes_its_files(
    tmp_path: Path,
) -> None:
    # Every pair gets the same 8 outputs: 5 say "Response 1", 3 say "Response 2".
    engine = ScriptedEngine(stage1=[judgment(1)] * 5 + [judgment(2)] * 3)
    pairs = [Pair(f"p{k}", CONVERSATION, "four", "five") for k in range(12)]
    config = BuildConfig(holdout_pairs=2, max_tokens=64)
    stats = await build(engine, pairs, config, tmp_path)
    # Stage 1 of the service: one request per pair, 8 samples at temperature 1.0, format enforced.
    assert len(engine.calls) == 10
    for prompt, spec in engine.calls:
        assert "# Responses for Judgment" in prompt
        assert (spec.n, spec.temperature, spec.max_tokens) == (8, 1.0, 64)
        assert spec.regex is not None
        assert spec.seed is not None
    assert (stats.pairs_read, stats.holdout, stats.judged, stats.mixed) == (12, 2, 10, 10)
    assert stats.judgments == 80
    assert stats.judgments_parsed == 80
    train = [json.loads(line) for line in (tmp_path / TRAIN_FILE).read_text().splitlines()]
    assert len(train) == stats.preference_used + stats.reflection_used
    assert json.loads((tmp_path / STATS_FILE).read_text())["judged"] == 10
    held = [
        json.loads(line)["id"] for line in (tmp_path / "holdout.jsonl").read_text().splitlines()
    ]
    assert len(held) == 2
    assert not set(held) & {i["pair_id"] for i in train}

    # A rerun resumes from the saved judgments instead of judging again.
    again = await build(engine, pairs, config, tmp_path)
    assert len(engine.calls) == 10
    assert again.judged == 10
    assert len((tmp_path / JUDGMENTS_FILE).read_text().splitlines()) == 10

    # Another mix from the same judgments, without the engine.
    only_preference = rebuild(
        tmp_path / JUDGMENTS_FILE, BuildConfig(preference_per_reflection=None), tmp_path / "rft"
    )
    assert only_preference.reflection_used == 0
    assert only_preference.preference_used == 10


async def test_build_skips_pairs_whose_prompt_is_too_long(tmp_path: Path) -> None:
    engine = ScriptedEngine(stage1=[judgment(1), judgment(2)])
    pairs = [
        Pair("short", CONVERSATION, "a", "b"),
        Pair("long", CONVERSATION, "word " * 500, "b"),
    ]
    stats = await build(
        engine, pairs, BuildConfig(samples_per_pair=2, max_prompt_tokens=300), tmp_path
    )
    assert (stats.judged, stats.too_long) == (1, 1)
