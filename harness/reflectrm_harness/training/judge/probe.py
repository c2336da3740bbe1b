"""``reflectrm train probe``: a linear verdict head fitted in closed form, written into the judge.

The supervised step (``sft``) teaches the output format in an hour of two CPU cores but,
at that budget, not the preference: its decision loss stays at ln 2. The preference is in the
network already: a logistic head on the hidden state just before the verdict digit separates
better from worse responses. This step connects the two without gradient descent through the
network:

1. **Features.** The trained run's model (base + adapter, merged as the service merges it)
   reads each training pair's judging prompt, in both orders, with the target's text up to the
   decision token (``<Analysis>Response ``). Kept: the final-norm hidden state at that
   position (what the output layer reads) and the model's own logit margin between the two
   digits there. Resumable: the features are saved every ``checkpoint_every_s`` and a resumed
   run continues with the next item of the same seeded order.
2. **Fit.** A logistic regression of the label (is the chosen response in slot 1) on the hidden
   state, with the model's own margin as an offset, an L2 penalty chosen by 5-fold
   cross-validation over pairs (both orders of a pair in one fold), no intercept (the pairs come
   in both orders, so none is needed, and the output layer has no bias to hold one).
3. **Into the model.** The head ``v`` is written into the output layer: its two digit rows move
   by ``+v/2`` and ``-v/2``, so the margin at every position becomes ``margin + v . h``. The
   base model ties its output layer to its input embeddings; the merged judge unties them (the
   inputs keep the base embeddings). The artifact stores ``v`` and the two token ids
   (``probe.safetensors``, 2 KB), and the merge applies it
   (``checkpoints.artifact.merge_adapter``).

The edit acts at every position, not only the decision: where the judge copies its decision
into the verdict, its own margin is large and the head's (about as large as at the decision)
does not overturn it; the parse rate measured with enforcement off is what shows it.
"""

from __future__ import annotations

import json
import random
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from reflectrm.checkpoints.files import PROBE_WEIGHTS
from reflectrm.datasets import Pair
from reflectrm_harness.training.judge.figures import PROBE_REPORT, summarize
from reflectrm_harness.training.judge.items import (
    digit_ids,
    longer_slot,
    planned_pairs,
    source_of,
    tokenize_targets,
)
from reflectrm_harness.training.judge.model import (
    load_model,
    merge_run,
    resolve_precision,
    save_atomically,
    use_threads,
)

FEATURES_FILE = "features.pt"
COPY_FEATURES_FILE = "copy-features.pt"


@dataclass(frozen=True)
class ProbeConfig:
    seed: int = 0
    max_pairs: int = 1200
    max_prompt_tokens: int = 640
    precision: str = "auto"
    threads: int = 0
    checkpoint_every_s: float = 120.0
    folds: int = 5
    penalties: tuple[float, ...] = (1e-3,)
    # Weights of the consistency term: the mean of (margin in one order + margin in the other)^2
    # over the pairs, which pushes the head toward features that flip with the order.
    consistencies: tuple[float, ...] = (0.0, 0.1, 0.3)
    # The head's margin is multiplied by this before it is written into the model (1: as fitted).
    scale: float = 1.0
    # The copy positions: the verdict's two digits (``<Result>Response k is better than Response
    # j``), read from this many pairs (both orders) with the whole target; the head is kept
    # orthogonal to their ``copy_directions`` main directions, so the judge still copies its
    # decision into the verdict and names the other response second.
    copy_pairs: int = 150
    copy_directions: int = 16


# --- features --------------------------------------------------------------------------------


def probe_plan(
    pairs: Sequence[Pair], renderer: Any, tokenizer: Any, config: ProbeConfig
) -> list[dict[str, Any]]:
    """The items, in a seeded order: each pair in both orders, its prompt plus the target up to
    the decision token; pairs longer than ``max_prompt_tokens`` left out."""
    tokens = tokenize_targets(tokenizer)
    d = tokens.decision["preference"]
    plan: list[dict[str, Any]] = []
    for pair, items in planned_pairs(
        pairs, renderer, tokens, config.seed, config.max_pairs, config.max_prompt_tokens
    ):
        for item in items:
            prefix = list(item.prompt_ids) + list(item.target_ids[:d])
            plan.append(
                {
                    "pair_id": pair.id,
                    "source": source_of(pair.id),
                    "label": item.label,
                    "ids": prefix,
                    "longer": longer_slot(pair, item.label),
                }
            )
    return plan


