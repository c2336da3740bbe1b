"""``reflectrm train verdict``: an added decoder layer that reads each response where it ends.

The supervised step (``sft``) teaches the output format in an hour of two CPU cores but, at
that budget, not the preference. A linear head on the state at the verdict's position
(tried and not shipped) finds little: that state has folded both responses together.
The states at the two end markers of the judging prompt (``[End of Response 1]``, ``[End of
Response 2]``) hold far more: a logistic readout of their difference separates better from
worse, and it is position-free by construction (the same readout scores either slot). This step
puts that comparison into the judge as one more decoder layer, built, not searched for by
gradient descent (which, from a random start, did not find the markers in an epoch):

1. **States, once.** The run's model (base + adapter, merged as the service merges it) reads
   each training pair's judging prompt in both orders followed by the whole target; the
   residual stream entering its top ``layers`` decoder layers is kept for every position (bf16;
   the layers above are not run). Resumable: the states are written in shards every
   ``checkpoint_every_s``, each named by its item's tokens, and a resumed pass computes only
   the planned items not saved yet (so a longer ``max_prompt_tokens`` adds to a finished pass).
   The frozen top layers then run on them in float32, giving the residual the added layer reads.
2. **Fitted parts**, on the training items (the added layer reads them through a unit-weight
   RMS norm): two marker probes (logistic: the end of Response k against random positions and
   the other marker), a readout ``w`` (logistic, no intercept, on the difference of the two
   markers' states, both orders), the mean state at the verdict's position (so the query is
   about the same for every prompt), and the direction ``u`` of the residual that moves the two
   verdict digits' logits apart through the final norm and the output layer.
3. **The layer.** Query heads 0 and 3 (key/value heads 0 and 1) put their query and the marker
   probes into the slowest rotary pair, whose turn over a 4,096-token context is under 0.06 rad,
   so the attention finds the marker wherever it is; the values carry ``w`` there; the output
   writes +``scale`` s1 and -``scale`` s2 along ``u``. Its MLP is zero. At the verdict the digit
   margin moves by about ``scale`` (s1 - s2) / rms(h).
4. **The scale**, from ``scales``, is the one with the lowest decision loss on the development
   prompts (``dev_fraction`` of the pool's prompts by a seeded hash, never fitted on) among
   those whose verdicts, computed as the served engine computes them (bf16, where the verdict
   digits' logits round to steps of 0.125-0.5 and a tie goes to " 1"), name Response 1 within
   ``slot1_band`` of half the time. The held-out split is measured on the engine
   (``reflectrm eval``), never here.

``checkpoints.artifact.merge_adapter`` adds the layer after the run's adapter is merged
(``verdict-layer.safetensors``, its index in the metadata, the MLP's zeros made by the merge).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from reflectrm.checkpoints.files import VERDICT_WEIGHTS
from reflectrm_harness.datasets import Pair
from reflectrm_harness.training.judge.figures import VERDICT_REPORT, summarize
from reflectrm_harness.training.judge.items import (
    digit_ids,
    longer_slot,
    planned_pairs,
    source_of,
    tokenize_targets,
)
from reflectrm_harness.training.judge.model import (
    cpu_name,
    fit_logistic,
    load_model,
    merge_run,
    pack_sparse,
    resolve_precision,
    use_threads,
)
from reflectrm_harness.training.judge.split import prompt_draw, role_by_draw
from reflectrm_harness.training.judge.states import STATES_DIR, load_records, run_pass

PLAN_FILE = "verdict-plan.json"


@dataclass(frozen=True)
class VerdictConfig:
    seed: int = 0
    max_pairs: int = 4000
    max_prompt_tokens: int = 2048
    # The share of the training pool's prompts kept for choosing the scale (never fitted on).
    dev_fraction: float = 0.15
    # The pass stops this many layers below the top; they run frozen, in float32, afterwards.
    layers: int = 2
    # Random positions per training item that the marker probes learn to tell from a marker.
    negatives_per_item: int = 40
    probe_penalty: float = 1e-3
    readout_penalty: float = 1e-3
    # The added attention's sharpness: the query's size (times the marker probe's score).
    sharpness: float = 16.0
    # Candidate scales of the added layer's push on the verdict digits; the one with the lowest
    # development decision loss is written.
    scales: tuple[float, ...] = (3.0, 5.0, 8.0, 12.0, 20.0, 30.0, 40.0, 60.0)
    # The scale must keep the development verdicts' Response-1 share within this of 50% as the
    # served engine computes them (bf16 logits, a tie going to the lower token id, " 1").
    slot1_band: float = 0.03
    precision: str = "auto"  # of the states' forward pass
    threads: int = 0
    checkpoint_every_s: float = 180.0

    def fingerprint(self) -> str:
        """What a saved state depends on besides its item's tokens: a resumed pass must share
        it (the states are kept per item, so a plan with more or fewer items reuses them)."""
        keep = ("layers", "precision")
        body = {k: v for k, v in asdict(self).items() if k in keep}
        return hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()[:16]


# --- the plan --------------------------------------------------------------------------------


def is_dev(pair: Pair, config: VerdictConfig) -> bool:
    """Whether a pair's prompt is one of the development prompts (the split rule, on a 32-bit
    draw)."""
    draw = prompt_draw(pair, f"dev:{config.seed}", bits=32)
    return role_by_draw(draw, [("dev", config.dev_fraction)]) == "dev"


def verdict_plan(
    pairs: Sequence[Pair], renderer: Any, tokenizer: Any, config: VerdictConfig
) -> list[dict[str, Any]]:
    """The items, in a seeded order: each pair in both orders (adjacent), prompt + whole target;
    pairs whose prompt is longer than ``max_prompt_tokens`` left out."""
    tokens = tokenize_targets(tokenizer)
    d = tokens.decision["preference"]
    plan: list[dict[str, Any]] = []
    for pair, items in planned_pairs(
        pairs, renderer, tokens, config.seed, config.max_pairs, config.max_prompt_tokens
    ):
        dev = is_dev(pair, config)
        for item in items:
            ids = list(item.prompt_ids) + list(item.target_ids)
            plan.append(
                {
                    "pair_id": pair.id,
                    "source": source_of(pair.id),
                    "label": item.label,
                    "ids": ids,
                    "prompt": len(item.prompt_ids),
                    "decision": len(item.prompt_ids) + d,  # the decision token's index in ids
                    "longer": longer_slot(pair, item.label),
                    "dev": dev,
                    "key": item_key(ids),
                }
            )
    return plan


def item_key(ids: Sequence[int]) -> str:
    """A saved state's name: the hash of its item's tokens."""
    return hashlib.sha256(json.dumps(list(ids)).encode()).hexdigest()[:20]


# --- states ----------------------------------------------------------------------------------


class _StopForwardError(Exception):
    """Raised by the capture hook: the layers above the kept one need not run."""


def extract_states(
    model_dir: Path,
    plan: Sequence[dict[str, Any]],
    out: Path,
    config: VerdictConfig,
    resume: bool = False,
    say: Callable[[str], None] = print,
    progress_bar: bool = True,
) -> dict[str, Any]:
    """The residual stream entering layer ``n_layers - layers`` at every position of every
    planned item, by the one states pass (``states.run_pass``) under ``out/states`` (bf16), each
    state named by its item's tokens (``key``). Resumable: with ``resume`` the items already
    saved are skipped, so a stopped pass, or a plan that adds items (a longer
    ``max_prompt_tokens``), computes only what is missing."""
    import torch

    precision = resolve_precision(config.precision)
    use_threads(config.threads)

    def start() -> Callable[[list[dict[str, Any]]], dict[str, Any]]:
        model = load_model(model_dir)
        first = model.config.num_hidden_layers - config.layers
        captured: dict[str, Any] = {}

        def hook(_module: Any, args: Any, kwargs: Any) -> None:
            captured["h"] = args[0] if args else kwargs["hidden_states"]
            raise _StopForwardError

        model.model.layers[first].register_forward_pre_hook(hook, with_kwargs=True)

        def read(unit: list[dict[str, Any]]) -> dict[str, Any]:
            (item,) = unit
            with (
                torch.inference_mode(),
                torch.autocast("cpu", dtype=torch.bfloat16, enabled=precision == "bf16"),
                contextlib.suppress(_StopForwardError),
            ):
                model(input_ids=torch.tensor([item["ids"]], dtype=torch.long))
            return {item["key"]: captured["h"][0].to(torch.bfloat16).clone()}

        return read

    return run_pass(
        out / STATES_DIR,
        [[item] for item in plan],
        lambda item: str(item["key"]),
        start,
        {"fingerprint": config.fingerprint()},
        checkpoint_every_s=config.checkpoint_every_s,
        resume=resume,
        say=say,
        progress_bar=progress_bar,
    )


def load_states(out: Path, plan: Sequence[dict[str, Any]]) -> tuple[list[Any], float]:
    """The saved state of every planned item, in plan order, and the pass's seconds (over
    every saved state, the plan's or not)."""
    found, seconds = load_records(out / STATES_DIR, {item["key"] for item in plan})
    missing = len({item["key"] for item in plan} - set(found))
    if missing:
        raise ValueError(f"{missing} planned items have no saved state: run the pass with --resume")
    return [found[item["key"]] for item in plan], seconds


