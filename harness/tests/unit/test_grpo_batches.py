"""Each GRPO step's prompts hold both positions equally (training/grpo/batches.py), and the reward
function logs each step's mean reward by position and by length stratum (rewards.reward_strata)."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from reflectrm_harness.training.grpo.batches import (
    chosen_longer_by_pair,
    item_group,
    length_balanced,
    length_cells,
    position_balanced,
    with_chosen_longer,
)
from reflectrm_harness.training.grpo.rewards import reward_strata, verdict_reward

R1 = "<Analysis>ok</Analysis>\n<Result>Response 1 is better than Response 2</Result>"
R2 = "<Analysis>ok</Analysis>\n<Result>Response 2 is better than Response 1</Result>"


def items(ones: int, twos: int) -> list[dict[str, Any]]:
    """Items as build-data writes them, the label-1 ones first (the worst order for a sampler
    that does not shuffle)."""
    labels = [1] * ones + [2] * twos
    return [
        {
            "id": f"p{k}#{'reflection' if k % 5 == 0 else 'preference'}",
            "pair_id": f"p{k}",
            "kind": "reflection" if k % 5 == 0 else "preference",
            "prompt": [{"role": "user", "content": f"item {k}"}],
            "label": y,
        }
        for k, y in enumerate(labels)
    ]


def runs(ordered: list[dict[str, Any]], size: int) -> list[Counter[int]]:
    return [
        Counter(i["label"] for i in ordered[s : s + size]) for s in range(0, len(ordered), size)
    ]


@pytest.mark.parametrize("per_step", [2, 4, 8, 64])
def test_every_run_of_a_step_holds_both_positions_equally(per_step: int) -> None:
    given = items(70, 57)
    ordered, left_out = position_balanced(given, per_step, seed=3)
    assert left_out == 13
    assert len(ordered) == 114
    every = runs(ordered, per_step)
    full = every[: len(ordered) // per_step]
    assert all(c[1] == c[2] == per_step // 2 for c in full)
    assert every[-1][1] == every[-1][2]  # a last, shorter run (TRL drops it) is balanced too
    assert {i["id"] for i in ordered} <= {i["id"] for i in given}
    assert len({i["id"] for i in ordered}) == len(ordered)
    # both kinds still spread over the order, not gathered at one end
    kinds = [i["kind"] for i in ordered]
    assert "reflection" in kinds[: len(kinds) // 2]
    assert "reflection" in kinds[len(kinds) // 2 :]


def test_an_odd_step_alternates_which_position_has_the_extra_prompt() -> None:
    ordered, _ = position_balanced(items(30, 30), 3, seed=0)
    counts = runs(ordered, 3)
    assert [c[1] for c in counts] == [2, 1] * 10
    for a, b in zip(counts[::2], counts[1::2], strict=True):
        assert a + b == Counter({1: 3, 2: 3})


def test_the_order_is_random_by_seed_and_fixed_for_a_seed() -> None:
    given = items(20, 20)
    first, _ = position_balanced(given, 2, seed=1)
    assert position_balanced(given, 2, seed=1)[0] == first
    assert position_balanced(given, 2, seed=2)[0] != first
    assert [i["id"] for i in first] != [i["id"] for i in given]


def test_a_bad_label_or_step_is_refused() -> None:
    with pytest.raises(ValueError, match="label"):
        position_balanced([{"id": "x", "label": 3}], 2)
    with pytest.raises(ValueError, match="per_step"):
        position_balanced(items(2, 2), 0)


def test_trls_sampler_without_shuffling_gives_each_step_both_positions() -> None:
    """TRL's own sampler as the job sets it (shuffle_dataset off): prompts_per_batch prompts a
    step, each repeated group_size times."""
    utils = pytest.importorskip("trl.trainer.utils")
    prompts_per_batch, group_size = 2, 4
    ordered, _ = position_balanced(items(40, 33), prompts_per_batch, seed=0)
    sampler = utils.RepeatSampler(
        ordered, mini_repeat_count=group_size, batch_size=prompts_per_batch, shuffle=False
    )
    drawn = list(sampler)
    step = prompts_per_batch * group_size
    assert len(drawn) == len(ordered) * group_size
    for s in range(0, len(drawn), step):
        labels = Counter(ordered[i]["label"] for i in drawn[s : s + step])
        assert labels == {1: step // 2, 2: step // 2}


def test_the_job_turns_trls_shuffling_off(tmp_path: Path) -> None:
    pytest.importorskip("trl")
    from reflectrm_harness.training.grpo.config import load_settings
    from reflectrm_harness.training.grpo.train import ITEM_COLUMNS, trl_config

    cfg = load_settings(None, {"prompts_per_batch": 2, "group_size": 4, "micro_batch": 8})
    args = trl_config(cfg, gpu=False, out=tmp_path, chat={})
    assert args.shuffle_dataset is False
    assert args.generation_batch_size // args.num_generations == cfg.prompts_per_batch
    assert "chosen_longer" in ITEM_COLUMNS


# --- which pairs have the chosen reply longer ------------------------------------------------


def test_chosen_longer_comes_from_the_judged_pairs(tmp_path: Path) -> None:
    judgments = tmp_path / "judgments.jsonl"
    rows = [
        {"pair_id": "a", "responses": ["long reply", "short"], "label": 1},
        {"pair_id": "b", "responses": ["long reply", "short"], "label": 2},
        {"pair_id": "c", "responses": ["same", "size"], "label": 1},
    ]
    judgments.write_text("".join(json.dumps(r) + "\n" for r in rows))
    by_pair = chosen_longer_by_pair(judgments)
    assert by_pair == {"a": True, "b": False, "c": None}
    assert chosen_longer_by_pair(tmp_path / "absent.jsonl") == {}
    given = [{"pair_id": "a"}, {"pair_id": "b", "chosen_longer": True}, {"pair_id": "z"}]
    assert [i["chosen_longer"] for i in with_chosen_longer(given, by_pair)] == [True, True, None]


# --- the per-step rewards by stratum ---------------------------------------------------------


def test_reward_strata_on_a_fake_batch() -> None:
    completions = [R1, R2, R1, R2, R1, "no verdict"]
    label = [1, 1, 2, 2, 1, 2]
    chosen_longer = [True, False, True, None, False, True]
    logged: list[tuple[str, float]] = []

    rewards = verdict_reward(
        completions,
        label,
        ["preference"] * 6,
        chosen_longer=chosen_longer,
        log_metric=lambda name, value: logged.append((name, value)),
        trainer_state=None,
    )

    assert rewards == [1.0, 0.0, 0.0, 1.0, 1.0, 0.0]
    # by hand: right_1 = items 0, 1, 4 -> (1 + 0 + 1) / 3; right_2 = items 2, 3, 5 -> 1 / 3;
    # chosen longer = items 0, 2, 5 -> 1 / 3; shorter = items 1, 4 -> 1 / 2; item 3 has no stratum
    expected = {
        "reward_by/right_1": 2 / 3,
        "reward_by/right_2": 1 / 3,
        "reward_by/chosen_longer": 1 / 3,
        "reward_by/chosen_shorter": 1 / 2,
    }
    assert dict(logged) == pytest.approx(expected)
    assert len(logged) == 4


def test_a_stratum_absent_from_the_batch_is_not_logged() -> None:
    assert reward_strata([1.0, 0.0], [2, 2]) == {"reward_by/right_2": 0.5}
    assert reward_strata([1.0, 0.0], [1, 2], [None, None]) == {
        "reward_by/right_1": 1.0,
        "reward_by/right_2": 0.0,
    }
    # without TRL's log_metric the reward is the same and nothing is logged
    assert verdict_reward([R1], [1], ["preference"], chosen_longer=[True]) == [1.0]


def test_the_metrics_file_gets_the_strata_trl_logs_for_a_step(tmp_path: Path) -> None:
    """TRL averages what log_metric received over the logging step into the step's logs; the
    job's callback writes those logs to metrics.jsonl as they are."""
    pytest.importorskip("transformers")
    from types import SimpleNamespace

    from reflectrm_harness.training.grpo.trainer import METRICS_FILE, metrics_callback

    pending: dict[str, list[float]] = {}
    verdict_reward(
        [R1, R2],
        [1, 1],
        ["preference"] * 2,
        chosen_longer=[True, False],
        log_metric=lambda n, v: pending.setdefault(n, []).append(v),
    )
    logs = {"reward": 0.5, **{n: sum(v) / len(v) for n, v in pending.items()}}
    path = tmp_path / METRICS_FILE
    state = SimpleNamespace(global_step=7, max_steps=10)
    metrics_callback(path).on_log(None, state, None, logs=logs)
    row = json.loads(path.read_text())
    assert row["step"] == 7
    assert row["reward_by/right_1"] == 0.5
    assert row["reward_by/chosen_longer"] == 1.0
    assert row["reward_by/chosen_shorter"] == 0.0


