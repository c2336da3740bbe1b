"""A shipped judge artifact: a LoRA adapter or an added layer in the package, merged into the base
model once.

``artifacts/smollm2/`` (the SmolLM2 judge) holds what ``reflectrm train judge`` made
(``adapter_model.safetensors``, ``adapter_config.json``), the verdict layer of ``reflectrm train
verdict`` when there is one (``verdict-layer.safetensors``), and ``manifest.json``: the sha256 of
every one of those files, of the base model's GGUF file, of the data files and of the held-out
split (which the harness keeps), the command, seed, steps, wall time, CPU, and the held-out
figures. The served checkpoint is built from base + adapter into the cache folder once; every
hash is checked first, and a file whose hash differs is refused with a message naming it. The
merge is W + (alpha / r) * B @ A for each adapted weight, done here with torch and safetensors
alone, so that serving needs no peft.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from reflectrm.checkpoints.dtypes import SHORT, canonical, cast_weights, record_dtype
from reflectrm.checkpoints.files import (
    ADAPTER_CONFIG,
    ADAPTER_WEIGHTS,
    ARTIFACT_MANIFEST,
    BUILT_MARKER,
    MANIFEST,
    PREPARED_MARKER,
    VERDICT_WEIGHTS,
    building,
    file_sha256,
)
from reflectrm.checkpoints.validate import NotPreparedError

# The artifact's files a built checkpoint is made of: its record names their hashes, so that a
# change to any of them (and no other manifest entry) builds it again.
BUILT_FROM = (ADAPTER_WEIGHTS, ADAPTER_CONFIG, VERDICT_WEIGHTS)


class ArtifactError(ValueError):
    """The shipped judge's files do not match their manifest; the message says which."""


def is_judge_artifact(folder: Path) -> bool:
    """A folder holding an adapter or an added verdict layer, and its manifest (not a full
    checkpoint); or a manifest alone that names a base model and no files (a judge that is its
    backbone as it ships, served with the template and margin weights its manifest names)."""
    if not (folder / ARTIFACT_MANIFEST).is_file():
        return False
    if (folder / ADAPTER_WEIGHTS).is_file() or (folder / VERDICT_WEIGHTS).is_file():
        return True
    return weights_free(folder)


def weights_free(folder: Path) -> bool:
    """Whether the artifact's manifest names a base model and no files of its own."""
    try:
        manifest = json.loads((folder / ARTIFACT_MANIFEST).read_text())
    except (OSError, ValueError):
        return False
    return isinstance(manifest, dict) and "base_model" in manifest and not manifest.get("files")


def read_manifest(artifact: Path) -> dict[str, Any]:
    path = artifact / ARTIFACT_MANIFEST
    if not path.is_file():
        raise ArtifactError(f"{artifact} has no {ARTIFACT_MANIFEST}: not a judge artifact")
    return dict(json.loads(path.read_text()))


def check_artifact(artifact: Path, manifest: dict[str, Any], gguf: Path | None) -> None:
    """Every file the manifest names has the recorded sha256 (and the base GGUF too, when
    given); else an ArtifactError naming the file and both hashes."""
    for name, want in manifest["files"].items():
        path = artifact / name
        if not path.is_file():
            raise ArtifactError(f"judge artifact file {path} is missing")
        got = file_sha256(path)
        if got != want:
            raise ArtifactError(
                f"judge artifact file {name} has sha256 {got}, its manifest records {want}: "
                "the file was changed or damaged; restore it (git checkout) or retrain"
            )
    if gguf is not None:
        want = manifest["base_model"]["gguf_sha256"]
        got = file_sha256(gguf)
        if got != want:
            raise ArtifactError(
                f"base model file {gguf.name} has sha256 {got}, the judge was trained on "
                f"{want}: install {manifest['base_model']['source']} or serve another model"
            )


def judge_dir(cache_dir: Path, manifest: dict[str, Any], dtype: str = "float32") -> Path:
    """The built checkpoint's folder: named by the artifact's name, a digest of every file it is
    built from (the adapter, and the added verdict layer when there is one) and its weights'
    dtype; never by the artifact folder's path, so a moved folder finds the same build."""
    built_from = sorted(
        (n, h) for n, h in manifest["files"].items() if n in (ADAPTER_WEIGHTS, VERDICT_WEIGHTS)
    )
    digest = hashlib.sha256(json.dumps(built_from).encode()).hexdigest()[:12]
    return cache_dir / "models" / f"{manifest['name']}-{digest}-{SHORT[canonical(dtype)]}"


