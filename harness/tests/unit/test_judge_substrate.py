"""The recipe substrate of ``training/judge``: the one split rule reproduces the splits the shipped
judges were built with (the default judge's stored split file, judge-qwen05b's pool counts, the
verdict layer's development prompts)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from reflectrm.judging.types import Message
from reflectrm_harness.datasets import Pair
from reflectrm_harness.training.judge.pool import PoolConfig, read_pool, role_of
from reflectrm_harness.training.judge.split import (
    make_split,
    prompt_key,
    read_sources,
    read_split,
)
from reflectrm_harness.training.judge.verdict_layer import VerdictConfig, is_dev
from tests.conftest import require_shared_data

ARTIFACTS = Path(__file__).resolve().parents[3] / "service" / "reflectrm" / "artifacts"


def test_the_default_judges_stored_split_is_made_again_exactly() -> None:
    train = require_shared_data("train")
    stored = read_split(ARTIFACTS / "judge" / "holdout-split.json")
    sources = read_sources([train / name for name in stored["sources"]])
    assert make_split(sources, stored["fraction"], stored["seed"]) == stored


def test_the_qwen_judges_pool_is_split_again_as_its_manifest_records() -> None:
    train, benchmarks = require_shared_data("train"), require_shared_data("benchmarks")
    manifest = json.loads((ARTIFACTS / "judge-qwen05b" / "manifest.json").read_text())
    split = manifest["split"]
    config = PoolConfig()
    assert (config.seed, config.heldout_fraction, config.dev_fraction) == (
        split["seed"],
        split["heldout_fraction"],
        split["dev_fraction"],
    )
    pool = read_pool(
        sorted(train.glob("*.jsonl.gz")), sorted(benchmarks.glob("*.jsonl.gz")), config
    )
    got = {s: {k: v for k, v in info.items() if k != "licence"} for s, info in pool.sources.items()}
    assert got == split["sources"]


def _old_role(pair: Pair, seed: int, heldout: float, dev: float) -> str:
    """``pool.role_of`` as it was when judge-qwen05b was built."""
    digest = hashlib.sha256(f"judge-split:{seed}:{prompt_key(pair)}".encode()).digest()
    u = int.from_bytes(digest[:8], "big") / 2**64
    return "heldout" if u < heldout else "dev" if u < heldout + dev else "train"


def _old_is_dev(pair: Pair, seed: int, fraction: float) -> bool:
    """``verdict_layer.is_dev`` as it was when the default judge's verdict layer was built."""
    digest = hashlib.sha256(f"dev:{seed}:{prompt_key(pair)}".encode()).hexdigest()
    return int(digest[:8], 16) < fraction * 0x100000000


def test_the_one_rule_gives_the_pool_roles_and_development_prompts_of_before() -> None:
    pairs = [Pair(f"p{i}", (Message("user", f"question {i}"),), "a", "b") for i in range(3000)]
    for seed, heldout, dev in ((2026, 0.22, 0.15), (0, 0.5, 0.1)):
        config = PoolConfig(seed=seed, heldout_fraction=heldout, dev_fraction=dev)
        assert [role_of(p, config) for p in pairs] == [
            _old_role(p, seed, heldout, dev) for p in pairs
        ]
    for seed, fraction in ((0, 0.15), (3, 0.4)):
        config = VerdictConfig(seed=seed, dev_fraction=fraction)
        assert [is_dev(p, config) for p in pairs] == [_old_is_dev(p, seed, fraction) for p in pairs]