def extract_features(
    model_dir: Path,
    pairs: Sequence[Pair],
    out: Path,
    config: ProbeConfig,
    resume: bool = False,
    say: Callable[[str], None] = print,
    progress_bar: bool = True,
) -> dict[str, Any]:
    """The final-norm hidden state and the digit margin at the decision position of every
    planned item, saved in ``out/features.pt`` (resumable)."""
    import torch
    from transformers import AutoTokenizer

    from reflectrm.engines.chat import ChatRenderer

    precision = resolve_precision(config.precision)
    use_threads(config.threads)
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = load_model(model_dir)
    plan = probe_plan(pairs, ChatRenderer(tokenizer), tokenizer, config)
    one, two = digit_ids(tokenizer)
    out.mkdir(parents=True, exist_ok=True)
    path = out / FEATURES_FILE
    state: dict[str, Any] = {"items": [], "hidden": [], "margin": [], "seconds": 0.0}
    if path.is_file():
        if not resume:
            raise ValueError(f"{path} exists: pass --resume to continue it")
        state = torch.load(path, weights_only=False)
        say(f"resuming at item {len(state['items']) + 1} of {len(plan)}")
    state["digits"] = (one, two)
    captured: dict[str, Any] = {}
    hook = model.model.norm.register_forward_hook(
        lambda _m, _i, output: captured.__setitem__("h", output)
    )
    bar = None
    if progress_bar:
        from tqdm import tqdm

        bar = tqdm(total=len(plan), initial=len(state["items"]), unit="item", file=sys.stderr)
    last_save = time.monotonic()
    try:
        for index in range(len(state["items"]), len(plan)):
            item = plan[index]
            t0 = time.monotonic()
            ids = torch.tensor([item["ids"]], dtype=torch.long)
            with (
                torch.no_grad(),
                torch.autocast("cpu", dtype=torch.bfloat16, enabled=precision == "bf16"),
            ):
                logits = model(input_ids=ids, logits_to_keep=1).logits[0, -1].float()
            h = captured["h"][0, -1].float().clone()
            state["items"].append({k: v for k, v in item.items() if k != "ids"})
            state["hidden"].append(h)
            state["margin"].append(float(logits[one] - logits[two]))
            state["seconds"] += time.monotonic() - t0
            if bar is not None:
                bar.update(1)
            if time.monotonic() - last_save >= config.checkpoint_every_s:
                save_atomically(state, path)
                last_save = time.monotonic()
    finally:
        hook.remove()
        save_atomically(state, path)
        if bar is not None:
            bar.close()
    return {"items": len(state["items"]), "planned": len(plan), "seconds": state["seconds"]}


def extract_copy_features(
    model_dir: Path, pairs: Sequence[Pair], out: Path, config: ProbeConfig
) -> dict[str, Any]:
    """The final-norm hidden states and digit margins at the verdict's two digit positions
    (after the decision), for the first ``copy_pairs`` pairs of the plan in both orders, with
    the whole target; saved in ``out/copy-features.pt`` (made once)."""
    import torch
    from transformers import AutoTokenizer

    from reflectrm.engines.chat import ChatRenderer

    path = out / COPY_FEATURES_FILE
    if path.is_file():
        return dict(torch.load(path, weights_only=False))
    precision = resolve_precision(config.precision)
    use_threads(config.threads)
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = load_model(model_dir)
    tokens = tokenize_targets(tokenizer)
    one, two = digit_ids(tokenizer)
    short = replace(config, max_pairs=config.copy_pairs)
    plan = probe_plan(pairs, ChatRenderer(tokenizer), tokenizer, short)
    captured: dict[str, Any] = {}
    hook = model.model.norm.register_forward_hook(
        lambda _m, _i, output: captured.__setitem__("h", output)
    )
    hidden, margin = [], []
    try:
        for item in plan:
            target = tokens.targets[("preference", item["label"])]
            ids = list(item["ids"]) + list(target[tokens.decision["preference"] :])
            start = len(item["ids"])  # the decision token's index in ids
            with (
                torch.no_grad(),
                torch.autocast("cpu", dtype=torch.bfloat16, enabled=precision == "bf16"),
            ):
                logits = model(input_ids=torch.tensor([ids], dtype=torch.long)).logits[0]
            h = captured["h"][0].float()
            later = [k for k in range(start + 1, len(ids)) if ids[k] in (one, two)]
            for k in later:  # the state at k - 1 predicts token k
                hidden.append(h[k - 1].clone())
                margin.append(float(logits[k - 1, one].float() - logits[k - 1, two].float()))
    finally:
        hook.remove()
    state = {"hidden": hidden, "margin": margin, "items": len(plan)}
    save_atomically(state, path)
    return state