# --- the added layer ---------------------------------------------------------------------------


class VerdictLayer:
    """The judge's top ``layers`` decoder layers, frozen and run in float32 on the saved states,
    then one added decoder layer whose attention is trained (its MLP is zero, so it adds
    nothing), the final norm and the output layer. The added attention can read each response
    where the prompt ends it, which the last position alone does not hold."""

    def __init__(self, model: Any, config: VerdictConfig) -> None:
        import torch
        from transformers.models.llama.modeling_llama import LlamaAttention, LlamaRMSNorm

        for p in model.parameters():
            p.requires_grad_(False)
        n = model.config.num_hidden_layers
        self.model = model
        self.first = n - config.layers
        self.index = n  # the added layer's index in the served model
        self.norm = LlamaRMSNorm(model.config.hidden_size, eps=model.config.rms_norm_eps)
        self.norm.weight.requires_grad_(False)
        self.attn = LlamaAttention(model.config, layer_idx=n)
        self._served: tuple[Any, ...] | None = None
        with torch.no_grad():
            for lin in (self.attn.q_proj, self.attn.k_proj, self.attn.v_proj, self.attn.o_proj):
                lin.weight.zero_()  # zero output until built: the run's judge exactly

    def final(self, states: Any, keep: Any = None) -> Any:
        """The residual stream leaving the frozen top layers, from the saved states; kept in
        bf16 (``keep``: another dtype)."""
        import torch

        with torch.no_grad():
            h, positions, rotary, mask = self._prepare(states)
            for layer in self.model.model.layers[self.first :]:
                h = layer(
                    h, attention_mask=mask, position_embeddings=rotary, position_ids=positions
                )
        return h[0].to(torch.bfloat16 if keep is None else keep)

    def _prepare(self, states: Any, dtype: Any = None) -> tuple[Any, Any, Any, Any]:
        import torch
        from transformers.masking_utils import create_causal_mask

        h = states.to(dtype or torch.float32).unsqueeze(0)
        positions = torch.arange(h.shape[1]).unsqueeze(0)
        inner = self.model.model
        mask = create_causal_mask(
            config=inner.config,
            inputs_embeds=h,
            attention_mask=None,
            past_key_values=None,
            position_ids=positions,
        )
        return h, positions, inner.rotary_emb(h, position_ids=positions), mask

    def logits(self, final: Any, start: int) -> Any:
        """The output layer's logits at positions ``start`` .. end - 1 of one item, from the
        residual leaving the frozen layers (as the served model computes them)."""
        h, positions, rotary, mask = self._prepare(final)
        added, _ = self.attn(
            self.norm(h), position_embeddings=rotary, attention_mask=mask, position_ids=positions
        )
        h = h + added
        return self.model.lm_head(self.model.model.norm(h[:, start:]))[0]

    def served_margin(self, final: Any, position: int, digits: tuple[int, int]) -> float:
        """The two verdict digits' logit margin at ``position`` as a bf16 engine computes it:
        the added layer, the final norm and the output layer in bf16, the logits rounded to
        bf16 (a margin of 0 is a tie, which greedy decoding gives to the lower token id)."""
        import copy

        import torch

        if self._served is None:
            self._served = (
                copy.deepcopy(self.attn).to(torch.bfloat16),
                copy.deepcopy(self.norm).to(torch.bfloat16),
                copy.deepcopy(self.model.model.norm).to(torch.bfloat16),
                self.model.lm_head.weight.detach()[list(digits)].to(torch.bfloat16),
            )
        attn, norm, final_norm, rows = self._served
        with torch.no_grad():
            h, positions, rotary, mask = self._prepare(final[: position + 1], torch.bfloat16)
            added, _ = attn(
                norm(h), position_embeddings=rotary, attention_mask=mask, position_ids=positions
            )
            logits = final_norm(h[:, -1] + added[:, -1]) @ rows.T
        return float(logits[0, 0].float() - logits[0, 1].float())

    def normed(self, final: Any) -> Any:
        """What the added attention reads: the residual through its (unit-weight) RMS norm."""
        import torch

        with torch.no_grad():
            return self.norm(final.to(torch.float32))

    def build(self, parts: dict[str, Any], scale: float) -> None:
        """Set the attention from its fitted parts (see ``build_verdict``): query heads 0 and 3
        (of key/value heads 0 and 1) look for the ends of Response 1 and Response 2 through the
        slowest rotary pair (dimension 31 of 64, which turns by under 0.06 rad over 4,096
        positions), read the readout ``w`` there into dimension 0, and write +/- ``scale`` times
        it along ``u``: the verdict digits' margin moves by about scale (s1 - s2) / rms(h)."""
        import torch

        self._served = None  # its bf16 copy is made again from the new weights
        a = self.attn
        d = a.head_dim
        slow = d // 2 - 1
        per_kv = a.num_key_value_groups
        with torch.no_grad():
            for lin in (a.q_proj, a.k_proj, a.v_proj, a.o_proj):
                lin.weight.zero_()
            for kv, probe in ((0, parts["probe_1"]), (1, parts["probe_2"])):
                a.q_proj.weight[kv * per_kv * d + slow] = parts["query"]
                a.k_proj.weight[kv * d + slow] = probe
                a.v_proj.weight[kv * d] = parts["readout"]
            a.o_proj.weight[:, 0] = scale * parts["u"]
            a.o_proj.weight[:, per_kv * d] = -scale * parts["u"]

    def state(self) -> dict[str, Any]:
        """The added layer's weights as the served checkpoint names them (the MLP's zero weights
        are made by the merge)."""
        prefix = f"model.layers.{self.index}"
        out = {
            f"{prefix}.self_attn.{name}.weight": getattr(self.attn, name).weight.detach().clone()
            for name in ("q_proj", "k_proj", "v_proj", "o_proj")
        }
        out[f"{prefix}.input_layernorm.weight"] = self.norm.weight.detach().clone()
        out[f"{prefix}.post_attention_layernorm.weight"] = self.norm.weight.detach().clone()
        return out

    def load(self, state: dict[str, Any]) -> None:
        import torch

        prefix = f"model.layers.{self.index}"
        with torch.no_grad():
            for name in ("q_proj", "k_proj", "v_proj", "o_proj"):
                getattr(self.attn, name).weight.copy_(state[f"{prefix}.self_attn.{name}.weight"])


