"""The recipe substrate of ``training/judge``: the one split rule reproduces the splits the shipped
judges were built with (the SmolLM2 judge's stored split file, the qwen05b judge's pool counts, the
verdict layer's development prompts), and the one logistic fit gives what the three fits gave."""

from __future__ import annotations

import hashlib
import math

import numpy as np
import torch

from reflectrm.checkpoints.judges import SHIPPED
from reflectrm.judging.types import Message
from reflectrm_harness.datasets import Pair
from reflectrm_harness.training.judge.marker_layer import fit_probe
from reflectrm_harness.training.judge.model import fit_logistic
from reflectrm_harness.training.judge.pool import PoolConfig, read_pool, role_of
from reflectrm_harness.training.judge.readout import shares
from reflectrm_harness.training.judge.split import (
    JUDGE_SPLIT,
    make_split,
    prompt_key,
    read_sources,
    read_split,
)
from reflectrm_harness.training.judge.verdict_layer import VerdictConfig, is_dev
from support.prerequisites import require_shared_data


def test_the_smollm2_judges_manifest_records_the_harnesss_split_file() -> None:
    manifest = SHIPPED["smollm2"].manifest()
    assert manifest["split"]["file"] == JUDGE_SPLIT.name
    assert manifest["split"]["sha256"] == hashlib.sha256(JUDGE_SPLIT.read_bytes()).hexdigest()
    assert len(read_split(JUDGE_SPLIT)["pairs"]) == 843


def test_the_smollm2_judges_stored_split_is_made_again_exactly() -> None:
    train = require_shared_data("train")
    stored = read_split(JUDGE_SPLIT)
    sources = read_sources([train / name for name in stored["sources"]])
    assert make_split(sources, stored["fraction"], stored["seed"]) == stored


def test_the_qwen_judges_pool_is_split_again_as_its_manifest_records() -> None:
    train, benchmarks = require_shared_data("train"), require_shared_data("benchmarks")
    manifest = SHIPPED["qwen05b"].manifest()
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
    """``pool.role_of`` as it was when the qwen05b judge was built."""
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
        verdict = VerdictConfig(seed=seed, dev_fraction=fraction)
        assert [is_dev(p, verdict) for p in pairs] == [
            _old_is_dev(p, seed, fraction) for p in pairs
        ]


# A small fixed problem, and what the three fits of before gave on it (verdict_layer's
# _fit_logistic, as the readout and as a marker probe; readout.fit_logistic, with and without
# an offset; marker_layer.fit_probe), computed with them before they were folded into one.
X = [
    [math.sin(3 * i + j) + (0.5 if j == 0 and i % 3 else 0.0) for j in range(3)] for i in range(12)
]
Y = [1.0 if math.cos(2 * i) + X[i][0] > 0 else 0.0 for i in range(12)]
W = [1.0 + i % 4 for i in range(12)]
OFFSET = [0.3 * math.cos(i) for i in range(12)]
OLD = {
    "verdict_readout": [0.49197492003440857, 2.060818672180176, -2.224586009979248],
    "verdict_probe": [-2.212656021118164, 3.9512598514556885, -5.3751654624938965],
    "readout": [0.9284435568282585, 0.25737353082833103, -1.203435071829294],
    "readout_offset": [0.9480610681910769, 0.19117435520167633, -1.2069156862418107],
    "marker_probe": [
        -3.0670863273604954,
        4.928488515940743,
        -6.337066920046614,
        2.1910679431244646,
    ],
}


def test_the_one_logistic_fit_gives_what_the_three_fits_gave() -> None:
    y = np.array(Y)
    signs = 2 * y - 1
    got = {}
    # verdict_layer: the mean log-loss, LBFGS's default stopping, 300 steps (200 with a bias)
    got["verdict_readout"], _ = fit_logistic(X, Y, 1e-3, max_iter=300, tolerance_grad=1e-7)
    weight = np.where(y > 0, (y == 0).sum() / y.sum(), 1.0) / len(y)
    got["verdict_probe"], _ = fit_logistic(
        X, Y, 1e-3, weights=weight, bias=True, max_iter=200, tolerance_grad=1e-7
    )
    # readout and marker_layer: weights as shares, labels +-1, a bias as a column of ones
    got["readout"], _ = fit_logistic(X, signs, 1e-2, weights=shares(W))
    got["readout_offset"], _ = fit_logistic(X, signs, 1e-2, weights=shares(W), offset=OFFSET)
    pos = torch.tensor([x for x, v in zip(X, Y, strict=True) if v > 0])
    others = torch.tensor([x for x, v in zip(X, Y, strict=True) if v == 0])
    coef, bias = fit_probe(pos, others, 1e-3)
    got["marker_probe"] = [*coef, bias]
    for name, old in OLD.items():
        assert np.allclose(got[name], old, rtol=0, atol=1e-6), name
