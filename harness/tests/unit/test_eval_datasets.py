"""The loaders against each shared file's real schema, the hub converters, and sampling."""

from __future__ import annotations

import gzip
import json
from collections import Counter

import pytest

from reflectrm.judging.types import Message
from reflectrm_harness.datasets import Pair
from reflectrm_harness.evaluation.benchmarks import (
    JUDGEBENCH,
    PPE,
    REWARDBENCH,
    RMB,
    RMBENCH,
    DatasetError,
    find_local,
    interleave,
    load_dataset,
    load_file,
    sample,
)
from reflectrm_harness.evaluation.hub import (
    HUB_SOURCES,
    convert,
    judgebench_rows,
    ppe_rows,
    rewardbench_rows,
    rmb_rows,
    rmbench_rows,
)
from reflectrm_harness.evaluation.scoring import (
    REWARDBENCH_SECTIONS,
    REWARDBENCH_WEIGHTS,
    score,
)
from support.prerequisites import SHARED_DATA, require_shared_data  # ../shared/data beside the repo

EXPECTED_PAIRS = {REWARDBENCH: 2985, RMBENCH: 7182, RMB: 14543, JUDGEBENCH: 620}


@pytest.fixture(scope="module")
def shared() -> dict[str, object]:
    require_shared_data("benchmarks")
    return {name: load_dataset(name, SHARED_DATA) for name in EXPECTED_PAIRS}


@pytest.mark.parametrize("name", list(EXPECTED_PAIRS))
def test_each_shared_file_loads_whole_with_its_metadata(shared, name):
    b = shared[name]
    assert b.name == name
    assert len(b.pairs) == EXPECTED_PAIRS[name]
    assert len({p.id for p in b.pairs}) == len(b.pairs)
    for p in b.pairs:
        assert p.conversation
        assert p.conversation[-1].role == "user"
        assert isinstance(p.chosen, str)
        assert isinstance(p.rejected, str)
    # Every pair scores: a judge that is always right gets 100 on the official metric.
    assert score(name, [(p.meta, 1.0) for p in b.pairs]).value == pytest.approx(100.0)


def test_rewardbench_subsets_and_sections_match_the_official_tables(shared):
    pairs = shared[REWARDBENCH].pairs
    counts = Counter(p.meta["subset"] for p in pairs)
    assert set(counts) == set(REWARDBENCH_WEIGHTS)
    for p in pairs:
        assert p.meta["subset"] in REWARDBENCH_SECTIONS[p.meta["section"]]
    # The file's counts are the official weights except the documented up-weighting of
    # math-prm and upstream's swapped xstest counts.
    differ = {s for s in counts if counts[s] != REWARDBENCH_WEIGHTS[s]}
    assert differ == {"math-prm", "xstest-should-refuse", "xstest-should-respond"}
    assert counts["xstest-should-refuse"] == REWARDBENCH_WEIGHTS["xstest-should-respond"]


def test_rmbench_items_expand_to_a_full_style_matrix(shared):
    pairs = shared[RMBENCH].pairs
    by_domain = Counter(p.meta["subset"] for p in pairs)
    assert set(by_domain) == {"chat", "code", "safety-refuse", "safety-response"}  # no math
    styles = ("concise", "detailed_plain", "detailed_markdown")
    for p in pairs:
        i, j = styles.index(p.meta["chosen_style"]), styles.index(p.meta["rejected_style"])
        assert p.meta["difficulty"] == ("normal" if i == j else "hard" if i < j else "easy")
    assert Counter(p.meta["difficulty"] for p in pairs) == {
        "easy": 2394,
        "normal": 2394,
        "hard": 2394,
    }


def test_rmb_goals_and_multi_turn_conversations(shared):
    pairs = shared[RMB].pairs
    assert Counter(p.meta["goal"] for p in pairs) == {"Helpfulness": 8456, "Harmlessness": 6087}
    multi = [p for p in pairs if len(p.conversation) > 1]
    assert len(multi) > 1000
    assert {m.role for p in multi for m in p.conversation} == {"user", "assistant"}
    assert all(p.meta["subset"].startswith(p.meta["goal"]) for p in pairs)


