"""Fit margin mode's two weights on development features (``features``: ``reflectrm train
margin-features``) and report what each choice scores there, pooled over both orders.

    reflectrm train margin-fit --features dev.jsonl --features dev-cf.jsonl --out fit.json

The pooled probability that the chosen response is better is the mean over the two orders of
sigmoid(a * z_order + w * d + b * L): z the verdict digits' log-odds toward it in that order, d
its mean token log-prob minus the other's, L the log of its length over the other's. The length
term b is fitted beside the others and dropped when served (so a and w are not fitted to stand
in for length); a fit without it is reported too. Weights minimise the pooled log-loss (maximum
likelihood, no intercept: a response's place cannot enter the score).

Reported per choice (verdict only; verdict + likelihood; each with and without the length term
at fit time): pooled accuracy, length-balanced accuracy (the mean of accuracy where the chosen is
longer and where it is shorter), accuracy per source, and exact ties.
"""

from __future__ import annotations

import json
import math
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np


def load(paths: list[Path]) -> list[dict[str, Any]]:
    rows = []
    for path in paths:
        for line in path.read_text().splitlines():
            row = json.loads(line)
            if row.get("z_first") is not None and row.get("z_second") is not None:
                rows.append(row)
    return rows


def arrays(rows: list[dict[str, Any]]) -> dict[str, np.ndarray]:
    return {
        "z1": np.array([r["z_first"] for r in rows], dtype=float),
        "z2": np.array([r["z_second"] for r in rows], dtype=float),
        "d": np.array([r["l_chosen"] - r["l_rejected"] for r in rows], dtype=float),
        "L": np.array([math.log(max(1, r["lengths"][0]) / max(1, r["lengths"][1])) for r in rows]),
    }


def pooled(x: dict[str, np.ndarray], a: float, w: float, b: float = 0.0) -> np.ndarray:
    def sig(v: np.ndarray) -> np.ndarray:
        return 1.0 / (1.0 + np.exp(-np.clip(v, -50, 50)))

    extra = w * x["d"] + b * x["L"]
    return (sig(a * x["z1"] + extra) + sig(a * x["z2"] + extra)) / 2


def fit(x: dict[str, np.ndarray], likelihood: bool, length: bool) -> dict[str, float]:
    """Gradient descent with backtracking on the pooled log-loss (convex enough here: three
    weights, a smooth loss), from a = 1, w = b = 0."""
    mask = np.array([1.0, float(likelihood), float(length)])
    feats = [np.stack([x[z], x["d"], x["L"]], axis=1) for z in ("z1", "z2")]

    def loss_grad(theta: np.ndarray) -> tuple[float, np.ndarray]:
        sig = [1.0 / (1.0 + np.exp(-np.clip(f @ theta, -50, 50))) for f in feats]
        p = np.clip((sig[0] + sig[1]) / 2, 1e-12, 1.0)
        dp = sum((s * (1 - s))[:, None] * f for s, f in zip(sig, feats, strict=True)) / 2
        return float(-np.mean(np.log(p))), -np.mean(dp / p[:, None], axis=0) * mask

    theta = np.array([1.0, 0.0, 0.0])
    loss, grad = loss_grad(theta)
    step = 1.0
    for _ in range(3000):
        while step > 1e-10:
            trial = theta - step * grad
            trial_loss, trial_grad = loss_grad(trial)
            if trial_loss < loss:
                break
            step /= 2
        if step <= 1e-10 or loss - trial_loss < 1e-10:
            break
        theta, loss, grad, step = trial, trial_loss, trial_grad, step * 2
    a, w, b = (float(v) for v in theta)
    return {"a": a, "w": w, "b": b, "loss": loss}