def copy_projector(copy_hidden: Any, directions: int) -> Any:
    """I - B B^T, B the ``directions`` main (uncentred) directions of the copy positions'
    hidden states: a head of the form P v is nearly blind at those positions."""
    import torch

    x = copy_hidden.double()
    _, _, vt = torch.linalg.svd(x, full_matrices=False)
    basis = vt[:directions].T
    return torch.eye(x.shape[1], dtype=torch.float64) - basis @ basis.T


# --- the fit ---------------------------------------------------------------------------------


def fit_head(
    hidden: Any,
    margin: Any,
    label: Any,
    penalty: float,
    consistency: float = 0.0,
    partners: Any = None,
) -> Any:
    """``v`` minimising mean softplus(-s (margin + v . h)) + penalty |v * sd|^2, s = +1 when the
    chosen response is in slot 1 and -1 otherwise, plus ``consistency`` times the mean over
    ``partners`` (rows: the indices of one pair's two orders) of (z_1 + z_2)^2, z = margin +
    v . h: a consistent judge's margins in the two orders are opposite. The features are scaled
    by their standard deviation for the fit (not centred: no intercept)."""
    import torch

    x = hidden.double()
    sd = x.std(dim=0).clamp_min(1e-6)
    xs = x / sd
    sign = (label.double() == 1).double() * 2 - 1
    z0 = margin.double()
    w = torch.zeros(x.shape[1], dtype=torch.float64, requires_grad=True)
    opt = torch.optim.LBFGS([w], lr=1.0, max_iter=500, line_search_fn="strong_wolfe")

    def closure() -> Any:
        opt.zero_grad()
        z = z0 + xs @ w
        loss = torch.nn.functional.softplus(-sign * z).mean() + penalty * (w @ w)
        if consistency > 0 and partners is not None and len(partners):
            loss = loss + consistency * ((z[partners[:, 0]] + z[partners[:, 1]]) ** 2).mean()
        loss.backward()
        return loss

    opt.step(closure)
    return (w.detach() / sd).float()


def partner_index(items: Sequence[dict[str, Any]]) -> Any:
    """Rows of (index, index): the two orders of each pair that has both among ``items``."""
    import torch

    seen: dict[str, list[int]] = {}
    for k, item in enumerate(items):
        seen.setdefault(item["pair_id"], []).append(k)
    rows = [v for v in seen.values() if len(v) == 2]
    return torch.tensor(rows, dtype=torch.long).reshape(-1, 2)


def evaluate_head(
    hidden: Any, margin: Any, items: Sequence[dict[str, Any]], v: Any, scale: float = 1.0
) -> list[dict[str, Any]]:
    """Per item: the head's margin and its verdict (1 when the margin is positive)."""
    z = margin + scale * (hidden @ v)
    return [
        {**item, "margin": float(m), "verdict": 1 if float(m) > 0 else 2}
        for item, m in zip(items, z, strict=True)
    ]


