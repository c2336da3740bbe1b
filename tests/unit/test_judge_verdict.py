"""``reflectrm train verdict`` on a tiny model: the top layers run on saved states give exactly the
full model's logits; every step holds both orders of its pairs; the loss falls; an interrupted
pass or training resumed equals an uninterrupted one; the shipped file merges into the weights
so that the served model computes what was trained."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file
from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

from reflectrm.checkpoints import default_cache_dir, default_model_dir
from reflectrm.datasets import Pair
from reflectrm.engines.chat import ChatRenderer
from reflectrm.judge_artifact import VERDICT_WEIGHTS, ArtifactError, merge_adapter
from reflectrm.judging.types import Message
from reflectrm.training.verdict import (
    LOG_FILE,
    TopLayers,
    VerdictConfig,
    extract_states,
    load_states,
    step_plan,
    train_top,
    verdict_plan,
)

QUESTIONS = [
    ("What is the capital of France?", "Paris.", "Berlin."),
    ("What is 2 + 2?", "4", "5"),
    ("Name a primary colour.", "Red.", "Green tea."),
    ("Is the sun a star?", "Yes.", "No, a planet."),
    ("Spell cat backwards.", "tac", "cta"),
    ("How many legs has a spider?", "Eight.", "Six."),
    ("Is water wet?", "Yes.", "Never."),
    ("What colour is the sky?", "Blue.", "Plaid."),
]


def _pairs(copies: int = 1) -> list[Pair]:
    return [
        Pair(f"src/q{i}-{k}", (Message("user", q),), a, b)
        for k in range(copies)
        for i, (q, a, b) in enumerate(QUESTIONS)
    ]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A 3-layer Llama with the default model's tokenizer (and chat template)."""
    folder = default_model_dir(default_cache_dir())
    if not (folder / "tokenizer_config.json").is_file():
        pytest.fail(f"the default model's tokenizer is missing at {folder}: make setup makes it")
    tokenizer = AutoTokenizer.from_pretrained(folder)
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=3,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=2048,
        tie_word_embeddings=True,
        initializer_range=0.3,
    )
    out = tmp_path_factory.mktemp("tiny")
    LlamaForCausalLM(config).save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out


def _config(**kw: object) -> VerdictConfig:
    base: dict[str, object] = {
        "layers": 2,
        "lora_r": 4,
        "lora_alpha": 8,
        "learning_rate": 2e-2,
        "warmup_steps": 1,
        "epochs": 2,
        "pairs_per_step": 2,
        "dev_fraction": 0.25,
        "precision": "f32",
        "threads": 1,
        "checkpoint_every_s": 1e9,
    }
    base.update(kw)
    return VerdictConfig.from_dict(base)


def _plan(tiny: Path, config: VerdictConfig, copies: int = 1) -> list[dict[str, object]]:
    tokenizer = AutoTokenizer.from_pretrained(tiny)
    return verdict_plan(_pairs(copies), ChatRenderer(tokenizer), tokenizer, config)


def test_the_top_layers_on_saved_states_give_the_full_models_logits(tiny: Path) -> None:
    config = _config()
    plan = _plan(tiny, config)
    model = LlamaForCausalLM.from_pretrained(tiny)
    item = plan[0]
    ids = torch.tensor([item["ids"]])
    with torch.no_grad():
        full = model(input_ids=ids).logits[0]
    captured = {}
    hook = model.model.layers[1].register_forward_pre_hook(
        lambda _m, args, _k: captured.update(h=args[0]), with_kwargs=True
    )
    with torch.no_grad():
        model(input_ids=ids)
    hook.remove()
    top = TopLayers(model, config)
    start = int(item["prompt"]) - 1
    with torch.no_grad():
        part = top.logits(captured["h"][0], start)
    assert part.shape == full[start:].shape
    assert torch.allclose(part, full[start:], atol=1e-5)