def prepare_judge(
    cache_dir: Path,
    gguf: Path,
    prepare_base: Callable[[], Path],
    say: Callable[[str], None],
    artifact: Path,
    dtype: str = "float32",
    build: bool = True,
) -> Path:
    """The served judge of ``artifact`` in ``dtype``: built from base + adapter once
    (``prepare_base`` gives the float32 base checkpoint's folder; the merge is done in float32,
    then written in ``dtype``), its inputs checked each time; unless ``build``, only found
    (NotPreparedError when it is not there)."""
    manifest = read_manifest(artifact)
    dtype = canonical(dtype)
    target = judge_dir(cache_dir, manifest, dtype)
    marker = target / BUILT_MARKER
    if marker.is_file() and _recorded(marker) == _record(manifest, dtype):
        # Cheap on every start: the artifact's small files are hashed again, the base's GGUF
        # was hashed when the checkpoint was built and is checked by size.
        check_artifact(artifact, manifest, None)
        if gguf.stat().st_size == manifest["base_model"]["gguf_size"] and _intact(target):
            return target
    if not build:
        raise NotPreparedError(f"{target} is not built")
    check_artifact(artifact, manifest, gguf)
    base = prepare_base()
    say(f"building the default judge {manifest['name']} from {base.name} + its adapter ...")
    started = time.monotonic()
    with building(target) as work:
        merge_adapter(base, artifact, work, dtype)
        (work / MANIFEST).write_text(json.dumps(_served_manifest(manifest), indent=1))
        (work / BUILT_MARKER).write_text(json.dumps(_record(manifest, dtype)))
    say(f"default judge ready at {target} ({time.monotonic() - started:.0f} s)")
    return target


def _built_from(files: dict[str, str]) -> dict[str, str]:
    return {name: sha for name, sha in files.items() if name in BUILT_FROM}


def _record(manifest: dict[str, Any], dtype: str) -> dict[str, Any]:
    return {
        "files": _built_from(manifest["files"]),
        "base_gguf_sha256": manifest["base_model"]["gguf_sha256"],
        "dtype": dtype,
    }


def _recorded(marker: Path) -> Any:
    """A built checkpoint's record, its files those it was built from (a record written when
    the manifest listed other files too still matches)."""
    try:
        record = json.loads(marker.read_text())
        return {**record, "files": _built_from(record["files"])}
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None


def _served_manifest(manifest: dict[str, Any]) -> dict[str, Any]:
    """The checkpoint's own manifest (what validate_checkpoint reads): the template and where
    the checkpoint came from."""
    keep = ("name", "template_version", "base_model", "command", "heldout")
    return {k: manifest[k] for k in keep if k in manifest}


def _intact(target: Path) -> bool:
    return (target / "config.json").is_file() and any(
        p.stat().st_size > 0 for p in target.glob("*.safetensors")
    )


def merge_adapter(base: Path, adapter: Path, out: Path, dtype: str | None = None) -> None:
    """Write base + LoRA adapter, merged (in float32), as a safetensors checkpoint in ``out``:
    in ``dtype``, or (None) in the base's dtype with an added layer in float32."""
    from safetensors.torch import load_file, save_file

    out.mkdir(parents=True, exist_ok=True)
    shards = sorted(base.glob("*.safetensors"))
    if len(shards) != 1:
        raise ArtifactError(f"{base} has {len(shards)} weight files; one is expected")
    weights = load_file(str(shards[0]))
    if (adapter / ADAPTER_WEIGHTS).is_file():
        config = json.loads((adapter / ADAPTER_CONFIG).read_text())
        if config.get("use_rslora") or config.get("use_dora") or config.get("fan_in_fan_out"):
            raise ArtifactError("only plain LoRA adapters (no rsLoRA, DoRA, fan_in_fan_out) merge")
        scale = float(config["lora_alpha"]) / float(config["r"])
        lora = load_file(str(adapter / ADAPTER_WEIGHTS))
        if apply_lora(weights, lora, scale) == 0:
            raise ArtifactError(f"{adapter / ADAPTER_WEIGHTS} holds no LoRA weights")
    verdict = adapter / VERDICT_WEIGHTS
    added = add_layer(weights, verdict) if verdict.is_file() else None
    if dtype is not None:
        weights = cast_weights(weights, dtype)
    save_file(weights, str(out / shards[0].name), metadata={"format": "pt"})
    skip = (MANIFEST, PREPARED_MARKER)
    for item in base.iterdir():
        if item.is_file() and item.suffix != ".safetensors" and item.name not in skip:
            shutil.copy2(item, out / item.name)
    if added is not None:
        config_path = out / "config.json"
        model_config = json.loads(config_path.read_text())
        model_config["num_hidden_layers"] = added + 1
        if isinstance(model_config.get("layer_types"), list):  # one entry per layer
            model_config["layer_types"] = [*model_config["layer_types"][:added], "full_attention"]
        config_path.write_text(json.dumps(model_config, indent=2) + "\n")
    if dtype is not None:
        record_dtype(out / "config.json", dtype)


