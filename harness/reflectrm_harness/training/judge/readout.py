"""Position-free frozen-feature readouts: how much a backbone separates better from worse.

From the states pass: each response's encoding is the state closing ``[End of Response 1]`` in
the order where it is shown first (it has read the system turn, the conversation and that
response only), divided by its RMS as a decoder layer's norm divides it. A pair's feature is
(chosen - rejected) with a random sign, fitted by a logistic regression without intercept, so
the readout cannot prefer a slot and scores a pair the same in either order. The training pairs
are weighted so that, within each source, pairs whose better response is longer and those where
it is shorter weigh the same, and each source weighs ``source_weights`` (default: equal).

Scored by length-balanced accuracy (the mean of accuracy over pairs whose better response is
longer and over pairs where it is shorter) with a bootstrap interval, the one implementation
of ``reflectrm_harness.evaluation.length``, on the development split and on the benchmark samples.
``reflectrm train readouts --states DIR [--states DIR2] --out FILE``.
"""

from __future__ import annotations

import json
import random
from collections import defaultdict
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from reflectrm_harness.evaluation.length import length_balanced
from reflectrm_harness.training.judge.model import fit_logistic
from reflectrm_harness.training.judge.states import load_plan, load_states


def pair_features(
    states: Mapping[str, Mapping[str, Any]], layer: str
) -> dict[tuple[str, str], dict[str, Any]]:
    """Per pair (source, id): the RMS-normalised end-of-response-1 state of the chosen response
    (from its chosen-first item) and of the rejected one (chosen-second item)."""
    import numpy as np

    halves: dict[tuple[str, str], dict[str, Any]] = defaultdict(dict)
    for name, rec in states.items():
        if layer not in rec:
            continue
        source, rest = name.split("/", 1)
        pid, order = rest.rsplit("/", 1)
        row = list(rec["positions"]).index("end1")
        h = np.asarray(rec[layer][row], dtype=np.float64)
        h = h / np.sqrt(np.mean(h * h) + 1e-6)
        halves[(source, pid)]["chosen" if order == "c1" else "rejected"] = h
    return {k: v for k, v in halves.items() if len(v) == 2}


def length_weights(
    keys: Sequence[tuple[str, str]],
    longer: Mapping[tuple[str, str], bool | None],
    source_weights: Mapping[str, float] | None = None,
) -> list[float]:
    """Each source's longer-better and shorter-better pairs weigh half its weight each; pairs of
    equal length weigh as one of the smaller stratum's pairs."""
    count: dict[tuple[str, Any], int] = defaultdict(int)
    for k in keys:
        count[(k[0], longer[k])] += 1
    out = []
    for k in keys:
        sw = (source_weights or {}).get(k[0], 1.0)
        n_long, n_short = count[(k[0], True)], count[(k[0], False)]
        if longer[k] is None:
            n = max(n_long, n_short, 1)
            out.append(sw / (2 * n))
        else:
            out.append(sw / (2 * max(count[(k[0], longer[k])], 1)))
    return out


def shares(weights: Any) -> Any:
    """Weights as shares of the loss (summing to one), as ``model.fit_logistic`` takes them."""
    import numpy as np

    w = np.asarray(weights, dtype=np.float64)
    return w / w.sum()


def readouts(
    state_dirs: Sequence[Path],
    *,
    penalties: Sequence[float] = (1e-4, 1e-3, 1e-2, 1e-1),
    source_weights: Mapping[str, float] | None = None,
    train_sources: Sequence[str] | None = None,
) -> dict[str, Any]:
    import numpy as np

    report: dict[str, Any] = {}
    loaded = [(folder, load_plan(folder), load_states(folder)) for folder in state_dirs]
    # backbones are compared on the same pairs: those every pass has read (both orders)
    common: set[tuple[str, str]] | None = None
    for _folder, _plan, states in loaded:
        keys = set(pair_features(states, "top"))
        common = keys if common is None else common & keys
    for folder, plan, states in loaded:
        role = {(it.source, it.pair_id): it.role for it in plan}
        longer = {(it.source, it.pair_id): it.chosen_longer for it in plan}
        model_report: dict[str, Any] = {"items": len(states), "common_pairs": len(common or ())}
        for layer in ("top", "mid"):
            feats = {k: v for k, v in pair_features(states, layer).items() if k in (common or ())}
            train = [
                k
                for k in feats
                if role[k] == "train" and (train_sources is None or k[0] in train_sources)
            ]
            if len(train) < 20:
                continue
            rng = random.Random(0)
            signs = np.array([rng.choice((-1.0, 1.0)) for _ in train])
            x = (
                np.stack([feats[k]["chosen"] - feats[k]["rejected"] for k in train])
                * signs[:, None]
            )
            wts = length_weights(train, longer, source_weights)
            by_penalty = {}
            dev = [k for k in feats if role[k] == "dev"]
            for pen in penalties:
                w, _ = fit_logistic(x, signs, pen, weights=shares(wts))
                scores = {k: float((feats[k]["chosen"] - feats[k]["rejected"]) @ w) for k in feats}
                res: dict[str, Any] = {}
                groups: dict[str, list[tuple[str, str]]] = defaultdict(list)
                for k in feats:
                    if role[k] == "dev":
                        groups["dev"].append(k)
                        groups[f"dev/{k[0]}"].append(k)
                    elif role[k] == "bench":
                        groups[f"bench/{k[0]}"].append(k)
                for g, ks in sorted(groups.items()):
                    correct = [
                        1.0 if scores[k] > 0 else (0.5 if scores[k] == 0 else 0.0) for k in ks
                    ]
                    res[g] = length_balanced(correct, [longer[k] for k in ks])
                by_penalty[str(pen)] = res
            model_report[layer] = {
                "train_pairs": len(train),
                "dev_pairs": len(dev),
                "by_penalty": by_penalty,
            }
        report[folder.name] = model_report
    return report


def write_readouts(
    state_dirs: Sequence[Path], out: Path, train_sources: Sequence[str] | None = None
) -> dict[str, Any]:
    """``readouts`` of the passes, written to ``out`` as JSON (``reflectrm train readouts``)."""
    report = readouts(state_dirs, train_sources=train_sources)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=1) + "\n")
    return report
