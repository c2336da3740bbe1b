"""The shipped judge: built from base + adapter once, every hash checked, a changed byte refused
with a message naming the file; the merge equals peft's; the default setting serves it."""

from __future__ import annotations

import dataclasses
import json
import re
import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file
from transformers import LlamaForCausalLM

from reflectrm.checkpoints.artifact import (
    ArtifactError,
    judge_dir,
    merge_adapter,
    prepare_judge,
    read_manifest,
)
from reflectrm.checkpoints.base import prepare_smollm2, smollm2_dir
from reflectrm.checkpoints.files import (
    ADAPTER_CONFIG,
    ADAPTER_WEIGHTS,
    ARTIFACT_MANIFEST,
    PREPARED_MARKER,
    file_sha256,
)
from reflectrm.checkpoints.judges import SHIPPED
from reflectrm.checkpoints.resolve import (
    DEFAULT_MODEL,
    prepare_model,
    resolve_model,
)
from reflectrm.checkpoints.validate import CheckpointError, NotPreparedError, validate_checkpoint
from reflectrm.settings import Settings
from tests.unit.tiny_models import save_tiny_llama


@pytest.fixture
def base(tmp_path: Path) -> Path:
    folder = save_tiny_llama(tmp_path / "base", 64, hidden_size=16)
    (folder / "tokenizer_config.json").write_text("{}")
    return folder


def _adapter(base: Path, out: Path) -> None:
    """A LoRA adapter as peft writes it, with B made non-zero so the merge changes weights."""
    from peft import LoraConfig, get_peft_model

    model = get_peft_model(
        LlamaForCausalLM.from_pretrained(base),
        LoraConfig(r=2, lora_alpha=6, target_modules=["q_proj", "down_proj"], lora_dropout=0.0),
    )
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.copy_(torch.randn_like(p))
    model.save_pretrained(out)


def _artifact(base: Path, tmp_path: Path, gguf: Path) -> Path:
    art = tmp_path / "artifact"
    _adapter(base, art)
    (art / "holdout-split.json").write_text('{"pairs": []}\n')
    names = (ADAPTER_WEIGHTS, ADAPTER_CONFIG, "holdout-split.json")
    manifest = {
        "name": "tiny-judge",
        "template_version": "v1",
        "base_model": {
            "name": "tiny",
            "source": "tiny==0",
            "gguf": gguf.name,
            "gguf_sha256": file_sha256(gguf),
            "gguf_size": gguf.stat().st_size,
        },
        "files": {n: file_sha256(art / n) for n in names},
    }
    (art / ARTIFACT_MANIFEST).write_text(json.dumps(manifest))
    return art


@pytest.fixture
def gguf(tmp_path: Path) -> Path:
    path = tmp_path / "base.gguf"
    path.write_bytes(b"GGUF" + bytes(range(200)))
    return path


def test_the_merge_equals_peft_merge_and_unload(base: Path, tmp_path: Path) -> None:
    from peft import PeftModel

    _adapter(base, tmp_path / "adapter")
    merge_adapter(base, tmp_path / "adapter", tmp_path / "merged")
    ours = load_file(str(tmp_path / "merged" / "model.safetensors"))
    theirs = PeftModel.from_pretrained(
        LlamaForCausalLM.from_pretrained(base), tmp_path / "adapter"
    ).merge_and_unload()
    reference = theirs.state_dict()
    before = load_file(str(base / "model.safetensors"))
    changed = [k for k in ours if not torch.equal(ours[k], before[k])]
    assert sorted(changed) == [
        "model.layers.0.mlp.down_proj.weight",
        "model.layers.0.self_attn.q_proj.weight",
    ]
    for key in changed:
        torch.testing.assert_close(ours[key], reference[key], rtol=0, atol=1e-6)
    # By hand: W + (alpha / r) * B @ A, alpha 6, r 2.
    lora = load_file(str(tmp_path / "adapter" / ADAPTER_WEIGHTS))
    a = lora["base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight"]
    b = lora["base_model.model.model.layers.0.self_attn.q_proj.lora_B.weight"]
    key = "model.layers.0.self_attn.q_proj.weight"
    torch.testing.assert_close(ours[key], before[key] + 3.0 * (b @ a), rtol=0, atol=1e-6)
    assert (tmp_path / "merged" / "config.json").is_file()