def marker_positions(ids: Sequence[int], prompt: int, ends: dict[int, list[int]]) -> list[int]:
    """The index of the last token of ``[End of Response 1]`` and of ``[End of Response 2]`` in
    a prompt (their last occurrence before ``prompt``). Judged texts never hold them: the
    renderer quotes bracketed markers inside a text as ``(End of Response 1)``."""
    found = []
    for k in (1, 2):
        tail = ends[k]
        hits = [
            i + len(tail) - 1
            for i in range(prompt - len(tail), -1, -1)
            if list(ids[i : i + len(tail)]) == tail
        ]
        if not hits:
            raise ValueError(f"no [End of Response {k}] marker in a judging prompt")
        found.append(hits[0])
    return found


def end_marker_ids(tokenizer: Any) -> dict[int, list[int]]:
    """The tokens of ``End of Response k]`` as the template's markers tokenize after ``[``."""
    out = {}
    for k in (1, 2):
        ids = tokenizer.encode(f"\n[End of Response {k}]", add_special_tokens=False)
        words = [tokenizer.decode([i]) for i in ids]
        start = next(i for i, w in enumerate(words) if w.strip() == "End")
        out[k] = ids[start:]
    return out


def build_verdict(
    layer: VerdictLayer,
    finals: Sequence[Any],
    items: Sequence[dict[str, Any]],
    tokenizer: Any,
    config: VerdictConfig,
    say: Callable[[str], None] = print,
) -> dict[str, Any]:
    """Fit the added attention's parts on the training items and choose its scale on the
    development items; the layer is left built with the chosen scale. Returns the figures."""
    import torch

    ends = end_marker_ids(tokenizer)
    where = [(*marker_positions(it["ids"], it["prompt"], ends), it["decision"] - 1) for it in items]
    dev = torch.tensor([bool(it["dev"]) for it in items])
    train = ~dev
    n1 = torch.stack([layer.normed(f[r[0]]) for f, r in zip(finals, where, strict=True)])
    n2 = torch.stack([layer.normed(f[r[1]]) for f, r in zip(finals, where, strict=True)])
    nd = torch.stack([layer.normed(f[r[2]]) for f, r in zip(finals, where, strict=True)])
    generator = torch.Generator().manual_seed(config.seed)
    negatives = []
    for f, r, it in zip(finals, where, items, strict=True):
        if it["dev"]:
            continue
        idx = torch.randint(0, f.shape[0], (config.negatives_per_item,), generator=generator)
        idx = idx[(idx != r[0]) & (idx != r[1])]
        negatives.append(layer.normed(f[idx]))
    neg = torch.cat(negatives)

    def fit(x: Any, y: Any, penalty: float, **kw: Any) -> Any:
        # LBFGS's default stopping, 300 steps (200 with a bias, which is fitted and dropped)
        steps = 200 if kw.get("bias") else 300
        w, _ = fit_logistic(x, y, penalty, max_iter=steps, tolerance_grad=1e-7, **kw)
        return torch.from_numpy(w).float()

    def probe(pos: Any, others: Any) -> Any:
        x = torch.cat([pos, others])
        y = torch.cat([torch.ones(len(pos)), torch.zeros(len(others))])
        weight = torch.where(y > 0, len(others) / len(pos), 1.0).double() / len(y)
        return fit(x, y, config.probe_penalty, weights=weight, bias=True)

    probe_1 = probe(n1[train], torch.cat([neg, n2[train]]))
    probe_2 = probe(n2[train], torch.cat([neg, n1[train]]))
    label = torch.tensor([1.0 if it["label"] == 1 else 0.0 for it in items])
    readout = fit((n1 - n2)[train], label[train], config.readout_penalty)
    mean_decision = nd[train].mean(0)
    model = layer.model
    one, two = digit_ids(tokenizer)
    toward = model.model.norm.weight.detach() * (
        model.lm_head.weight.detach()[one] - model.lm_head.weight.detach()[two]
    )
    parts = {
        "probe_1": probe_1,
        "probe_2": probe_2,
        "readout": readout,
        "query": config.sharpness * mean_decision / float((nd @ mean_decision).mean()),
        "u": toward / (toward @ toward),
    }
    dev_index = [i for i in range(len(items)) if items[i]["dev"]]
    separation = {
        k: _separation(layer, finals, where, dev_index, parts[f"probe_{k}"], k - 1) for k in (1, 2)
    }
    teacher = (n1 - n2)[dev] @ readout
    teacher_rows = [
        {**_meta(items[i]), "verdict": 1 if float(z) > 0 else 2}
        for i, z in zip(dev_index, teacher, strict=True)
    ]
    layer.build(parts, 0.0)
    run_alone = _brief(evaluate(layer, finals, items, dev_index, (one, two)))
    by_scale: dict[str, Any] = {}
    for scale in config.scales:
        layer.build(parts, scale)
        by_scale[f"{scale:g}"] = _brief(evaluate(layer, finals, items, dev_index, (one, two)))
        say(f"scale {scale:g}: development {json.dumps(by_scale[f'{scale:g}'])}")
    chosen = choose_scale(by_scale, config)
    layer.build(parts, chosen)
    return {
        "scale": chosen,
        "chosen_by": "lowest development decision loss among the scales whose served (bf16) "
        f"verdicts name Response 1 within {config.slot1_band:g} of half the time",
        "development": by_scale[f"{chosen:g}"],
        "by_scale": by_scale,
        "marker_separation": separation,
        "readout_alone": _brief_rows(teacher_rows),
        "run_alone": run_alone,
        "training_pairs": int(train.sum()) // 2,
        "development_pairs": len(dev_index) // 2,
    }