def fit_probe(out: Path, config: ProbeConfig, say: Callable[[str], None] = print) -> dict[str, Any]:
    """Cross-validate the penalty over pairs, fit on every item, write ``probe.safetensors``
    and ``probe-report.json`` (the cross-validated figures per penalty and of the one chosen)."""
    import torch
    from safetensors.torch import save_file

    state = torch.load(out / FEATURES_FILE, weights_only=False)
    items = [{**i, "source": source_of(i["pair_id"])} for i in state["items"]]
    copy = torch.load(out / COPY_FEATURES_FILE, weights_only=False)
    copy_hidden = torch.stack(copy["hidden"])
    projector = copy_projector(copy_hidden, config.copy_directions)
    hidden = (torch.stack(state["hidden"]).double() @ projector).float()
    margin = torch.tensor(state["margin"])
    label = torch.tensor([i["label"] for i in items])
    pair_ids = sorted({i["pair_id"] for i in items})
    rng = random.Random(config.seed)
    rng.shuffle(pair_ids)
    fold_of = {p: k % config.folds for k, p in enumerate(pair_ids)}
    folds = torch.tensor([fold_of[i["pair_id"]] for i in items])
    cv: dict[str, Any] = {}
    best: tuple[tuple[float, float], float] | None = None
    for penalty in config.penalties:
        for weight in config.consistencies:
            rows: list[dict[str, Any]] = [{}] * len(items)
            for k in range(config.folds):
                train = (folds != k).nonzero().flatten()
                v = fit_head(
                    hidden[train],
                    margin[train],
                    label[train],
                    penalty,
                    weight,
                    partner_index([items[i] for i in train.tolist()]),
                )
                test = (folds == k).nonzero().flatten().tolist()
                scored = evaluate_head(
                    hidden[test], margin[test], [items[i] for i in test], v, config.scale
                )
                for i, r in zip(test, scored, strict=True):
                    rows[i] = r
            figures = summarize(rows)
            key = f"penalty={penalty:g},consistency={weight:g}"
            cv[key] = figures
            both = figures["all"]["both_orders_right"]
            say(
                f"{key}: cross-validated accuracy {figures['all']['accuracy']:.3f}, "
                f"right in both orders {both:.3f}"
            )
            if best is None or both > best[1]:
                best = ((penalty, weight), both)
    assert best is not None
    (penalty, weight), _ = best
    v = fit_head(hidden, margin, label, penalty, weight, partner_index(items))
    v = (projector @ v.double()).float()
    # At the copy positions the head must not overturn the judge's own choice.
    copy_margin = torch.tensor(copy["margin"])
    pushed = config.scale * (copy_hidden @ v)
    flipped = int(((copy_margin + pushed).sign() != copy_margin.sign()).sum())
    copy_check = {
        "positions": len(copy["margin"]),
        "pairs": copy["items"] // 2,
        "smallest_model_margin": float(copy_margin.abs().min()),
        "largest_head_margin": float(pushed.abs().max()),
        "flipped": flipped,
    }
    say(f"copy positions: {copy_check}")
    if flipped:
        raise ValueError(
            f"the head overturns the judge's own digit at {flipped} of "
            f"{len(copy['margin'])} copy positions; raise copy_directions"
        )
    one, two = state["digits"]
    save_file(
        {
            "direction": (config.scale * v).contiguous(),
            "digits": torch.tensor([one, two], dtype=torch.int64),
        },
        str(out / PROBE_WEIGHTS),
        metadata={"format": "pt"},
    )
    base = summarize(
        [{**i, "verdict": 1 if m > 0 else 2} for i, m in zip(items, state["margin"], strict=True)]
    )
    report = {
        "config": asdict(config),
        "items": len(items),
        "pairs": len(pair_ids),
        "extraction_seconds": round(state["seconds"], 1),
        "penalty": penalty,
        "consistency": weight,
        "chosen_by": "cross-validated share of pairs right in both orders",
        "cross_validated": cv[f"penalty={penalty:g},consistency={weight:g}"],
        "model_alone": base,
        "copy_positions": copy_check,
        "by_setting": {
            k: {m: f["all"][m] for m in ("accuracy", "both_orders_right", "slot1_share")}
            for k, f in cv.items()
        },
        "digits": [one, two],
    }
    (out / PROBE_REPORT).write_text(json.dumps(report, indent=1) + "\n")
    return report


def run_probe(
    base_model: Path,
    run_dir: Path,
    pairs: Sequence[Pair],
    out: Path,
    config: ProbeConfig,
    resume: bool = False,
    fit_only: bool = False,
    say: Callable[[str], None] = print,
) -> dict[str, Any]:
    """Features from the run's merged model (unless ``fit_only``), the copy positions' states
    (once), then the fit. The held-out split is measured on the engine (``reflectrm eval``)."""
    with tempfile.TemporaryDirectory() as tmp:
        model = Path(tmp) / "model"

        def merged() -> Path:
            return model if model.is_dir() else merge_run(base_model, run_dir, model)

        if not fit_only:
            figures = extract_features(merged(), pairs, out, config, resume=resume, say=say)
            say(f"features: {figures['items']} of {figures['planned']} items")
        if not (out / COPY_FEATURES_FILE).is_file():
            extract_copy_features(merged(), pairs, out, config)
        return fit_probe(out, config, say=say)