def test_built_once_then_reused(base: Path, tmp_path: Path, gguf: Path) -> None:
    art = _artifact(base, tmp_path, gguf)
    builds: list[int] = []

    def prepare_base() -> Path:
        builds.append(1)
        return base

    cache = tmp_path / "cache"
    path = prepare_judge(cache, gguf, prepare_base, lambda _: None, art)
    assert path == judge_dir(cache, read_manifest(art))
    assert path.name.startswith("tiny-judge-")
    served = json.loads((path / "reflectrm-manifest.json").read_text())
    assert served["template_version"] == "v1"
    assert served["name"] == "tiny-judge"
    again = prepare_judge(cache, gguf, prepare_base, lambda _: None, art)
    assert again == path
    assert builds == [1]
    # The build is keyed by the artifact's name and files, not its folder: moved, it is found.
    moved = art.rename(tmp_path / "renamed")
    assert prepare_judge(cache, gguf, prepare_base, lambda _: None, moved, build=False) == path
    assert builds == [1]


def test_a_record_naming_files_the_build_does_not_read_still_matches(
    base: Path, tmp_path: Path, gguf: Path
) -> None:
    """A built checkpoint's record names the files it is built from: a record written when the
    manifest listed another file too (the held-out split, before it moved to the harness) is the
    same build, not a reason to build again."""
    art = _artifact(base, tmp_path, gguf)
    builds: list[int] = []

    def prepare_base() -> Path:
        builds.append(1)
        return base

    cache = tmp_path / "cache"
    path = prepare_judge(cache, gguf, prepare_base, lambda _: None, art)
    marker = path / "reflectrm-judge-built.json"
    record = json.loads(marker.read_text())
    assert set(record["files"]) == {ADAPTER_WEIGHTS, ADAPTER_CONFIG}
    record["files"]["holdout-split.json"] = "0" * 64
    marker.write_text(json.dumps(record))
    assert prepare_judge(cache, gguf, prepare_base, lambda _: None, art, build=False) == path
    assert builds == [1]