def cf(k: int, kind: str, label: int, longer: bool | None, item_kind: str = "preference") -> dict:
    return {
        "pair_id": f"hs/row{k}/{kind}",
        "kind": item_kind,
        "label": label,
        "chosen_longer": longer,
    }


def test_an_item_of_a_counterfactual_pair_is_grouped_by_its_kind_too() -> None:
    assert item_group(cf(1, "non_answer", 1, True)) == "preference/non_answer"
    assert item_group(cf(1, "other_prompt", 1, True, "reflection")) == "reflection/other_prompt"
    # an ordinary pair id: the item's kind alone
    assert item_group({"pair_id": "helpsteer2/train/7", "kind": "preference"}) == "preference"


def test_length_balance_keeps_each_cell_at_its_groups_smallest() -> None:
    # non_answer: label 1 longer x3, shorter x2; label 2 longer x4, shorter x1 -> 1 per cell
    # other_prompt: 2 per cell already -> all 8 kept; one same-length item always kept
    given = (
        [cf(k, "non_answer", 1, True) for k in range(3)]
        + [cf(k, "non_answer", 1, False) for k in range(3, 5)]
        + [cf(k, "non_answer", 2, True) for k in range(5, 9)]
        + [cf(9, "non_answer", 2, False)]
        + [
            cf(k, "other_prompt", y, lo)
            for k, (y, lo) in enumerate([(1, True), (1, False), (2, True), (2, False)] * 2, 20)
        ]
        + [cf(40, "truncated_padded", 1, None)]
    )
    kept, left_out = length_balanced(given, seed=3)
    assert (len(kept), left_out) == (4 + 8 + 1, 10 - 4)
    cells = length_cells(kept)
    assert cells["preference/non_answer"] == {
        "1/longer": 1,
        "1/shorter": 1,
        "2/longer": 1,
        "2/shorter": 1,
    }
    assert cells["preference/other_prompt"] == {
        "1/longer": 2,
        "1/shorter": 2,
        "2/longer": 2,
        "2/shorter": 2,
    }
    assert cells["preference/truncated_padded"] == {"1/same": 1}
    # the kept items keep their order
    order = [given.index(i) for i in kept]
    assert order == sorted(order)


def test_length_balance_leaves_a_length_rule_at_half_in_every_group() -> None:
    import random

    rng = random.Random(0)
    given = [
        cf(k, rng.choice(["non_answer", "other_prompt"]), rng.choice([1, 2]), rng.random() < 0.7)
        for k in range(200)
    ]
    kept, _ = length_balanced(given)
    for group in {item_group(i) for i in kept}:
        members = [i for i in kept if item_group(i) == group]
        # "the longer reply wins" is right exactly when the chosen reply is the longer
        assert sum(i["chosen_longer"] for i in members) * 2 == len(members)