def test_every_step_holds_both_orders_of_its_pairs_and_no_dev_pair(tiny: Path) -> None:
    config = _config()
    plan = _plan(tiny, config, copies=2)
    steps = step_plan(plan, config)
    dev_pairs = {i["pair_id"] for i in plan if i["dev"]}
    assert dev_pairs
    assert len(dev_pairs) < len(plan) // 2
    train_pairs = len(plan) // 2 - len(dev_pairs)
    assert len(steps) == config.epochs * (train_pairs // config.pairs_per_step)
    for step in steps:
        assert len(step) == 2 * config.pairs_per_step
        labels: dict[object, list[object]] = {}
        for i in step:
            assert not plan[i]["dev"]
            labels.setdefault(plan[i]["pair_id"], []).append(plan[i]["label"])
        assert all(sorted(v) == [1, 2] for v in labels.values())
    # Each epoch sees each training pair once (all of them when they divide into steps).
    per_epoch = len(steps) // config.epochs
    for e in range(config.epochs):
        seen = [plan[i]["pair_id"] for s in steps[e * per_epoch : (e + 1) * per_epoch] for i in s]
        assert len(seen) == len(set(seen)) * 2


def test_a_resumed_pass_equals_an_uninterrupted_one(tiny: Path, tmp_path: Path) -> None:
    config = _config()
    plan = _plan(tiny, config)
    extract_states(tiny, plan, tmp_path / "whole", config, progress_bar=False)
    extract_states(tiny, plan[:5], tmp_path / "cut", config, progress_bar=False)
    with pytest.raises(ValueError, match="--resume"):
        extract_states(tiny, plan, tmp_path / "cut", config, progress_bar=False)
    extract_states(tiny, plan, tmp_path / "cut", config, resume=True, progress_bar=False)
    whole, _ = load_states(tmp_path / "whole")
    cut, _ = load_states(tmp_path / "cut")
    assert len(whole) == len(cut) == len(plan)
    for a, b, item in zip(whole, cut, plan, strict=True):
        assert a.shape == (len(item["ids"]), 32)
        assert torch.equal(a, b)


def _log(out: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in (out / LOG_FILE).read_text().splitlines()]


def test_the_loss_falls_and_a_resumed_run_equals_an_uninterrupted_one(
    tiny: Path, tmp_path: Path
) -> None:
    config = _config(epochs=4)
    plan = _plan(tiny, config, copies=2)
    extract_states(tiny, plan, tmp_path / "states", config, progress_bar=False)
    states, _ = load_states(tmp_path / "states")

    whole = tmp_path / "whole"
    whole.mkdir()
    summary = train_top(tiny, plan, states, whole, config, progress_bar=False)
    assert summary["finished"]
    log = _log(whole)
    assert len(log) == summary["steps"]
    n = len(log) // 4
    first = sum(float(r["loss"]) for r in log[:n]) / n  # type: ignore[arg-type]
    last = sum(float(r["loss"]) for r in log[-n:]) / n  # type: ignore[arg-type]
    assert last < 0.7 * first
    assert [e["epoch"] for e in summary["epochs"]] == [1, 2, 3, 4]

    cut = tmp_path / "cut"
    cut.mkdir()
    stopped = train_top(tiny, plan, states, cut, config, stop_after=3, progress_bar=False)
    assert stopped == {"finished": False, "step": 3, "steps": summary["steps"]}
    with pytest.raises(ValueError, match="--resume"):
        train_top(tiny, plan, states, cut, config, progress_bar=False)
    with pytest.raises(ValueError, match="other settings"):
        train_top(tiny, plan, states, cut, _config(epochs=5), resume=True, progress_bar=False)
    train_top(tiny, plan, states, cut, config, resume=True, progress_bar=False)
    a = load_file(str(whole / VERDICT_WEIGHTS))
    b = load_file(str(cut / VERDICT_WEIGHTS))
    assert a.keys() == b.keys()
    assert len(a) == 2 * 2 * 7  # 2 layers, 7 maps, A and B
    for key in a:
        assert torch.equal(a[key], b[key]), key
    assert [{**r, "seconds": 0} for r in _log(whole)] == [{**r, "seconds": 0} for r in _log(cut)]


def _states_entering(folder: Path, ids: torch.Tensor, layer: int) -> torch.Tensor:
    """The float32 residual stream entering ``layer`` (the saved states are bf16-rounded)."""
    model = LlamaForCausalLM.from_pretrained(folder)
    captured = {}
    hook = model.model.layers[layer].register_forward_pre_hook(
        lambda _m, args, _k: captured.update(h=args[0]), with_kwargs=True
    )
    with torch.no_grad():
        model(input_ids=ids)
    hook.remove()
    return captured["h"][0]


def _identity_adapter(base: Path, out: Path) -> None:
    """A run adapter that changes nothing (its B is zero): the merge is then base + verdict."""
    from peft import LoraConfig, get_peft_model

    model = get_peft_model(
        LlamaForCausalLM.from_pretrained(base),
        LoraConfig(r=2, lora_alpha=4, target_modules=["q_proj"], lora_dropout=0.0),
    )
    model.save_pretrained(out)


def test_the_merged_judge_computes_what_was_trained(tiny: Path, tmp_path: Path) -> None:
    config = _config(epochs=1)
    plan = _plan(tiny, config)
    extract_states(tiny, plan, tmp_path / "run", config, progress_bar=False)
    states, _ = load_states(tmp_path / "run")
    train_top(tiny, plan, states, tmp_path / "run", config, progress_bar=False)
    art = tmp_path / "art"
    _identity_adapter(tiny, art)
    weights = load_file(str(tmp_path / "run" / VERDICT_WEIGHTS))
    assert any(float(v.abs().max()) > 0 for k, v in weights.items() if "lora_B" in k)
    (art / VERDICT_WEIGHTS).write_bytes((tmp_path / "run" / VERDICT_WEIGHTS).read_bytes())
    merge_adapter(tiny, art, tmp_path / "merged")

    merged = LlamaForCausalLM.from_pretrained(tmp_path / "merged")
    top = TopLayers(LlamaForCausalLM.from_pretrained(tiny), config)
    top.load(weights)
    for item in plan[:4]:
        start = int(item["prompt"]) - 1
        ids = torch.tensor([item["ids"]])
        with torch.no_grad():
            want = top.logits(_states_entering(tiny, ids, layer=1), start)
            got = merged(input_ids=ids).logits[0, start:]
            plain = LlamaForCausalLM.from_pretrained(tiny)(input_ids=ids).logits[0, start:]
        assert torch.allclose(got, want, atol=1e-4)
        assert float((got - plain).abs().max()) > 1e-2  # the trained layers changed the logits

    # Without its scale the file is refused, not merged with a guess.
    save_file(weights, str(art / VERDICT_WEIGHTS))
    with pytest.raises(ArtifactError, match="scale"):
        merge_adapter(tiny, art, tmp_path / "again")