@pytest.mark.parametrize("name", [ADAPTER_WEIGHTS, ADAPTER_CONFIG, "holdout-split.json"])
def test_a_changed_byte_is_refused_naming_the_file(
    base: Path, tmp_path: Path, gguf: Path, name: str
) -> None:
    art = _artifact(base, tmp_path, gguf)
    cache = tmp_path / "cache"
    prepare_judge(cache, gguf, lambda: base, lambda _: None, art)  # built and cached
    data = bytearray((art / name).read_bytes())
    data[len(data) // 2] ^= 0x01
    (art / name).write_bytes(bytes(data))
    with pytest.raises(
        ArtifactError, match=rf"judge artifact file {re.escape(name)} has sha256 [0-9a-f]{{64}}"
    ):
        prepare_judge(cache, gguf, lambda: base, lambda _: None, art)


def test_another_base_model_is_refused(base: Path, tmp_path: Path, gguf: Path) -> None:
    art = _artifact(base, tmp_path, gguf)
    gguf.write_bytes(gguf.read_bytes()[:-1] + b"X")
    with pytest.raises(ArtifactError, match=r"base model file base\.gguf has sha256"):
        prepare_judge(tmp_path / "cache", gguf, lambda: base, lambda _: None, art)


def test_a_missing_artifact_file_is_refused(base: Path, tmp_path: Path, gguf: Path) -> None:
    art = _artifact(base, tmp_path, gguf)
    (art / ADAPTER_CONFIG).unlink()
    with pytest.raises(ArtifactError, match=r"adapter_config\.json is missing"):
        prepare_judge(tmp_path / "cache", gguf, lambda: base, lambda _: None, art)


# --- the dtype it is served in ----------------------------------------------------------------


def test_the_judge_is_built_in_the_dtype_it_is_served_in(
    base: Path, tmp_path: Path, gguf: Path
) -> None:
    """Merged in float32, written in bfloat16: each weight is the float32 build's value cast
    once (what vLLM's load-time cast gave), the config names the dtype, and each dtype is a
    folder of its own, built once."""
    art = _artifact(base, tmp_path, gguf)
    cache = tmp_path / "cache"
    f32 = prepare_judge(cache, gguf, lambda: base, lambda _: None, art)
    builds: list[int] = []

    def prepare_base() -> Path:
        builds.append(1)
        return base

    bf16 = prepare_judge(cache, gguf, prepare_base, lambda _: None, art, "bfloat16")
    assert (f32.name.endswith("-f32"), bf16.name.endswith("-bf16")) == (True, True)
    assert bf16 == judge_dir(cache, read_manifest(art), "bfloat16")
    wide = load_file(str(f32 / "model.safetensors"))
    narrow = load_file(str(bf16 / "model.safetensors"))
    assert sorted(narrow) == sorted(wide)
    for key, value in narrow.items():
        assert value.dtype == torch.bfloat16, key
        assert torch.equal(value, wide[key].to(torch.bfloat16)), key
    assert json.loads((bf16 / "config.json").read_text())["dtype"] == "bfloat16"
    assert json.loads((f32 / "config.json").read_text())["dtype"] == "float32"
    assert validate_checkpoint(bf16, "v1").manifest == validate_checkpoint(f32, "v1").manifest
    assert prepare_judge(cache, gguf, prepare_base, lambda _: None, art, "bf16") == bf16
    assert builds == [1]


def test_the_base_model_is_copied_into_the_served_dtype_once(
    base: Path, tmp_path: Path, gguf: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import reflectrm.checkpoints.base as checkpoint_base

    cache = tmp_path / "cache"
    f32 = smollm2_dir(cache)
    shutil.copytree(base, f32)
    record = {
        "gguf_size": gguf.stat().st_size,
        "weights_sha256": {"model.safetensors": file_sha256(f32 / "model.safetensors")},
    }
    (f32 / PREPARED_MARKER).write_text(json.dumps(record))  # as a set-up before dtypes wrote it
    monkeypatch.setattr(checkpoint_base, "find_gguf", lambda cache, say, build=True: gguf)

    def no_conversion(gguf: Path, out: Path) -> None:
        raise AssertionError("the float32 checkpoint is there: nothing is converted")

    monkeypatch.setattr(checkpoint_base, "_convert", no_conversion)
    assert prepare_smollm2(cache, lambda _: None) == f32
    said: list[str] = []
    bf16 = prepare_smollm2(cache, said.append, "bfloat16")
    assert bf16 == smollm2_dir(cache, "bfloat16") == cache / "models" / f"{f32.name[:-4]}-bf16"
    wide = load_file(str(f32 / "model.safetensors"))
    narrow = load_file(str(bf16 / "model.safetensors"))
    assert all(torch.equal(narrow[k], v.to(torch.bfloat16)) for k, v in wide.items())
    assert json.loads((bf16 / "config.json").read_text())["dtype"] == "bfloat16"
    assert json.loads((bf16 / PREPARED_MARKER).read_text())["dtype"] == "bfloat16"
    assert len(said) == 2  # converting, ready
    assert prepare_smollm2(cache, said.append, "bfloat16") == bf16
    assert len(said) == 2
    with pytest.raises(CheckpointError, match="float32, bfloat16 or float16, not 'float64'"):
        prepare_smollm2(cache, said.append, "float64")


# --- the default setting ------------------------------------------------------------------------


def _ship_as_default(monkeypatch: pytest.MonkeyPatch, folder: Path) -> None:
    """The register, its default judge's folder ``folder``."""
    import reflectrm.checkpoints.resolve as resolve

    judge = dataclasses.replace(SHIPPED[DEFAULT_MODEL], folder=folder)
    monkeypatch.setattr(resolve, "SHIPPED", {**SHIPPED, DEFAULT_MODEL: judge})


def test_the_default_setting_serves_the_packaged_judge_when_there_is_one(
    base: Path, tmp_path: Path, gguf: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import reflectrm.checkpoints.resolve as resolve

    art = _artifact(base, tmp_path, gguf)
    _ship_as_default(monkeypatch, art)
    monkeypatch.setattr(resolve, "find_gguf", lambda cache, say, build=True: gguf)
    monkeypatch.setattr(
        resolve, "prepare_smollm2", lambda cache, say, dtype="float32", build=True: base
    )
    assert Settings().model == DEFAULT_MODEL
    cache = tmp_path / "cache"
    # A server builds nothing: before the preparation step the setting names what to run.
    with pytest.raises(
        NotPreparedError, match=r"run `reflectrm prepare-model default --dtype float32`"
    ):
        resolve_model(DEFAULT_MODEL, cache, "v1")
    assert not (cache / "models").exists()
    built = prepare_model(DEFAULT_MODEL, cache, "float32", say=lambda _: None)
    served = Path(resolve_model(DEFAULT_MODEL, cache, "v1"))
    assert served == built == judge_dir(cache, read_manifest(art))
    assert Path(resolve_model("base", cache, "v1")) == base  # one setting away
    # An artifact folder given as the model is found the same way.
    assert Path(resolve_model(str(art), cache, "v1")) == served
    # A tampered packaged artifact stops the default with the file's name.
    data = bytearray((art / ADAPTER_WEIGHTS).read_bytes())
    data[-1] ^= 0x01
    (art / ADAPTER_WEIGHTS).write_bytes(bytes(data))
    with pytest.raises(CheckpointError, match=rf"{re.escape(ADAPTER_WEIGHTS)} has sha256"):
        resolve_model(DEFAULT_MODEL, cache, "v1")


def test_without_a_packaged_judge_the_default_is_the_base_model(
    base: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import reflectrm.checkpoints.resolve as resolve

    _ship_as_default(monkeypatch, tmp_path / "no-judge")
    monkeypatch.setattr(
        resolve, "prepare_smollm2", lambda cache, say, dtype="float32", build=True: base
    )
    assert Path(resolve_model(DEFAULT_MODEL, tmp_path / "cache", "v1")) == base
    assert prepare_model(DEFAULT_MODEL, tmp_path / "cache", say=lambda _: None) == base


def test_prepare_model_refuses_what_is_not_built_here(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from reflectrm import cli

    folder = tmp_path / "plain"
    folder.mkdir()
    assert cli.main(["prepare-model", str(folder), "--dtype", "float32"]) == 2
    [line] = capsys.readouterr().err.strip().splitlines()
    assert line.startswith(f"reflectrm prepare-model: '{folder}' is not built here")
    others = ", ".join(n for n in SHIPPED if n != DEFAULT_MODEL)
    assert f"names: default, base, {others}, or an artifact folder" in line
    assert others == "qwen05b, smollm2"


def test_the_package_ships_a_judge_with_its_verdict_layer_and_every_hash_holds() -> None:
    """The committed SmolLM2 judge: its manifest names the adapter and the verdict layer, each
    file has the recorded sha256, and its held-out figures are recorded; its held-out split is
    the harness's (only its hash is here)."""
    from reflectrm.checkpoints.artifact import check_artifact, is_judge_artifact
    from reflectrm.checkpoints.files import VERDICT_WEIGHTS

    folder = SHIPPED["smollm2"].folder
    assert is_judge_artifact(folder)
    manifest = read_manifest(folder)
    assert set(manifest["files"]) == {
        ADAPTER_WEIGHTS,
        ADAPTER_CONFIG,
        VERDICT_WEIGHTS,
    }
    assert not list(folder.glob("*split*"))
    assert len(manifest["split"]["sha256"]) == 64
    check_artifact(folder, manifest, None)
    assert manifest["heldout"]["accuracy_mean_of_both_orders"] > manifest["heldout"]["longer_wins"]
    assert manifest["verdict"]["scale"] in manifest["verdict"]["config"]["scales"]