def figures(rows: list[dict[str, Any]], p: np.ndarray) -> dict[str, Any]:
    right = p > 0.5
    tie = np.isclose(p, 0.5, atol=1e-12)
    longer = np.array([r["lengths"][0] > r["lengths"][1] for r in rows])
    shorter = np.array([r["lengths"][0] < r["lengths"][1] for r in rows])
    out: dict[str, Any] = {
        "pairs": len(rows),
        "accuracy": float(right.mean()),
        "ties": float(tie.mean()),
        "chosen_longer": [int(longer.sum()), float(right[longer].mean()) if longer.any() else None],
        "chosen_shorter": [
            int(shorter.sum()),
            float(right[shorter].mean()) if shorter.any() else None,
        ],
    }
    if longer.any() and shorter.any():
        out["length_balanced"] = (out["chosen_longer"][1] + out["chosen_shorter"][1]) / 2
    by: dict[str, list[bool]] = defaultdict(list)
    for r, ok in zip(rows, right, strict=True):
        key = r["source"] if r["source"] != "counterfactual" else f"counterfactual/{r['subset']}"
        by[key].append(bool(ok))
    out["by_source"] = {k: [len(v), sum(v) / len(v)] for k, v in sorted(by.items())}
    return out


def report(features: Sequence[Path]) -> dict[str, Any]:
    """Every choice's weights and development figures on the features' pairs (those with both
    orders' log-odds)."""
    rows = load(list(features))
    x = arrays(rows)
    out: dict[str, Any] = {"features": [str(p) for p in features], "choices": {}}
    out["choices"]["verdict (a=1, w=0)"] = {
        "weights": {"a": 1.0, "w": 0.0, "b": 0.0},
        "dev": figures(rows, pooled(x, 1.0, 0.0)),
    }
    for likelihood in (False, True):
        for length in (False, True):
            weights = fit(x, likelihood, length)
            name = ("verdict + likelihood" if likelihood else "verdict") + (
                ", length fitted and dropped" if length else ""
            )
            out["choices"][name] = {
                "weights": weights,
                "dev": figures(rows, pooled(x, weights["a"], weights["w"])),
            }
    return out


def margin_block(fitted: dict[str, Any], choose: str) -> dict[str, Any]:
    """The ``margin`` block of a judge's manifest: the chosen fit's two weights (4 decimals),
    its name, the feature files it was fitted on and its development figures."""
    chosen = fitted["choices"][choose]
    return {
        "verdict_weight": round(chosen["weights"]["a"], 4),
        "likelihood_weight": round(chosen["weights"]["w"], 4),
        "fit": choose,
        "fitted_on": [Path(p).name for p in fitted["features"]],
        "dev_pairs": chosen["dev"]["pairs"],
        "dev_accuracy": round(chosen["dev"]["accuracy"], 4),
        "dev_length_balanced": round(chosen["dev"].get("length_balanced", float("nan")), 4),
    }


def write_fit(
    features: Sequence[Path], out: Path, manifest: Path | None = None, choose: str | None = None
) -> dict[str, Any]:
    """The report written to ``out`` (JSON) and, with ``manifest`` (a judge artifact's
    manifest.json), its ``margin`` block set to the ``choose`` fit; the report."""
    fitted = report(features)
    if manifest is not None and choose not in fitted["choices"]:
        raise ValueError(f"--choose must be one of {', '.join(fitted['choices'])}, not {choose!r}")
    out.write_text(json.dumps(fitted, indent=1))
    if manifest is not None and choose is not None:
        body = json.loads(manifest.read_text())
        body["margin"] = margin_block(fitted, choose)
        manifest.write_text(json.dumps(body, indent=1) + "\n")
    return fitted


def summary_lines(fitted: dict[str, Any]) -> list[str]:
    """Two lines per choice: its weights and figures, then its accuracy per source."""
    lines = []
    for name, c in fitted["choices"].items():
        d = c["dev"]
        lines.append(
            f"{name:45s} a={c['weights']['a']:.3f} w={c['weights']['w']:.3f} "
            f"acc={100 * d['accuracy']:.1f} lb={100 * d.get('length_balanced', float('nan')):.1f} "
            f"ties={100 * d['ties']:.1f}"
        )
        lines.append(
            "    " + ", ".join(f"{k} {100 * v[1]:.0f}% ({v[0]})" for k, v in d["by_source"].items())
        )
    return lines
