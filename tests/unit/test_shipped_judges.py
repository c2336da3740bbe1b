"""The judges shipped in the package: each named by one model setting, its files matching its
manifest, and served in the prompt template it was trained for unless one is set."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from reflectrm.checkpoints.artifact import check_artifact, is_judge_artifact, read_manifest
from reflectrm.checkpoints.backbones import BACKBONES
from reflectrm.checkpoints.files import (
    ARTIFACT_MANIFEST,
    DEFAULT_JUDGE_DIR,
    MANIFEST,
    QWEN05B_ARTIFACT_DIR,
    VERDICT_WEIGHTS,
)
from reflectrm.checkpoints.resolve import (
    BASE_MODEL,
    DEFAULT_MODEL,
    SHIPPED_JUDGES,
    builds_checkpoint,
    trained_template,
)
from reflectrm.settings import Settings


def test_the_qwen_judge_is_a_checked_artifact_on_its_registry_backbone() -> None:
    assert SHIPPED_JUDGES["qwen05b"] == QWEN05B_ARTIFACT_DIR
    assert is_judge_artifact(QWEN05B_ARTIFACT_DIR)
    manifest = read_manifest(QWEN05B_ARTIFACT_DIR)
    check_artifact(QWEN05B_ARTIFACT_DIR, manifest, None)  # every file's sha256
    base = manifest["base_model"]
    backbone = BACKBONES[base["name"]]
    assert base["upstream"] == backbone.upstream == "Qwen/Qwen2.5-Coder-0.5B-Instruct"
    assert base["licence"] == "Apache-2.0"
    assert base["gguf_size"] == backbone.gguf_size
    assert list(manifest["files"]) == [VERDICT_WEIGHTS]
    # trained on a CC BY-NC set: the manifest says so
    assert "CC-BY-NC-4.0" in manifest["data_licences"]
    assert manifest["template_version"] == "v3"


def test_a_shipped_judge_is_built_in_the_served_dtype() -> None:
    assert builds_checkpoint("qwen05b")
    assert builds_checkpoint(DEFAULT_MODEL)
    assert not builds_checkpoint("Qwen/Qwen2.5-0.5B-Instruct")


def test_the_template_is_the_one_the_judge_was_trained_for() -> None:
    assert trained_template("qwen05b") == "v3"
    assert trained_template(DEFAULT_MODEL) == read_manifest(DEFAULT_JUDGE_DIR)["template_version"]
    assert trained_template(BASE_MODEL) is None
    assert trained_template("org/some-hub-model") is None
    assert trained_template(str(QWEN05B_ARTIFACT_DIR)) == "v3"


def test_a_checkpoint_folder_names_its_template(tmp_path: Path) -> None:
    (tmp_path / MANIFEST).write_text(json.dumps({"template_version": "v1"}))
    assert trained_template(str(tmp_path)) == "v1"
    (tmp_path / MANIFEST).write_text("not json")
    assert trained_template(str(tmp_path)) is None
    # an artifact-looking manifest without weights beside it is no artifact
    other = tmp_path / "other"
    other.mkdir()
    (other / ARTIFACT_MANIFEST).write_text(json.dumps({"template_version": "v3"}))
    assert trained_template(str(other)) is None


def test_the_settings_follow_the_model_unless_the_template_is_set(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("REFLECTRM_TEMPLATE_VERSION", raising=False)
    assert Settings(model="qwen05b").template_version == "v3"
    assert Settings(model="qwen05b").judge_config().template_version == "v3"
    assert Settings(model="qwen05b", template_version="v1").template_version == "v1"
    monkeypatch.setenv("REFLECTRM_TEMPLATE_VERSION", "v1")
    assert Settings(model="qwen05b").template_version == "v1"
    monkeypatch.delenv("REFLECTRM_TEMPLATE_VERSION")
    assert Settings(model=BASE_MODEL).template_version == "v1"
    # a remote fleet's model is a name it serves: nothing here to read
    remote = Settings(model="qwen05b", engine="remote", engine_url="http://fleet:8000")
    assert remote.template_version == "v1"