def test_judgebench_categories(shared):
    pairs = shared[JUDGEBENCH].pairs
    assert Counter(p.meta["subset"] for p in pairs) == {
        "knowledge": 308,
        "reasoning": 149,
        "math": 90,
        "coding": 73,
    }
    assert Counter(p.meta["split"] for p in pairs) == {"gpt": 350, "claude": 270}


def test_dataset_specs(shared, tmp_path):
    # A plain (not gzipped) copy of a few rows, its benchmark named by a prefix.
    src = find_local(JUDGEBENCH, SHARED_DATA)
    assert src is not None
    with gzip.open(src, "rt") as f:
        rows = [json.loads(next(f)) for _ in range(3)]
    for r in rows:
        del r["benchmark"]
    plain = tmp_path / "some=file.jsonl"
    plain.write_text("".join(json.dumps(r) + "\n" for r in rows))
    b = load_dataset(f"judgebench={plain}", SHARED_DATA)
    assert (b.name, len(b.pairs), b.generic) == (JUDGEBENCH, 3, False)
    # No known benchmark: a dataset of the user's own, under its file name or a label.
    own = load_dataset(str(plain), SHARED_DATA)
    assert (own.name, own.generic, own.pairs[0].benchmark) == ("some-file", True, "some-file")
    assert own.pairs[0].meta == {"subset": rows[0]["subset"]}
    mine = load_dataset(f"mine={plain}", SHARED_DATA)
    assert (mine.name, mine.generic) == ("mine", True)
    with pytest.raises(DatasetError, match="'mine' is not a benchmark"):
        load_dataset("mine=no-such-file.jsonl", SHARED_DATA)
    with pytest.raises(DatasetError, match="no local ppe file"):
        load_dataset("ppe", tmp_path)
    with pytest.raises(DatasetError, match="not a file"):
        load_dataset("no-such-thing", tmp_path)


def test_rows_lacking_a_field_of_the_official_metric_stop_the_load(tmp_path):
    """Checked for every row when the file loads, so nothing is judged first; the message names
    the file, the row and the field, and how to score the file generically instead."""
    path = tmp_path / "data.jsonl"
    good = {"id": "a", "prompt": "q", "chosen": "x", "rejected": "y", "subset": "s", "goal": "G"}
    bad = {"id": "b", "prompt": "q", "chosen": "x", "rejected": "y", "subset": "s"}
    path.write_text(json.dumps(good) + "\n" + json.dumps(bad) + "\n")
    with pytest.raises(DatasetError) as err:
        load_dataset(f"rmb={path}", tmp_path)
    assert f"{path}:2: missing field `goal`" in str(err.value)
    assert "--dataset mydata=PATH" in str(err.value)
    for name, field in ((RMBENCH, "`difficulty`"), (REWARDBENCH, "")):
        with pytest.raises(DatasetError, match=f"{path}:1: .*{field}"):
            load_file(path, name)  # RewardBench: "s" is none of its subsets
    # The same rows as a dataset of one's own: generic scoring needs none of those fields.
    own = load_dataset(f"own={path}", tmp_path)
    assert [p.meta for p in own.pairs] == [{"subset": "s"}, {"subset": "s"}]
    grouped = tmp_path / "grouped.jsonl"
    grouped.write_text(json.dumps({**good, "group_id": 7}) + "\n")
    assert load_file(grouped).pairs[0].meta == {"subset": "s", "group_id": "7"}


def test_a_bad_row_is_reported_with_its_line(tmp_path):
    path = tmp_path / "rmb.jsonl"
    path.write_text(
        '{"id": "a", "prompt": "q", "chosen": "x", "rejected": "y", "goal": "G"}\n{oops\n'
    )
    with pytest.raises(DatasetError, match=r"rmb.jsonl:2"):
        load_file(path)


# --- hub converters (hand-made upstream rows; nothing is downloaded) ------------------------


def test_rewardbench_hub_rows():
    row = {"id": 7, "prompt": "q", "chosen": "c", "rejected": "r", "subset": "hep-go"}
    (out,) = rewardbench_rows(row, "filtered")
    assert out["section"] == "Reasoning"
    assert out["id"] == "rewardbench-hep-go-7"