def apply_lora(weights: dict[str, Any], lora: dict[str, Any], scale: float) -> int:
    """W + scale * B @ A for every ``.lora_A.`` / ``.lora_B.`` pair of ``lora``; how many."""
    import torch

    merged = 0
    for key, a in lora.items():
        if ".lora_A." not in key:
            continue
        b = lora[key.replace(".lora_A.", ".lora_B.")]
        name = _base_name(key.replace(".lora_A.weight", ".weight"))
        if name not in weights:
            raise ArtifactError(f"the adapter adapts {name}, which the base model does not have")
        w = weights[name]
        delta = (b.to(torch.float32) @ a.to(torch.float32)) * scale
        weights[name] = (w.to(torch.float32) + delta).to(w.dtype).contiguous()
        merged += 1
    return merged


def add_layer(weights: dict[str, Any], path: Path) -> int:
    """The added decoder layer of ``path`` into ``weights``: its attention and norms as stored,
    its MLP zero (so it adds nothing); returns its index. Refused when its index is not the
    base's layer count (it belongs to another model) or it holds weights of another layer."""
    import torch
    from safetensors import safe_open
    from safetensors.torch import load_file

    with safe_open(str(path), "pt") as f:
        index_text = (f.metadata() or {}).get("added_layer")
    if index_text is None:
        raise ArtifactError(f"{path.name} records no added_layer index in its metadata")
    index = int(index_text)
    layers = {int(k.split(".")[2]) for k in weights if k.startswith("model.layers.")}
    if index != len(layers):
        raise ArtifactError(
            f"{path.name} adds layer {index}, the base model has {len(layers)} layers: "
            "it belongs to another model"
        )
    added = unpack_sparse(load_file(str(path)))
    prefix = f"model.layers.{index}."
    stray = sorted(k for k in added if not k.startswith(prefix))
    if stray or not added:
        raise ArtifactError(f"{path.name} holds weights outside layer {index}: {stray[:3]}")
    weights.update({k: v.to(torch.float32).contiguous() for k, v in added.items()})
    template = "model.layers.0.mlp."
    for name in ("gate_proj", "up_proj", "down_proj"):
        shape = weights[f"{template}{name}.weight"].shape
        weights[f"{prefix}mlp.{name}.weight"] = torch.zeros(shape, dtype=torch.float32)
    return index


def unpack_sparse(stored: dict[str, Any]) -> dict[str, Any]:
    """Matrices stored sparse (as the harness's recipes write an added layer) made whole again:
    each ``K.indices``/``K.values``/``K.shape`` (the non-zero entries' (row, column) rows, their
    values, the shape) as the matrix ``K``; the other weights as they are."""
    import torch

    out = {k: v for k, v in stored.items() if not k.endswith((".indices", ".values", ".shape"))}
    for key in [k[: -len(".indices")] for k in stored if k.endswith(".indices")]:
        parts = [f"{key}.{p}" for p in ("values", "shape")]
        if any(p not in stored for p in parts):
            raise ArtifactError(f"{key} is stored sparse without its values or shape")
        indices, values, shape = stored[f"{key}.indices"], stored[parts[0]], stored[parts[1]]
        dense = torch.zeros([int(x) for x in shape.tolist()], dtype=values.dtype)
        dense[indices[:, 0], indices[:, 1]] = values
        out[key] = dense
    return out


def _base_name(key: str) -> str:
    """peft's key for a weight (``base_model.model.<name>``) as the base checkpoint names it."""
    prefix = "base_model.model."
    return key[len(prefix) :] if key.startswith(prefix) else key
