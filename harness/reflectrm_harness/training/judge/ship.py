"""``reflectrm train ship-judge``: a finished judge run as the artifact the service ships.

The artifact folder (service/reflectrm/artifacts/smollm2 for the SmolLM2 judge) gets the adapter's
two files (and the verdict layer's, when given) and ``manifest.json`` recording the sha256 of each
of them, of the base model's GGUF file, of every data file and of the held-out split (which stays
with the harness, ``split.JUDGE_SPLIT``: the service does not read it), with the run's command,
settings, steps, wall time and CPU, and the held-out figures when given.
``checkpoints.artifact`` checks the files and the base model before it builds the served
checkpoint.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from reflectrm.checkpoints.base import (
    GGUF_NAME,
    SMOLLM2_NAME,
    WHEEL,
    default_cache_dir,
    find_gguf,
)
from reflectrm.checkpoints.files import (
    ADAPTER_CONFIG,
    ADAPTER_WEIGHTS,
    ARTIFACT_MANIFEST,
    VERDICT_WEIGHTS,
    file_sha256,
)
from reflectrm_harness.training.judge.figures import VERDICT_REPORT
from reflectrm_harness.training.judge.model import ADAPTER_DIR
from reflectrm_harness.training.judge.sft import CONFIG_FILE, SUMMARY_FILE
from reflectrm_harness.training.judge.split import held_out_keys, read_sources, read_split


def ship_judge(
    run: Path,
    data: Sequence[Path],
    split_file: Path,
    to: Path,
    name: str,
    command: str,
    heldout: dict[str, Any] | Path | None = None,
    verdict: Path | None = None,
) -> dict[str, Any]:
    """``heldout``: held-out figures to record, or a JSON file of them. ``verdict``: a folder of
    ``reflectrm train verdict`` whose added layer ships with the adapter (its file hashed like
    the others, its report in the manifest)."""
    if isinstance(heldout, Path):
        heldout = json.loads(heldout.read_text())
    summary_path = run / SUMMARY_FILE
    if not summary_path.is_file():
        raise ValueError(f"{run} has no {SUMMARY_FILE}: the run has not finished")
    summary = json.loads(summary_path.read_text())
    split = read_split(split_file)
    held_out_keys(split, read_sources(data))  # the data is the data the split names
    to.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(run / ADAPTER_DIR / ADAPTER_WEIGHTS, to / ADAPTER_WEIGHTS)
    adapter_config = json.loads((run / ADAPTER_DIR / ADAPTER_CONFIG).read_text())
    # peft records the base model's path on the training machine: name it instead.
    adapter_config["base_model_name_or_path"] = SMOLLM2_NAME
    (to / ADAPTER_CONFIG).write_text(json.dumps(adapter_config, indent=2, sort_keys=True) + "\n")
    shipped = [ADAPTER_WEIGHTS, ADAPTER_CONFIG]
    (to / VERDICT_WEIGHTS).unlink(missing_ok=True)
    if verdict is not None:
        shutil.copyfile(verdict / VERDICT_WEIGHTS, to / VERDICT_WEIGHTS)
        shipped.append(VERDICT_WEIGHTS)
    gguf = find_gguf(default_cache_dir(), print)
    run_config = json.loads((run / CONFIG_FILE).read_text())
    manifest: dict[str, Any] = {
        "name": name,
        "template_version": summary["config"]["template_version"],
        "base_model": {
            "name": SMOLLM2_NAME,
            "source": WHEEL,
            "gguf": GGUF_NAME,
            "gguf_sha256": file_sha256(gguf),
            "gguf_size": gguf.stat().st_size,
        },
        "files": {n: file_sha256(to / n) for n in shipped},
        "data": [{"file": p.name, "sha256": file_sha256(p)} for p in data],
        "split": {
            "file": split_file.name,
            "sha256": file_sha256(split_file),
            "unit": split["unit"],
            "fraction": split["fraction"],
            "seed": split["seed"],
            "sources": split["sources"],
        },
        "command": command,
        "seed": summary["config"]["seed"],
        "config": summary["config"],
        "plan": run_config["plan"],
        "steps": summary["step"],
        "train_seconds": summary["train_seconds"],
        "precision": summary["precision"],
        "threads": summary["threads"],
        "cpu": summary["cpu"],
    }
    if verdict is not None:
        report = json.loads((verdict / VERDICT_REPORT).read_text())
        manifest["verdict"] = report
    if heldout is not None:
        manifest["heldout"] = heldout
    (to / ARTIFACT_MANIFEST).write_text(json.dumps(manifest, indent=1) + "\n")
    return manifest
