"""The judge training job on a tiny model: both orders in every step, the loss falls, a resumed
run equals an uninterrupted one; the held-out split keeps prompts apart and notices changed data."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from reflectrm.engines.chat import ChatRenderer
from reflectrm.judging.types import Message
from reflectrm_harness.datasets import Pair
from reflectrm_harness.training.judge.items import target_text, tokenize_targets
from reflectrm_harness.training.judge.model import ADAPTER_DIR, cpu_name
from reflectrm_harness.training.judge.sft import LOG_FILE, JudgeTrainConfig, plan_steps, train_judge
from reflectrm_harness.training.judge.split import (
    SourcePairs,
    SplitError,
    held_out_keys,
    make_split,
    prompt_key,
    training_pairs,
)
from reflectrm_harness.training.overrides import make_settings
from support.tiny_models import QUESTIONS, save_tiny_judge


def _pairs() -> list[Pair]:
    return [Pair(f"q{i}", (Message("user", q),), a, b) for i, (q, a, b) in enumerate(QUESTIONS)]


@pytest.fixture(scope="module")
def tokenizer(smol_tokenizer: object) -> object:
    return smol_tokenizer


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory: pytest.TempPathFactory, tokenizer: object) -> Path:
    """A 2-layer Llama with the default model's tokenizer (and chat template)."""
    return save_tiny_judge(tmp_path_factory.mktemp("tiny"), tokenizer, layers=2)


def _config(**kw: object) -> JudgeTrainConfig:
    base: dict[str, object] = {
        "pairs_per_step": 2,
        "max_steps": 4,
        "learning_rate": 1e-2,
        "warmup_steps": 1,
        "lora_r": 4,
        "lora_alpha": 8,
        "reflection_every": 2,
        "precision": "f32",
        "threads": 1,
        "checkpoint_every_s": 1e9,
    }
    base.update(kw)
    return make_settings(JudgeTrainConfig, base)


def test_targets_are_the_service_format_and_the_decision_is_the_analysis_digit(
    tokenizer: object,
) -> None:
    assert target_text("preference", 2) == (
        "<Analysis>Response 2 is the better answer to the user.</Analysis>\n"
        "<Result>Response 2 is better than Response 1</Result>"
    )
    tokens = tokenize_targets(tokenizer)
    for kind in ("preference", "reflection"):
        one, two = tokens.targets[(kind, 1)], tokens.targets[(kind, 2)]
        d = tokens.decision[kind]
        assert tokenizer.decode([one[d]]).strip() == "1"  # type: ignore[attr-defined]
        assert tokenizer.decode([two[d]]).strip() == "2"  # type: ignore[attr-defined]
        assert one[:d] == two[:d]  # nothing before the decision names a slot
        assert one[-1] == two[-1] == tokenizer.eos_token_id  # type: ignore[attr-defined]


def test_every_step_holds_each_pair_in_both_orders(tokenizer: object) -> None:
    config = _config(max_steps=4, reflection_every=2)
    steps, counts = plan_steps(_pairs(), ChatRenderer(tokenizer), tokenizer, config)
    assert counts["steps"] == 4
    assert counts["pairs_used"] == 8
    assert counts["preference_sequences"] == 16
    assert counts["reflection_sequences"] == 8  # every 2nd pair, in both critique orders
    for step in steps:
        labels: dict[tuple[str, str], list[int]] = {}
        for item in step:
            labels.setdefault((item.pair_id, item.kind), []).append(item.label)
        for found in labels.values():
            assert sorted(found) == [1, 2]
        # The same pair's two orders show the same responses swapped: one prompt each.
        prefs = [i for i in step if i.kind == "preference"]
        assert len({i.prompt_ids for i in prefs}) == len(prefs)


def test_the_plan_is_fixed_by_the_seed(tokenizer: object) -> None:
    renderer = ChatRenderer(tokenizer)
    a, _ = plan_steps(_pairs(), renderer, tokenizer, _config(seed=3))
    b, _ = plan_steps(_pairs(), renderer, tokenizer, _config(seed=3))
    c, _ = plan_steps(_pairs(), renderer, tokenizer, _config(seed=4))
    ids = [[i.pair_id for i in s] for s in a]
    assert ids == [[i.pair_id for i in s] for s in b]
    assert ids != [[i.pair_id for i in s] for s in c]


def test_long_pairs_are_left_out(tokenizer: object) -> None:
    pairs = [*_pairs(), Pair("long", (Message("user", "word " * 900),), "a", "b")]
    config = _config(max_steps=100, max_prompt_tokens=400)
    steps, counts = plan_steps(pairs, ChatRenderer(tokenizer), tokenizer, config)
    assert counts["pairs_too_long_skipped"] == 1
    assert all(i.pair_id != "long" for s in steps for i in s)