def choose_scale(by_scale: dict[str, Any], config: VerdictConfig) -> float:
    """The scale with the lowest development decision loss among those whose served verdicts'
    Response-1 share is within ``slot1_band`` of 0.5; if none is, the one closest to 0.5."""

    def off(s: float) -> float:
        return abs(by_scale[f"{s:g}"]["served"]["slot1_share"] - 0.5)

    within = [s for s in config.scales if off(s) <= config.slot1_band]
    if not within:
        return min(config.scales, key=off)
    return min(within, key=lambda s: by_scale[f"{s:g}"]["decision_loss"])


def _separation(
    layer: VerdictLayer,
    finals: Sequence[Any],
    where: Sequence[tuple[int, int, int]],
    dev_index: Sequence[int],
    probe: Any,
    which: int,
) -> dict[str, float]:
    """How far a marker probe's score at its marker stands above its highest score elsewhere
    up to the decision, over the development items: the least, the median, the share above."""
    import torch

    gaps = []
    for i in dev_index:
        r = where[i]
        score = layer.normed(finals[i][: r[2] + 1]) @ probe
        target = float(score[r[which]])
        score[r[which]] = -1e9
        gaps.append(target - float(score.max()))
    g = torch.tensor(gaps)
    return {
        "least": round(float(g.min()), 3),
        "median": round(float(g.median()), 3),
        "share_above": round(float((g > 0).float().mean()), 4),
    }


