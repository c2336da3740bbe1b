"""The judges shipped in the package: each named by one model setting, its files matching its
manifest, and served in the prompt template it was trained for unless one is set."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from reflectrm.checkpoints.artifact import check_artifact, is_judge_artifact, read_manifest
from reflectrm.checkpoints.backbones import BACKBONES
from reflectrm.checkpoints.files import ARTIFACT_MANIFEST, MANIFEST, VERDICT_WEIGHTS
from reflectrm.checkpoints.judges import ARTIFACTS, SHIPPED
from reflectrm.checkpoints.resolve import (
    BASE_MODEL,
    DEFAULT_MODEL,
    builds_checkpoint,
    judge_manifest,
    named_folder,
    trained_template,
)
from reflectrm.settings import Settings

ROOT = Path(__file__).resolve().parents[2]
QWEN05B = SHIPPED["qwen05b"].folder
DEFAULT_JUDGE = SHIPPED[DEFAULT_MODEL].folder


def test_the_register_names_each_shipped_folder_after_its_setting() -> None:
    assert list(SHIPPED) == [DEFAULT_MODEL, "qwen05b", "smollm2"]
    assert sorted(p.parent for p in ARTIFACTS.glob(f"*/{ARTIFACT_MANIFEST}")) == sorted(
        j.folder for j in SHIPPED.values()
    )
    for setting, judge in SHIPPED.items():
        assert judge.setting == setting
        assert judge.folder == ARTIFACTS / setting
        assert named_folder(setting) == judge.folder
        assert builds_checkpoint(setting)
        assert is_judge_artifact(judge.folder)


@pytest.mark.parametrize("setting", list(SHIPPED))
def test_the_register_agrees_with_each_manifest(setting: str) -> None:
    judge = SHIPPED[setting]
    manifest = judge.manifest()
    assert manifest == read_manifest(judge.folder) == judge_manifest(setting)
    check_artifact(judge.folder, manifest, None)  # every file's sha256, after the move too
    assert manifest["base_model"]["name"] == judge.backbone
    assert manifest["template_version"] == judge.template
    assert trained_template(setting) == judge.template
    # where the manifest records the base model's licence, the register states the same
    assert manifest["base_model"].get("licence", judge.licence) == judge.licence
    assert judge.commands()
    assert all(c.startswith("reflectrm train ") for c in judge.commands())
    # where the manifest records the commands of its run, they are the recipe's
    recorded = str(manifest.get("command", ""))
    for command in recorded.split(";"):
        if command.strip().startswith("reflectrm train "):
            assert " ".join(command.split()[:3]) in judge.commands()


def test_a_folder_given_as_the_model_setting_is_that_folder(tmp_path: Path) -> None:
    assert named_folder(str(QWEN05B)) == QWEN05B
    assert trained_template(str(QWEN05B)) == "v3"
    assert named_folder(str(tmp_path / "elsewhere")) == tmp_path / "elsewhere"
    assert named_folder("~/judge") == Path("~/judge").expanduser()


def test_the_package_data_ships_every_registered_folder() -> None:
    import tomllib

    data = tomllib.loads((ROOT / "pyproject.toml").read_text())
    shipped = data["tool"]["setuptools"]["package-data"]["reflectrm"]
    package = ARTIFACTS.parent
    for judge in SHIPPED.values():
        assert f"{judge.folder.relative_to(package).as_posix()}/*" in shipped


def test_the_qwen_judge_is_a_checked_artifact_on_its_registry_backbone() -> None:
    assert named_folder("qwen05b") == QWEN05B
    assert is_judge_artifact(QWEN05B)
    manifest = read_manifest(QWEN05B)
    check_artifact(QWEN05B, manifest, None)  # every file's sha256
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
    assert trained_template(DEFAULT_MODEL) == read_manifest(DEFAULT_JUDGE)["template_version"]
    assert trained_template(BASE_MODEL) is None
    assert trained_template("org/some-hub-model") is None
    assert trained_template(str(QWEN05B)) == "v3"


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
