"""The training job end to end, tiny: build data with the real engine, two GRPO steps, export, and
the service serving the checkpoint through the model setting."""

from __future__ import annotations

import asyncio
import json
import shutil
from pathlib import Path

import httpx
import pytest

# No skip: `make test` installs the training extra, and CI must fail loudly if it is missing.
import trl  # noqa: F401

from reflectrm.checkpoints.files import MANIFEST
from reflectrm.checkpoints.resolve import resolve_model
from reflectrm.checkpoints.validate import CheckpointError, validate_checkpoint
from reflectrm.judging.prompts import TEMPLATE_VERSION
from reflectrm.judging.types import Message
from reflectrm_harness.datasets import Pair
from reflectrm_harness.training.grpo.config import load_settings
from reflectrm_harness.training.grpo.data import TRAIN_FILE, BuildConfig, build, read_items
from reflectrm_harness.training.grpo.train import METRICS_FILE, train
from tests.e2e.conftest import ForwardingEngine, separate_service

QUESTIONS = [
    ("What is the capital of France?", "Paris.", "Berlin."),
    ("What is 2 + 2?", "4", "5"),
    ("Name a primary colour.", "Red.", "Green tea."),
    ("Is the sun a star?", "Yes, the sun is a star.", "No, it is a planet."),
    ("Spell 'cat' backwards.", "tac", "cta"),
    ("How many legs does a spider have?", "Eight.", "Six."),
]


def test_build_train_export_and_serve(engine: ForwardingEngine, tmp_path: Path) -> None:
    pairs = [Pair(f"q{i}", (Message("user", q),), a, b) for i, (q, a, b) in enumerate(QUESTIONS)]
    data = tmp_path / "data"
    stats = asyncio.run(
        build(engine, pairs, BuildConfig(samples_per_pair=4, max_tokens=32, seed=1), data)
    )
    assert stats.judged == len(QUESTIONS)
    assert stats.judgments == 4 * len(QUESTIONS)
    items = read_items(data / TRAIN_FILE)
    assert len(items) == stats.preference_used + stats.reflection_used >= 2

    cfg = load_settings(
        None,
        {
            "output_dir": str(tmp_path / "run"),
            "max_steps": 2,
            "prompts_per_batch": 2,
            "group_size": 2,
            "micro_batch": 2,
            "max_completion_length": 16,
            "lora": True,
            "kl_beta": 0.0,
        },
    )
    folder = train(cfg, data / TRAIN_FILE)

    metrics = [
        json.loads(line) for line in (tmp_path / "run" / METRICS_FILE).read_text().splitlines()
    ]
    assert any("reward" in row for row in metrics)
    assert validate_checkpoint(folder).manifest is not None
    manifest = json.loads((folder / MANIFEST).read_text())
    assert manifest["template_version"] == TEMPLATE_VERSION
    assert manifest["data"]["statistics"]["judged"] == len(QUESTIONS)
    assert manifest["training"]["steps"] == 2

    # The service refuses a copy that claims another template version, with a clear message.
    other = tmp_path / "other-template"
    shutil.copytree(folder, other)
    (other / MANIFEST).write_text(json.dumps({**manifest, "template_version": "v0"}))
    with pytest.raises(CheckpointError, match="REFLECTRM_TEMPLATE_VERSION=v0"):
        resolve_model(str(other), tmp_path, TEMPLATE_VERSION)

    # REFLECTRM_MODEL=<checkpoint>: the service loads it and judges with it.
    with (
        separate_service(model=str(folder)) as service,
        httpx.Client(base_url=service.url, timeout=300) as client,
    ):
        assert client.get("/ready").status_code == 200
        r = client.post(
            "/v1/judge",
            json={
                "prompt": QUESTIONS[0][0],
                "responses": [QUESTIONS[0][1], QUESTIONS[0][2]],
                "num_candidates": 2,
            },
        )
        assert r.status_code == 200, r.text
        body = r.json()
        assert body["outcome"] in ("verdict", "no_verdict")
        assert body["model"] == folder.name
        assert body["template_version"] == TEMPLATE_VERSION