def _log(run: Path) -> list[dict[str, float]]:
    return [json.loads(line) for line in (run / LOG_FILE).read_text().splitlines()]


def test_the_loss_falls(tiny_model: Path, tmp_path: Path) -> None:
    pairs = _pairs() * 3  # the same pairs again: a tiny model learns them
    pairs = [Pair(f"{p.id}-{k}", p.conversation, p.chosen, p.rejected) for k, p in enumerate(pairs)]
    config = _config(
        max_steps=12, pairs_per_step=2, reflection_every=0, learning_rate=5e-2, lora_r=8
    )
    summary = train_judge(tiny_model, pairs, tmp_path / "run", config, progress_bar=False)
    assert summary["finished"]
    assert summary["step"] == 12
    log = _log(tmp_path / "run")
    assert len(log) == 12
    first = sum(r["loss"] for r in log[:3]) / 3
    last = sum(r["loss"] for r in log[-3:]) / 3
    assert last < 0.5 * first
    assert (tmp_path / "run" / ADAPTER_DIR / "adapter_model.safetensors").is_file()


def test_a_resumed_run_equals_an_uninterrupted_one(tiny_model: Path, tmp_path: Path) -> None:
    from safetensors.torch import load_file

    config = _config(max_steps=4)
    whole = tmp_path / "whole"
    train_judge(tiny_model, _pairs(), whole, config, progress_bar=False)

    cut = tmp_path / "cut"
    stopped = train_judge(tiny_model, _pairs(), cut, config, stop_after=2, progress_bar=False)
    assert stopped == {"finished": False, "step": 2, "steps": 4}
    with pytest.raises(ValueError, match="--resume"):
        train_judge(tiny_model, _pairs(), cut, config, progress_bar=False)
    with pytest.raises(ValueError, match="other settings"):
        train_judge(tiny_model, _pairs(), cut, _config(max_steps=5), resume=True)
    train_judge(tiny_model, _pairs(), cut, config, resume=True, progress_bar=False)

    a = load_file(str(whole / ADAPTER_DIR / "adapter_model.safetensors"))
    b = load_file(str(cut / ADAPTER_DIR / "adapter_model.safetensors"))
    assert a.keys() == b.keys()
    assert len(a) > 0
    for key in a:
        assert torch.equal(a[key], b[key]), key
    assert _log(whole) == [
        {**r, "seconds": w["seconds"]} for r, w in zip(_log(cut), _log(whole), strict=True)
    ]


# --- the split -------------------------------------------------------------------------------


def _source(name: str, n: int, per_prompt: int = 1) -> SourcePairs:
    pairs = [
        Pair(
            f"{name}{i}", (Message("user", f"{name} question {i // per_prompt}"),), f"a{i}", f"b{i}"
        )
        for i in range(n)
    ]
    return SourcePairs(f"{name}.jsonl.gz", tuple(pairs))


def test_the_split_holds_out_whole_prompts_per_source() -> None:
    sources = [_source("x", 40, per_prompt=4), _source("y", 100)]
    split = make_split(sources, 0.25, seed=0)
    assert split["sources"]["x.jsonl.gz"] == {"pairs": 40, "held_out": 12}  # 3 prompts of 4 > 10
    assert split["sources"]["y.jsonl.gz"] == {"pairs": 100, "held_out": 25}
    keys = held_out_keys(split, sources)
    train = training_pairs(split, sources)
    assert len(train) == 140 - 37
    assert not any(prompt_key(p) in keys for p in train)
    assert make_split(sources, 0.25, seed=0) == split  # seeded
    assert make_split(sources, 0.25, seed=1)["pairs"] != split["pairs"]


def test_a_changed_held_out_pair_is_refused() -> None:
    sources = [_source("y", 20)]
    split = make_split(sources, 0.5, seed=0)
    entry = split["pairs"][0]
    changed = [
        Pair(p.id, p.conversation, p.chosen + "!", p.rejected) if p.id == entry["id"] else p
        for p in sources[0].pairs
    ]
    with pytest.raises(SplitError, match=f"{entry['id']} has sha256"):
        held_out_keys(split, [SourcePairs("y.jsonl.gz", tuple(changed))])
    missing = [p for p in sources[0].pairs if p.id != entry["id"]]
    with pytest.raises(SplitError, match="is not in the data"):
        held_out_keys(split, [SourcePairs("y.jsonl.gz", tuple(missing))])


def test_a_run_records_the_cpus_model_name(tmp_path: Path) -> None:
    info = tmp_path / "cpuinfo"
    info.write_text("processor\t: 0\nmodel name\t: Some CPU\nflags\t\t: fpu sse2\n")
    assert cpu_name(info) == "Some CPU"
    assert cpu_name(tmp_path / "missing")  # the platform's name for it
