"""The GRPO config file, the checkpoint manifest, and the warm-up examples."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pytest
from test_training_data import judged

from reflectrm.checkpoints.files import MANIFEST
from reflectrm.checkpoints.validate import CheckpointError, validate_checkpoint
from reflectrm_harness.training.cli import add_parser
from reflectrm_harness.training.grpo.config import GRPOSettings, load_settings
from reflectrm_harness.training.grpo.export import build_manifest, export_checkpoint, read_manifest
from reflectrm_harness.training.grpo.warmup import WarmupSettings, warmup_examples
from reflectrm_harness.training.overrides import parse_overrides


def test_default_config_holds_the_papers_values() -> None:
    cfg = load_settings()
    assert (cfg.epochs, cfg.prompts_per_batch, cfg.learning_rate) == (3, 64, 1e-6)
    assert (cfg.max_completion_length, cfg.group_size) == (1024, 8)
    assert cfg.kl_beta == 0.001
    assert cfg.format_reward_weight == 0.0
    assert cfg.accumulation_steps() == 64  # 64 prompts x 8 completions in passes of 8
    assert cfg.wants_vllm(gpu=True)
    assert not cfg.wants_vllm(gpu=False)


def test_the_small_settings_file_is_found_by_name_and_runs_on_either_machine(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    small = load_settings(Path("small"))
    assert (small.template_version, small.lora, small.prompts_per_batch) == ("v3", True, 2)
    assert (small.max_completion_length, small.kl_beta, small.max_steps) == (64, 0.0, 110)
    assert small.accumulation_steps() == 1  # 2 prompts x 4 completions in one pass of 8
    # auto: vLLM's colocated rollouts on a GPU, transformers generate on the CPU
    assert small.wants_vllm(gpu=True)
    assert not small.wants_vllm(gpu=False)
    assert load_settings(Path("default")) == load_settings()
    # a file of that name in the working folder is the file, not the bundled one
    monkeypatch.chdir(tmp_path)
    (tmp_path / "small").write_text("group_size: 4\nmicro_batch: 4\n")
    assert load_settings(Path("small")).group_size == 4


def test_overrides_keep_their_types_and_unknown_keys_fail(tmp_path: Path) -> None:
    overrides = parse_overrides(
        ["lora=true", "max_steps=2", "learning_rate=1e-5", "seed=3"], GRPOSettings
    )
    cfg = load_settings(None, overrides)
    assert cfg.lora is True
    assert cfg.max_steps == 2
    assert cfg.learning_rate == 1e-5
    with pytest.raises(ValueError, match="unknown setting"):
        parse_overrides(["lr=1"], GRPOSettings)
    bad = tmp_path / "bad.yaml"
    bad.write_text("epochs: 1\nbatch: 3\n")
    with pytest.raises(ValueError, match="unknown settings"):
        load_settings(bad)
    with pytest.raises(ValueError, match="multiple of micro_batch"):
        load_settings(
            None, {"prompts_per_batch": 3, "group_size": 3, "micro_batch": 2}
        ).accumulation_steps()


class FakeModel:
    """Writes what a Hugging Face save would, so the service's check can run on it."""

    def save_pretrained(self, folder: Path, safe_serialization: bool = True) -> None:
        (folder / "config.json").write_text("{}")
        (folder / "model.safetensors").write_bytes(b"weights")


class FakeTokenizer:
    def save_pretrained(self, folder: Path) -> None:
        (folder / "tokenizer_config.json").write_text("{}")


def manifest(**overrides: Any) -> dict[str, Any]:
    values: dict[str, Any] = {
        "template_version": "v1",
        "base_model": "default",
        "data": {"items": 3},
        "config": {"epochs": 3},
    }
    return build_manifest(**{**values, **overrides})


def test_manifest_records_what_the_service_and_a_reader_need(tmp_path: Path) -> None:
    folder = export_checkpoint(FakeModel(), FakeTokenizer(), tmp_path / "ckpt", manifest())
    written = json.loads((folder / MANIFEST).read_text())
    assert written["template_version"] == "v1"
    for key in ("base_model", "data", "config", "git_revision", "created", "evaluation"):
        assert key in written
    assert validate_checkpoint(folder, "v1").manifest == written
    assert read_manifest(folder) == written


def test_a_checkpoint_for_another_template_is_refused_with_a_clear_message(
    tmp_path: Path,
) -> None:
    folder = export_checkpoint(FakeModel(), FakeTokenizer(), tmp_path / "ckpt", manifest())
    (folder / MANIFEST).write_text(json.dumps(manifest(template_version="v0")))
    with pytest.raises(CheckpointError, match="trained with prompt template 'v0'"):
        validate_checkpoint(folder, "v1")


def test_warmup_examples_are_correct_judgments_balanced_between_positions() -> None:
    pairs = [judged(f"a{k}", 1, [1, 1, 2]) for k in range(6)]
    pairs += [judged(f"b{k}", 2, [2, 1, 1]) for k in range(2)]
    examples = warmup_examples(pairs, WarmupSettings(per_pair=1), random.Random(0))
    assert sorted(e["label"] for e in examples) == [1, 1, 2, 2]
    for e in examples:
        assert e["prompt"][1]["role"] == "user"
        assert e["completion"][0]["role"] == "assistant"


def test_cli_registers_the_train_commands() -> None:
    import argparse

    parser = argparse.ArgumentParser()
    add_parser(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["train", "grpo", "--data", "x.jsonl", "--set", "lora=true"])
    assert args.func.__name__ == "run_grpo"
    assert args.overrides == ["lora=true"]
    args = parser.parse_args(["train", "build-data", "--data", "d", "--out", "o", "--ratio", "3"])
    assert args.func.__name__ == "run_build"
    assert args.ratio == 3.0


def test_a_checkpoint_trained_from_a_checkpoint_keeps_its_lineage(tmp_path: Path) -> None:
    base = export_checkpoint(FakeModel(), FakeTokenizer(), tmp_path / "warm", manifest())
    child = manifest(base_model=str(base), base_path=str(base))
    assert child["base_manifest"]["config"] == {"epochs": 3}
    assert manifest(base_path=str(tmp_path / "none"))["base_manifest"] is None


def test_the_warmup_overrides_use_the_same_parser() -> None:
    overrides = parse_overrides(["epochs=2", "lora=true", "max_examples=null"], WarmupSettings)
    assert overrides == {"epochs": 2, "lora": True, "max_examples": None}
    with pytest.raises(ValueError, match="unknown setting 'max_steps'"):
        parse_overrides(["max_steps=2"], WarmupSettings)  # a GRPO setting, not a warm-up one