def _brief_rows(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    a = summarize(rows)["all"]
    return {k: round(a[k], 4) for k in ("accuracy", "slot1_share", "both_orders_right", "items")}


def evaluate(
    top: VerdictLayer,
    finals: Sequence[Any],
    items: Sequence[dict[str, Any]],
    indices: Sequence[int],
    digits: tuple[int, int],
) -> dict[str, Any]:
    """The decision on ``indices``: accuracy, slot-1 share, both orders (``figures.summarize``),
    the two-way decision loss, and the share of the other target tokens predicted (greedy,
    teacher-forced with the label's decision: the format and the copy)."""
    import torch

    rows, losses, served = [], [], []
    format_right = format_total = 0
    one, two = digits
    with torch.no_grad():
        for i in indices:
            item = items[i]
            logits = top.logits(finals[i], item["prompt"] - 1)[:-1]
            d = item["decision"] - item["prompt"]
            margin = float(logits[d, one] - logits[d, two])
            toward = margin if item["label"] == 1 else -margin
            losses.append(float(torch.nn.functional.softplus(torch.tensor(-toward))))
            rows.append({**_meta(item), "margin": margin, "verdict": 1 if margin > 0 else 2})
            served_margin = top.served_margin(finals[i], item["decision"] - 1, digits)
            served.append({**_meta(item), "verdict": 1 if served_margin >= 0 else 2})
            target = torch.tensor(item["ids"][item["prompt"] :])
            pred = logits.argmax(dim=-1)
            keep = torch.ones_like(target, dtype=torch.bool)
            keep[d] = False
            format_right += int((pred[keep] == target[keep]).sum())
            format_total += int(keep.sum())
    figures = summarize(rows)
    figures["decision_loss"] = sum(losses) / len(losses) if losses else math.nan
    figures["format_tokens_right"] = format_right / format_total if format_total else math.nan
    figures["served"] = summarize(served)["all"]
    return figures


def _meta(item: dict[str, Any]) -> dict[str, Any]:
    return {k: item[k] for k in ("pair_id", "source", "label", "longer")}


def _brief(figures: dict[str, Any]) -> dict[str, Any]:
    a = figures["all"]
    return {
        "accuracy": round(a["accuracy"], 4),
        "accuracy_95": [round(x, 4) for x in a["accuracy_95"]],
        "slot1_share": round(a["slot1_share"], 4),
        "both_orders_right": round(a["both_orders_right"], 4),
        "length_heuristic": round(a["length_heuristic"], 4),
        "decision_loss": round(figures["decision_loss"], 4),
        "format_tokens_right": round(figures["format_tokens_right"], 4),
        "items": a["items"],
        "by_source": {
            k: {m: round(v[m], 4) for m in ("accuracy", "length_heuristic", "both_orders_right")}
            for k, v in figures.items()
            if k not in ("all", "decision_loss", "format_tokens_right", "served")
        },
        "served": {
            k: round(figures["served"][k], 4)
            for k in ("accuracy", "slot1_share", "both_orders_right")
        },
    }


def fit_verdict(
    model_dir: Path,
    items: Sequence[dict[str, Any]],
    states: Sequence[Any],
    out: Path,
    config: VerdictConfig,
    tokenizer: Any,
    say: Callable[[str], None] = print,
    progress_bar: bool = True,
) -> dict[str, Any]:
    """The frozen top layers on the saved states, then the added layer built and its scale
    chosen (``build_verdict``); its weights written to ``out/verdict-layer.safetensors``."""
    from safetensors.torch import save_file
    from tqdm import tqdm

    use_threads(config.threads)
    layer = VerdictLayer(load_model(model_dir), config)
    bar = tqdm(states, unit="item", file=sys.stderr, disable=not progress_bar, desc="top layers")
    finals = [layer.final(s) for s in bar]
    figures = build_verdict(layer, finals, items[: len(finals)], tokenizer, config, say)
    save_file(
        pack_sparse(layer.state()),
        str(out / VERDICT_WEIGHTS),
        metadata={"format": "pt", "added_layer": str(layer.index)},
    )
    return figures


# --- the whole step --------------------------------------------------------------------------


def run_verdict(
    base_model: Path,
    run_dir: Path,
    pairs: Sequence[Pair],
    out: Path,
    config: VerdictConfig,
    resume: bool = False,
    say: Callable[[str], None] = print,
    progress_bar: bool = True,
) -> dict[str, Any]:
    """States from the run's merged model (resumable), then the added layer's fit (minutes);
    writes ``verdict-layer.safetensors`` and ``verdict-report.json``."""
    import tempfile

    from transformers import AutoTokenizer

    from reflectrm.engines.chat import ChatRenderer

    out.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    with tempfile.TemporaryDirectory() as tmp:
        model = merge_run(base_model, run_dir, Path(tmp) / "model")
        tokenizer = AutoTokenizer.from_pretrained(model)
        plan = verdict_plan(pairs, ChatRenderer(tokenizer), tokenizer, config)
        plan_path = out / PLAN_FILE
        record = {
            "fingerprint": config.fingerprint(),
            "items": len(plan),
            "pairs": len(plan) // 2,
            "dev_pairs": sum(1 for i in plan if i["dev"]) // 2,
            "tokens": sum(len(i["ids"]) for i in plan),
        }
        plan_path.write_text(json.dumps(record, indent=1) + "\n")
        say(f"plan: {record}")
        extracted = extract_states(model, plan, out, config, resume, say, progress_bar)
        if extracted["items"] < len(plan):
            return {"finished": False, **extracted}
        states, seconds = load_states(out, plan)
        t0 = time.monotonic()
        built = fit_verdict(model, plan, states, out, config, tokenizer, say, progress_bar)
        fit_seconds = time.monotonic() - t0
    report = {
        "config": asdict(config),
        "plan": record,
        "states_seconds": round(seconds, 1),
        "states": extracted,
        "fit_seconds": round(fit_seconds, 1),
        "finished": True,
        **built,
        "precision": resolve_precision(config.precision),
        "cpu": cpu_name(),
        "session_seconds": round(time.monotonic() - started, 1),
    }
    (out / VERDICT_REPORT).write_text(json.dumps(report, indent=1) + "\n")
    return report