def test_rmbench_hub_rows_expand_three_by_three():
    row = {
        "id": "chat-1",
        "prompt": "q",
        "chosen": ["c0", "c1", "c2"],
        "rejected": ["r0", "r1", "r2"],
        "domain": "chat",
    }
    out = list(rmbench_rows(row, "train"))
    assert len(out) == 9
    by_cell = {(o["chosen"], o["rejected"]): o["difficulty"] for o in out}
    assert by_cell[("c0", "r2")] == "hard"  # concise chosen vs markdown rejected
    assert by_cell[("c2", "r0")] == "easy"
    assert by_cell[("c1", "r1")] == "normal"


def test_rmb_hub_rows():
    row = {
        "pair_uid": "u1",
        "conversation": [{"role": "user", "content": "hi", "language": "English"}],
        "chosen": "c",
        "rejected": "r",
        "alignment_goal": "Helpfulness",
        "category_path": "Pairwise_set/Helpfulness/Code/Data Management",
    }
    (out,) = rmb_rows(row, "test")
    assert out["messages"] == [{"role": "user", "content": "hi"}]
    assert out["subset"] == "Helpfulness/Code/Data Management"


def test_judgebench_hub_rows_follow_the_label():
    row = {
        "pair_id": "p",
        "question": "q",
        "response_A": "a",
        "response_B": "b",
        "label": "B>A",
        "source": "mmlu-pro-law",
    }
    (out,) = judgebench_rows(row, "claude")
    assert (out["chosen"], out["rejected"], out["subset"], out["split"]) == (
        "b",
        "a",
        "knowledge",
        "claude",
    )
    assert list(judgebench_rows({**row, "label": "A=B"}, "gpt")) == []


def test_ppe_hub_rows_exclude_ties():
    row = {"question_id": "q1", "prompt": "p", "response_1": "x", "response_2": "y"}
    assert next(ppe_rows({**row, "winner": "model_b"}, "test"))["chosen"] == "y"
    assert next(ppe_rows({**row, "winner": "model_a"}, "test"))["chosen"] == "x"
    assert list(ppe_rows({**row, "winner": "tie (bothbad)"}, "test")) == []
    rows = convert(
        HUB_SOURCES["lmarena-ai/ppe-human-preference-v1"],
        {"test": [{**row, "winner": w} for w in ("model_a", "tie", "model_b")]},
    )
    assert [r["chosen"] for r in rows] == ["x", "y"]
    with pytest.raises(DatasetError, match="no split"):
        convert(HUB_SOURCES["scalerlab/judgebench"], {"gpt": []})


# --- sampling -------------------------------------------------------------------------------


def _pairs(benchmark: str, n: int) -> tuple[Pair, ...]:
    conv = (Message("user", "q"),)
    return tuple(Pair(f"{benchmark}-{i}", conv, "c", "r", benchmark) for i in range(n))


def test_sample_is_deterministic_in_file_order_and_per_benchmark():
    pairs = _pairs(RMB, 100)
    a, b = sample(pairs, 10, seed=3), sample(pairs, 10, seed=3)
    assert a == b
    assert len(a) == 10
    assert [pairs.index(p) for p in a] == sorted(pairs.index(p) for p in a)
    assert sample(pairs, 10, seed=4) != a
    assert {p.id for p in a} < {p.id for p in sample(pairs, 30, seed=3)}  # samples nest
    assert sample(pairs, None, seed=3) == pairs
    assert sample(pairs, 1000, seed=3) == pairs
    # The same seed gives independent draws for another benchmark of the same size.
    other = sample(_pairs(PPE, 100), 10, seed=3)
    assert [p.id.split("-")[1] for p in other] != [p.id.split("-")[1] for p in a]


def test_interleave_round_robins_benchmarks():
    a, b = _pairs(RMB, 3), _pairs(PPE, 1)
    assert [p.id for p in interleave([a, b])] == ["rmb-0", "ppe-0", "rmb-1", "rmb-2"]
