"""The verdict layer of the judge recipe: one decoder layer added on top of a frozen backbone that
compares the two responses where the prompt ends them, fitted in closed form on the states pass.

At the decision (the digit after the forced lead ``<Analysis>Response``) the margin between the
two digits' logits becomes the backbone's own margin plus a push ``kappa * (s1 - s2)`` along the
residual direction ``u`` that moves those two logits apart, where ``s_k = w_k . n(h_endk)`` reads
the state closing ``[End of Response k]`` (``n``: the layer's unit-weight RMS norm). Built as:

- **attention**: query head 0 (key/value head 0) and the first query head of key/value head 1
  carry a constant query (the query bias) in the slowest rotary pair (dimension ``d/2 - 1`` of
  ``d``, which turns by well under a thousandth of a radian over the whole context), and their
  keys carry a marker probe (logistic: the end of Response k against the other markers and
  random positions), so each head attends to its marker wherever it stands; their values
  carry ``w_k``; the output writes ``+kappa s1`` and ``-kappa s2`` along ``u``;
- **MLP** zero, every other head's output dropped (zero output columns).

``w_1`` and ``w_2`` are fitted jointly by a weighted logistic regression on the training items
(both orders of every pair; within each source the pairs whose better response is longer and
those where it is shorter weigh the same), with the backbone's own margin as an offset or not;
the penalty, the offset and ``kappa`` are chosen on the development items by the served verdict
(emulated in bf16: the final norm and the two output rows in bf16, the logits rounded, a tie
going to Response 1). The held-out split is measured on the engine, never here.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from reflectrm_harness.evaluation.length import length_balanced
from reflectrm_harness.training.judge.model import fit_logistic, pack_sparse
from reflectrm_harness.training.judge.readout import length_weights, shares
from reflectrm_harness.training.judge.states import PLAN, load_plan, load_states

LAYER_FILE = "verdict-layer.safetensors"


@dataclass(frozen=True)
class LayerConfig:
    penalties: tuple[float, ...] = (1e-4, 1e-3, 1e-2, 3e-2, 1e-1)
    kappas: tuple[float, ...] = (0.5, 1.0, 2.0, 4.0, 8.0)
    offsets: tuple[bool, ...] = (True, False)
    probe_penalty: float = 1e-3
    # attention logit margin wanted between a marker and anything else (query size follows)
    sharpness: float = 24.0
    slot1_band: float = 0.05
    source_weights: tuple[tuple[str, float], ...] = (("hh_rlhf_harmless_base_test", 0.5),)
    sources: tuple[str, ...] | None = None  # train on these sources only (None: all)
    # once the grid is chosen on development items, fit the readouts again on training and
    # development items together (the figures reported stay those of the training-only fit)
    refit_on_dev: bool = False


class Backbone:
    """What the fit needs of the frozen model: its final norm, the two digits' output rows, the
    attention's shape."""

    def __init__(self, model_path: Path) -> None:
        import torch
        from safetensors import safe_open
        from transformers import AutoTokenizer

        config = json.loads((model_path / "config.json").read_text())
        self.config = config
        tok = AutoTokenizer.from_pretrained(model_path)
        self.digits = [tok.encode(d, add_special_tokens=False)[0] for d in ("1", "2")]
        shard = sorted(model_path.glob("*.safetensors"))[0]
        with safe_open(str(shard), "pt") as f:
            keys = set(f.keys())
            head = "lm_head.weight" if "lm_head.weight" in keys else "model.embed_tokens.weight"
            rows = f.get_slice(head)
            self.rows = torch.stack([rows[i] for i in self.digits]).float()
            self.norm = f.get_tensor("model.norm.weight").float()
        self.eps = float(config.get("rms_norm_eps", 1e-6))
        self.hidden = int(config["hidden_size"])
        self.heads = int(config["num_attention_heads"])
        self.kv_heads = int(config.get("num_key_value_heads", self.heads))
        self.head_dim = int(config.get("head_dim") or self.hidden // self.heads)
        self.layers = int(config["num_hidden_layers"])
        toward = self.norm * (self.rows[0] - self.rows[1])
        self.u = toward / (toward @ toward)

    def margins(self, h: Any, bf16: bool) -> Any:
        """Digit-1 minus digit-2 logit of residual states ``h`` [n, d] (float32, or as a bf16
        engine computes it: rounded at each step)."""
        import torch

        if bf16:
            x = h.to(torch.bfloat16).float()
            var = (x * x).mean(-1, keepdim=True)
            y = (x * torch.rsqrt(var + self.eps)).to(torch.bfloat16)
            y = (y * self.norm.to(torch.bfloat16)).to(torch.bfloat16)
            logits = (y.float() @ self.rows.to(torch.bfloat16).float().T).to(torch.bfloat16).float()
        else:
            var = (h * h).mean(-1, keepdim=True)
            y = h * torch.rsqrt(var + self.eps) * self.norm
            logits = y @ self.rows.T
        return logits[:, 0] - logits[:, 1]


def unit_norm(h: Any, eps: float) -> Any:
    import torch

    return h * torch.rsqrt((h * h).mean(-1, keepdim=True) + eps)


@dataclass
class Items:
    names: list[str]
    source: list[str]
    role: list[str]
    slot1_chosen: Any  # bool tensor: the chosen response is shown first
    longer: list[bool | None]
    pair: list[tuple[str, str]]
    n_end1: Any
    n_end2: Any
    h_dec: Any
    own: Any
    markers: dict[str, Any]  # for the probes: normed states by kind


def gather(folder: Path, backbone: Backbone, roles: Sequence[str] = ("train", "dev")) -> Items:
    import torch

    plan = {it.name: it for it in load_plan(folder)}
    states = load_states(folder)
    names, src, role, first, longer, pair = [], [], [], [], [], []
    e1, e2, dec, own = [], [], [], []
    kinds: dict[str, list[Any]] = {
        k: [] for k in ("end1", "end2", "start1", "start2", "dec", "neg")
    }
    for name, rec in states.items():
        it = plan.get(name)
        if it is None or it.role not in roles or "top" not in rec or it.cut:
            continue
        top = torch.as_tensor(rec["top"]).float()
        pos = list(rec["positions"])
        normed = unit_norm(top, backbone.eps)
        names.append(name)
        src.append(it.source)
        role.append(it.role)
        first.append(it.chosen_first)
        longer.append(it.chosen_longer)
        pair.append((it.source, it.pair_id))
        e1.append(normed[pos.index("end1")])
        e2.append(normed[pos.index("end2")])
        dec.append(top[pos.index("dec")])
        own.append(float(rec["own_margin"]))
        if it.role == "train":
            for k in ("end1", "end2", "start1", "start2", "dec"):
                kinds[k].append(normed[pos.index(k)])
            kinds["neg"].append(normed[len(pos) :])
    return Items(
        names,
        src,
        role,
        torch.tensor(first),
        longer,
        pair,
        torch.stack(e1),
        torch.stack(e2),
        torch.stack(dec),
        torch.tensor(own),
        {
            k: torch.cat([v.reshape(-1, v.shape[-1]) for v in vs]) if vs else None
            for k, vs in kinds.items()
        },
    )


def fit_probe(pos: Any, others: Any, penalty: float) -> tuple[Any, float]:
    """A marker probe with bias: logistic, the two classes weighing the same."""
    import numpy as np

    x = np.concatenate([pos.numpy(), others.numpy()])
    x1 = np.concatenate([x, np.ones((len(x), 1))], axis=1)
    y = np.concatenate([np.ones(len(pos)), -np.ones(len(others))])
    w = np.where(y > 0, 0.5 / len(pos), 0.5 / len(others))
    coef, _ = fit_logistic(x1, y, penalty, weights=shares(w))
    return coef[:-1], float(coef[-1])


def probe_margin(probe: tuple[Any, float], pos: Any, others: Any) -> dict[str, float]:
    import torch

    w = torch.as_tensor(probe[0]).float()
    sp, so = pos @ w + probe[1], others @ w + probe[1]
    return {
        "marker_min": float(sp.min()),
        "marker_mean": float(sp.mean()),
        "others_max": float(so.max()),
        "others_p999": float(torch.quantile(so, 0.999)),
        "gap_min": float(sp.min() - so.max()),
    }


def served(items: Items, backbone: Backbone, w1: Any, w2: Any, kappa: float, bf16: bool) -> Any:
    """The decision margin of each item with the layer built (attention exactly on markers)."""
    import torch

    s = items.n_end1 @ torch.as_tensor(w1).float() - items.n_end2 @ torch.as_tensor(w2).float()
    h = items.h_dec + kappa * s[:, None] * backbone.u[None, :]
    return backbone.margins(h, bf16)


def figures(items: Items, margin: Any, mask: Any) -> dict[str, Any]:
    """Per-pair accuracy (mean of its orders), length-balanced, slot-1 share, both orders."""
    from collections import defaultdict

    by_pair: dict[tuple[str, str], list[float]] = defaultdict(list)
    slot1 = []
    longer: dict[tuple[str, str], bool | None] = {}
    for i in range(len(items.names)):
        if not mask[i]:
            continue
        says1 = bool(margin[i] >= 0)  # a bf16 tie goes to the lower id, Response 1
        slot1.append(says1)
        right = says1 == bool(items.slot1_chosen[i])
        by_pair[items.pair[i]].append(1.0 if right else 0.0)
        longer[items.pair[i]] = items.longer[i]
    keys = [k for k, v in by_pair.items() if len(v) == 2]
    acc = [sum(by_pair[k]) / 2 for k in keys]
    out = length_balanced(acc, [longer[k] for k in keys])
    out["slot1_share"] = sum(slot1) / max(len(slot1), 1)
    out["both_orders"] = sum(1 for k in keys if sum(by_pair[k]) == 2) / max(len(keys), 1)
    return out


def fit_layer(states: Path, model_path: Path, config: LayerConfig) -> dict[str, Any]:
    import numpy as np
    import torch

    bb = Backbone(model_path)
    items = gather(states, bb)
    train = torch.tensor(
        [
            r == "train" and (config.sources is None or s in config.sources)
            for r, s in zip(items.role, items.source, strict=True)
        ]
    )
    dev = torch.tensor([r == "dev" for r in items.role])
    mk = items.markers
    probes = {}
    for k, other in ((1, 2), (2, 1)):
        negatives = torch.cat([mk["neg"], mk[f"end{other}"], mk["start1"], mk["start2"], mk["dec"]])
        probes[k] = fit_probe(mk[f"end{k}"], negatives, config.probe_penalty)
    # separation on development items' markers against their other kept positions
    report: dict[str, Any] = {
        "config": asdict(config),
        "train_items": int(train.sum()),
        "dev_items": int(dev.sum()),
    }
    dev_items = gather(states, bb, roles=("dev",))
    report["marker_separation"] = {}
    for k in (1, 2):
        pos = dev_items.n_end1 if k == 1 else dev_items.n_end2
        oth = torch.cat([dev_items.n_end2 if k == 1 else dev_items.n_end1])
        report["marker_separation"][f"end{k}"] = probe_margin(probes[k], pos, oth)
        report["marker_separation"][f"end{k}_train_negatives"] = probe_margin(
            probes[k], mk[f"end{k}"], torch.cat([mk["neg"], mk["start1"], mk["start2"], mk["dec"]])
        )
    y = np.where(items.slot1_chosen.numpy(), 1.0, -1.0)
    keys = [items.pair[i] for i in range(len(items.names))]
    longer = {items.pair[i]: items.longer[i] for i in range(len(items.names))}
    sw = dict(config.source_weights)
    idx = np.flatnonzero(train.numpy())
    wts = np.asarray(length_weights([keys[i] for i in idx], longer, sw)) / 2  # two orders a pair
    x = np.concatenate([items.n_end1.numpy(), -items.n_end2.numpy()], axis=1)
    own = items.own.numpy()
    report["backbone_alone"] = {"dev": figures(items, items.own, dev), "served_bf16": True}
    grid = []
    best = None
    for use_offset in config.offsets:
        for pen in config.penalties:
            offset = own[idx] if use_offset else None
            coef, _ = fit_logistic(x[idx], y[idx], pen, weights=shares(wts), offset=offset)
            w1, w2 = coef[: bb.hidden], coef[bb.hidden :]
            for kappa in config.kappas:
                margin = served(items, bb, w1, w2, kappa, bf16=True)
                fig = figures(items, margin, dev)
                row = {
                    "offset": use_offset,
                    "penalty": pen,
                    "kappa": kappa,
                    "length_balanced": fig.get("length_balanced"),
                    "accuracy": fig["accuracy"],
                    "slot1_share": fig["slot1_share"],
                    "both_orders": fig["both_orders"],
                }
                grid.append(row)
                ok = abs(fig["slot1_share"] - 0.5) <= config.slot1_band
                score = (ok, fig.get("length_balanced") or 0.0)
                if best is None or score > best[0]:
                    best = (score, row, w1, w2, fig)
    assert best is not None
    _, row, w1, w2, fig = best
    margin = served(items, bb, w1, w2, row["kappa"], bf16=True)
    by_source = {}
    for s in sorted(set(items.source)):
        m = torch.tensor(
            [d and src == s for d, src in zip(dev.tolist(), items.source, strict=True)]
        )
        by_source[s] = figures(items, margin, m)
    report.update(
        {"chosen": row, "development": fig, "development_by_source": by_source, "grid": grid}
    )
    if config.refit_on_dev:
        both = train | torch.tensor(
            [
                d and (config.sources is None or s in config.sources)
                for d, s in zip(dev.tolist(), items.source, strict=True)
            ]
        )
        idx = np.flatnonzero(both.numpy())
        wts = np.asarray(length_weights([keys[i] for i in idx], longer, sw)) / 2
        offset = own[idx] if row["offset"] else None
        coef, _ = fit_logistic(x[idx], y[idx], row["penalty"], weights=shares(wts), offset=offset)
        w1, w2 = coef[: bb.hidden], coef[bb.hidden :]
        report["refit"] = {
            "items": int(both.sum()),
            "train_and_dev_fit": figures(
                items, served(items, bb, w1, w2, row["kappa"], bf16=True), both
            ),
        }
    report["parts"] = {
        "w1": w1,
        "w2": w2,
        "probe1": probes[1],
        "probe2": probes[2],
        "kappa": row["kappa"],
    }
    return report


def build_layer(bb: Backbone, parts: Mapping[str, Any], config: LayerConfig) -> dict[str, Any]:
    """The added layer's weights as a checkpoint names them (index = the backbone's depth)."""
    import torch

    d, h, kv = bb.head_dim, bb.hidden, bb.kv_heads
    per_kv = bb.heads // kv
    slow = d // 2 - 1
    q_w = torch.zeros(bb.heads * d, h)
    q_b = torch.zeros(bb.heads * d)
    k_w = torch.zeros(kv * d, h)
    k_b = torch.zeros(kv * d)
    v_w = torch.zeros(kv * d, h)
    v_b = torch.zeros(kv * d)
    o_w = torch.zeros(h, bb.heads * d)
    # attention logit = q . k / sqrt(d); the probe is a logit, so a query of sharpness * sqrt(d)
    # / (marker gap) makes the marker win by about ``sharpness``
    query = config.sharpness * math.sqrt(d) / 8.0
    u = bb.u
    for k, (probe, readout, sign) in enumerate(
        ((parts["probe1"], parts["w1"], 1.0), (parts["probe2"], parts["w2"], -1.0))
    ):
        head = k * per_kv
        q_b[head * d + slow] = query
        k_w[k * d + slow] = torch.as_tensor(probe[0]).float()
        k_b[k * d + slow] = float(probe[1])
        v_w[k * d] = torch.as_tensor(readout).float()
        o_w[:, head * d] = sign * parts["kappa"] * u
    p = f"model.layers.{bb.layers}."
    return {
        p + "input_layernorm.weight": torch.ones(h),
        p + "post_attention_layernorm.weight": torch.ones(h),
        p + "self_attn.q_proj.weight": q_w,
        p + "self_attn.q_proj.bias": q_b,
        p + "self_attn.k_proj.weight": k_w,
        p + "self_attn.k_proj.bias": k_b,
        p + "self_attn.v_proj.weight": v_w,
        p + "self_attn.v_proj.bias": v_b,
        p + "self_attn.o_proj.weight": o_w,
    }


def write_artifact(
    out: Path,
    report: dict[str, Any],
    model_path: Path,
    config: LayerConfig,
    pool_info: Mapping[str, Any],
    command: str,
    name: str,
) -> Path:
    """The judge artifact: the added layer (stored sparse) and a manifest naming the backbone
    (its wheels, GGUF hash, upstream and licence), the template, the data with their licences
    and the split, the fit's development figures and the command."""
    from safetensors.torch import save_file

    from reflectrm.checkpoints.backbones import BACKBONES
    from reflectrm.checkpoints.files import ARTIFACT_MANIFEST, VERDICT_WEIGHTS, file_sha256

    bb = Backbone(model_path)
    layer = build_layer(bb, report["parts"], config)
    out.mkdir(parents=True, exist_ok=True)
    save_file(
        pack_sparse(layer),
        str(out / VERDICT_WEIGHTS),
        metadata={"format": "pt", "added_layer": str(bb.layers)},
    )
    prepared = json.loads((model_path / "reflectrm-prepared.json").read_text())
    backbone = next(b for b in BACKBONES.values() if b.gguf_sha256 == prepared["gguf_sha256"])
    used = sorted(config.sources) if config.sources else sorted(pool_info["pool"])
    licences = sorted({pool_info["pool"][s]["licence"] for s in used})
    manifest = {
        "name": name,
        "template_version": "v3",
        "requires": {"enforce_format": True},
        "base_model": {
            "name": backbone.name,
            "upstream": backbone.upstream,
            "licence": backbone.licence,
            "source": [req for req, _ in backbone.pins],
            "gguf_sha256": backbone.gguf_sha256,
            "gguf_size": backbone.gguf_size,
        },
        "files": {VERDICT_WEIGHTS: file_sha256(out / VERDICT_WEIGHTS)},
        "data": [
            {
                "file": f"{s}.jsonl.gz",
                "sha256": pool_info["pool"][s]["sha256"],
                "licence": pool_info["pool"][s]["licence"],
            }
            for s in used
        ],
        "data_licences": licences,
        "split": {
            "unit": "prompt (a seeded hash of the conversation)",
            **{k: pool_info["config"][k] for k in ("seed", "heldout_fraction", "dev_fraction")},
            "sources": {
                s: {k: v for k, v in info.items() if k != "licence"}
                for s, info in pool_info["pool"].items()
            },
        },
        "fit": {
            k: report[k]
            for k in (
                "chosen",
                "development",
                "development_by_source",
                "marker_separation",
                "train_items",
                "dev_items",
            )
        },
        "command": command,
    }
    (out / ARTIFACT_MANIFEST).write_text(json.dumps(manifest, indent=1, default=plain) + "\n")
    return out


def plain(x: Any) -> Any:
    import numpy as np

    if isinstance(x, np.generic):
        return x.item()
    if isinstance(x, np.ndarray):
        return x.tolist()
    raise TypeError(type(x))


def ship_layer(
    states: Path,
    model_path: Path,
    out: Path,
    config: LayerConfig,
    command: str,
    name: str,
    report_path: Path | None = None,
) -> dict[str, Any]:
    """``reflectrm train marker-layer``: the layer fitted on the states pass, the artifact
    written to ``out`` (the pass's plan names the pool), and the fit's report (without the
    layer's parts) to ``report_path`` when given; the report."""
    report = fit_layer(states, model_path, config)
    info = json.loads((states / PLAN).read_text())["info"]
    write_artifact(out, report, model_path, config, info, command, name)
    if report_path:
        body = {k: v for k, v in report.items() if k != "parts"}
        report_path.parent.mkdir(parents=True, exist_ok=True)
        report_path.write_text(json.dumps(body, indent=1, default=plain) + "\n")
    return report
