"""``reflectrm train verdict``: the judge's top decoder layers trained on cached states.

The supervised recipe (``judge.py``) teaches the output format in an hour of two CPU cores but,
at that budget, not the preference: every step pays a forward and backward pass through all 30
layers for one deciding token per sequence. A linear head on the final hidden state
(``probe.py``) is cheap but reads only what the last position already holds. This step sits
between the two:

1. **States, once.** The run's model (base + adapter, merged as the service merges it) reads
   each training pair's judging prompt in both orders followed by the whole target, and the
   residual stream entering its top ``layers`` decoder layers is kept for every position
   (bf16). The layers below never change, so one forward pass through them serves every epoch;
   the pass stops at the first kept layer (the layers above it are not run). Resumable: the
   states are written in shards every ``checkpoint_every_s`` and a resumed pass continues with
   the next item of the same seeded plan.
2. **Top layers, many epochs.** LoRA adapters on the top layers' linear maps are trained on
   those states. The top layers attend over the whole prompt, so the verdict can read each
   response where it was written rather than only what reached the last position. Loss: the
   cross-entropy of the decision token (the ``k`` of ``<Analysis>Response k``) plus
   ``copy_weight`` times that of the rest of the target, so the judge still writes the format
   and copies its decision into the verdict. Every pair comes in both orders in the same step;
   a judge by position is stuck at ln 2. Seeded; a checkpoint every ``checkpoint_every_s`` and
   at each epoch's end; ``--resume`` continues at the next step with the same batches.
3. **Chosen on development pairs.** ``dev_fraction`` of the training pool's prompts (a seeded
   hash, as the held-out split does) is never trained on; after each epoch the decision is
   scored on them, and the epoch with the lowest development decision loss is the one written
   (``verdict-layer.safetensors``: the LoRA weights of that epoch, with their scale). The
   held-out split is measured on the engine (``reflectrm eval``), never here.

``judge_artifact.merge_adapter`` applies the file after the run's adapter: W + scale * B @ A.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import os
import random
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

from reflectrm.datasets import Pair
from reflectrm.hardware import cpu_name
from reflectrm.training.judge import (
    TEMPLATE_VERSION,
    pair_items,
    resolve_precision,
    tokenize_targets,
)
from reflectrm.training.probe import digit_ids, source_of, summarize
from reflectrm.training.split import prompt_key

STATES_DIR = "states"
STATE_FILE = "train-state.pt"
LOG_FILE = "verdict-log.jsonl"
REPORT_FILE = "verdict-report.json"
PLAN_FILE = "verdict-plan.json"
VERDICT_WEIGHTS = "verdict-layer.safetensors"
TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


@dataclass(frozen=True)
class VerdictConfig:
    seed: int = 0
    max_pairs: int = 4000
    max_prompt_tokens: int = 1024
    # The share of the training pool's prompts kept for choosing the epoch (never trained on).
    dev_fraction: float = 0.15
    layers: int = 2  # the top decoder layers trained
    lora_r: int = 16
    lora_alpha: int = 32
    learning_rate: float = 5e-4
    weight_decay: float = 0.01
    warmup_steps: int = 20
    final_lr_fraction: float = 0.1
    max_grad_norm: float = 1.0
    epochs: int = 3
    pairs_per_step: int = 8  # each in both orders
    # The rest of the target's tokens (format and the copied verdict), relative to the decision.
    copy_weight: float = 0.2
    precision: str = "auto"  # of the states' forward pass; the top layers train in float32
    threads: int = 0
    checkpoint_every_s: float = 180.0

    def fingerprint(self) -> str:
        skip = {"checkpoint_every_s", "threads"}
        body = {k: v for k, v in asdict(self).items() if k not in skip}
        return hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()[:16]

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> VerdictConfig:
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(values) - known)
        if unknown:
            raise ValueError(f"unknown verdict settings: {', '.join(unknown)}")
        return cls(**values)


# --- the plan --------------------------------------------------------------------------------


def is_dev(pair: Pair, config: VerdictConfig) -> bool:
    """Whether a pair's prompt is one of the development prompts (a seeded hash of it)."""
    digest = hashlib.sha256(f"dev:{config.seed}:{prompt_key(pair)}".encode()).hexdigest()
    return int(digest[:8], 16) < config.dev_fraction * 0x100000000


def verdict_plan(
    pairs: Sequence[Pair], renderer: Any, tokenizer: Any, config: VerdictConfig
) -> list[dict[str, Any]]:
    """The items, in a seeded order: each pair in both orders (adjacent), prompt + whole target;
    pairs whose prompt is longer than ``max_prompt_tokens`` left out."""
    tokens = tokenize_targets(tokenizer)
    d = tokens.decision["preference"]
    order = list(pairs)
    random.Random(config.seed).shuffle(order)
    rng = random.Random(config.seed)
    plan: list[dict[str, Any]] = []
    used = 0
    for pair in order:
        if used >= config.max_pairs:
            break
        items = pair_items(pair, renderer, tokens, TEMPLATE_VERSION, rng, False)
        if any(len(i.prompt_ids) > config.max_prompt_tokens for i in items):
            continue
        used += 1
        dev = is_dev(pair, config)
        for item in items:
            c, r = len(pair.chosen), len(pair.rejected)
            longer = 0 if c == r else (item.label if c > r else 3 - item.label)
            plan.append(
                {
                    "pair_id": pair.id,
                    "source": source_of(pair.id),
                    "label": item.label,
                    "ids": list(item.prompt_ids) + list(item.target_ids),
                    "prompt": len(item.prompt_ids),
                    "decision": len(item.prompt_ids) + d,  # the decision token's index in ids
                    "longer": longer,
                    "dev": dev,
                }
            )
    return plan


# --- states ----------------------------------------------------------------------------------


class _StopForwardError(Exception):
    """Raised by the capture hook: the layers above the kept one need not run."""


def _load_model(model_dir: Path) -> Any:
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    model.eval()
    return model


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
    planned item, in shards under ``out/states`` (bf16); resumable."""
    import torch

    precision = resolve_precision(config.precision)
    torch.set_num_threads(config.threads or os.cpu_count() or 1)
    model = _load_model(model_dir)
    folder = out / STATES_DIR
    folder.mkdir(parents=True, exist_ok=True)
    done = _shards(folder)
    have = sum(n for _, n in done)
    if have and not resume:
        raise ValueError(f"{folder} holds states: pass --resume to continue")
    if have:
        say(f"states: resuming at item {have + 1} of {len(plan)}")
    first = model.config.num_hidden_layers - config.layers
    captured: dict[str, Any] = {}

    def hook(_module: Any, args: Any, kwargs: Any) -> None:
        captured["h"] = args[0] if args else kwargs["hidden_states"]
        raise _StopForwardError

    handle = model.model.layers[first].register_forward_pre_hook(hook, with_kwargs=True)
    bar = None
    if progress_bar:
        from tqdm import tqdm

        bar = tqdm(total=len(plan), initial=have, unit="item", file=sys.stderr)
    seconds = float(torch.load(done[-1][0], weights_only=False)["seconds"]) if done else 0.0
    pending: list[Any] = []
    start_index = have
    last_save = time.monotonic()
    try:
        for index in range(have, len(plan)):
            t0 = time.monotonic()
            ids = torch.tensor([plan[index]["ids"]], dtype=torch.long)
            with (
                torch.inference_mode(),
                torch.autocast("cpu", dtype=torch.bfloat16, enabled=precision == "bf16"),
                contextlib.suppress(_StopForwardError),
            ):
                model(input_ids=ids)
            pending.append(captured["h"][0].to(torch.bfloat16).clone())
            seconds += time.monotonic() - t0
            if bar is not None:
                bar.update(1)
            if time.monotonic() - last_save >= config.checkpoint_every_s:
                _write_shard(folder, start_index, pending, seconds)
                start_index += len(pending)
                pending = []
                last_save = time.monotonic()
    finally:
        handle.remove()
        if pending:
            _write_shard(folder, start_index, pending, seconds)
        if bar is not None:
            bar.close()
    total = sum(n for _, n in _shards(folder))
    return {"items": total, "planned": len(plan), "seconds": seconds}


def _write_shard(folder: Path, start: int, states: list[Any], seconds: float) -> None:
    import torch

    path = folder / f"{start:07d}-{len(states):05d}.pt"
    tmp = path.with_suffix(".tmp")
    torch.save({"start": start, "states": states, "seconds": seconds}, tmp)
    os.replace(tmp, path)


def _shards(folder: Path) -> list[tuple[Path, int]]:
    """The shards in order, each with its item count (``START-COUNT.pt``; each also records the
    pass's seconds up to it); a gap (a lost shard) ends the list."""
    out: list[tuple[Path, int]] = []
    expected = 0
    for path in sorted(folder.glob("*.pt")):
        start, n = (int(x) for x in path.stem.split("-"))
        if start != expected:
            break
        out.append((path, n))
        expected += n
    return out


def load_states(out: Path) -> tuple[list[Any], float]:
    """Every saved state, in plan order, and the pass's seconds."""
    import torch

    states: list[Any] = []
    seconds = 0.0
    for path, _ in _shards(out / STATES_DIR):
        shard = torch.load(path, weights_only=False)
        states += shard["states"]
        seconds = float(shard["seconds"])
    return states, seconds


# --- the top layers ---------------------------------------------------------------------------


def _lora_module() -> Any:
    import torch

    class LoRALinear(torch.nn.Module):
        """``base(x) + scale * x A^T B^T``; B starts at zero, so training starts at the run."""

        def __init__(self, base: Any, r: int, alpha: int, generator: Any) -> None:
            super().__init__()
            self.base = base
            for p in self.base.parameters():
                p.requires_grad_(False)
            bound = 1.0 / math.sqrt(base.in_features)
            a = (torch.rand(r, base.in_features, generator=generator) * 2 - 1) * bound
            self.lora_A = torch.nn.Parameter(a)
            self.lora_B = torch.nn.Parameter(torch.zeros(base.out_features, r))
            self.scale = alpha / r

        def forward(self, x: Any) -> Any:
            return self.base(x) + (x @ self.lora_A.T @ self.lora_B.T) * self.scale

    return LoRALinear


class TopLayers:
    """The model's top ``layers`` decoder layers (LoRA on every linear map), its final norm and
    output layer, run on saved states."""

    def __init__(self, model: Any, config: VerdictConfig) -> None:
        import torch

        for p in model.parameters():
            p.requires_grad_(False)
        lora = _lora_module()
        generator = torch.Generator().manual_seed(config.seed)
        n = model.config.num_hidden_layers
        self.first = n - config.layers
        self.model = model
        self.layers = [model.model.layers[i] for i in range(self.first, n)]
        self.adapted: dict[str, Any] = {}
        for offset, layer in enumerate(self.layers):
            for parent_name in ("self_attn", "mlp"):
                parent = getattr(layer, parent_name)
                for target in TARGETS:
                    if hasattr(parent, target):
                        wrapped = lora(
                            getattr(parent, target), config.lora_r, config.lora_alpha, generator
                        )
                        setattr(parent, target, wrapped)
                        name = f"model.layers.{self.first + offset}.{parent_name}.{target}"
                        self.adapted[name] = wrapped
        self.scale = config.lora_alpha / config.lora_r

    def parameters(self) -> list[Any]:
        return [p for m in self.adapted.values() for p in (m.lora_A, m.lora_B)]

    def state(self) -> dict[str, Any]:
        out = {}
        for name, m in self.adapted.items():
            out[f"{name}.lora_A.weight"] = m.lora_A.detach().clone()
            out[f"{name}.lora_B.weight"] = m.lora_B.detach().clone()
        return out

    def load(self, state: dict[str, Any]) -> None:
        import torch

        with torch.no_grad():
            for name, m in self.adapted.items():
                m.lora_A.copy_(state[f"{name}.lora_A.weight"])
                m.lora_B.copy_(state[f"{name}.lora_B.weight"])

    def logits(self, states: Any, start: int) -> Any:
        """The output layer's logits at positions ``start`` .. end - 1 of one item, from the
        states entering the first top layer (as the full model computes them)."""
        import torch
        from transformers.masking_utils import create_causal_mask

        h = states.to(torch.float32).unsqueeze(0)
        positions = torch.arange(h.shape[1]).unsqueeze(0)
        inner = self.model.model
        mask = create_causal_mask(
            config=inner.config,
            inputs_embeds=h,
            attention_mask=None,
            past_key_values=None,
            position_ids=positions,
        )
        rotary = inner.rotary_emb(h, position_ids=positions)
        for layer in self.layers:
            h = layer(h, attention_mask=mask, position_embeddings=rotary, position_ids=positions)
        h = inner.norm(h[:, start:])
        return self.model.lm_head(h)[0]


def item_loss(
    top: TopLayers, states: Any, item: dict[str, Any], digits: tuple[int, int], copy_weight: float
) -> tuple[Any, float]:
    """The decision's cross-entropy plus ``copy_weight`` times the mean of the other target
    tokens'; and the decision's margin toward the label (digit of the label minus the other)."""
    import torch

    ids = item["ids"]
    start = item["prompt"] - 1  # the state at p predicts token p + 1
    logits = top.logits(states, start)[:-1]
    target = torch.tensor(ids[item["prompt"] :], dtype=torch.long)
    losses = torch.nn.functional.cross_entropy(logits, target, reduction="none")
    d = item["decision"] - item["prompt"]
    rest = torch.cat([losses[:d], losses[d + 1 :]])
    loss = losses[d] + copy_weight * rest.mean()
    one, two = digits
    margin = logits[d, one] - logits[d, two]
    m = float(margin.detach())
    toward = m if item["label"] == 1 else -m
    return loss, toward


def evaluate(
    top: TopLayers,
    states: Sequence[Any],
    items: Sequence[dict[str, Any]],
    indices: Sequence[int],
    digits: tuple[int, int],
) -> dict[str, Any]:
    """The decision on ``indices``: accuracy, slot-1 share, both orders (``probe.summarize``),
    the two-way decision loss, and the share of the other target tokens predicted (greedy,
    teacher-forced with the label's decision: the format and the copy)."""
    import torch

    rows, losses = [], []
    format_right = format_total = 0
    one, two = digits
    with torch.no_grad():
        for i in indices:
            item = items[i]
            logits = top.logits(states[i], item["prompt"] - 1)[:-1]
            d = item["decision"] - item["prompt"]
            margin = float(logits[d, one] - logits[d, two])
            toward = margin if item["label"] == 1 else -margin
            losses.append(float(torch.nn.functional.softplus(torch.tensor(-toward))))
            rows.append({**_meta(item), "margin": margin, "verdict": 1 if margin > 0 else 2})
            target = torch.tensor(item["ids"][item["prompt"] :])
            pred = logits.argmax(dim=-1)
            keep = torch.ones_like(target, dtype=torch.bool)
            keep[d] = False
            format_right += int((pred[keep] == target[keep]).sum())
            format_total += int(keep.sum())
    figures = summarize(rows)
    figures["decision_loss"] = sum(losses) / len(losses) if losses else math.nan
    figures["format_tokens_right"] = format_right / format_total if format_total else math.nan
    return figures


def _meta(item: dict[str, Any]) -> dict[str, Any]:
    return {k: item[k] for k in ("pair_id", "source", "label", "longer")}


def step_plan(items: Sequence[dict[str, Any]], config: VerdictConfig) -> list[list[int]]:
    """Every step of every epoch, fixed by the seed: the training pairs reshuffled each epoch,
    ``pairs_per_step`` pairs a step, both orders of a pair in the same step."""
    by_pair: dict[str, list[int]] = {}
    for i, item in enumerate(items):
        if not item["dev"]:
            by_pair.setdefault(item["pair_id"], []).append(i)
    pair_ids = sorted(by_pair)
    steps: list[list[int]] = []
    for epoch in range(config.epochs):
        order = list(pair_ids)
        random.Random(f"{config.seed}:{epoch}").shuffle(order)
        for k in range(0, len(order) - config.pairs_per_step + 1, config.pairs_per_step):
            steps.append([i for p in order[k : k + config.pairs_per_step] for i in by_pair[p]])
    return steps


def lr_at(step: int, total: int, config: VerdictConfig) -> float:
    base = config.learning_rate
    if step < config.warmup_steps:
        return base * (step + 1) / config.warmup_steps
    done = min(1.0, (step - config.warmup_steps) / max(1, total - config.warmup_steps))
    return base * (1.0 - (1.0 - config.final_lr_fraction) * done)


def train_top(
    model_dir: Path,
    items: Sequence[dict[str, Any]],
    states: Sequence[Any],
    out: Path,
    config: VerdictConfig,
    resume: bool = False,
    stop_after: int | None = None,
    say: Callable[[str], None] = print,
    progress_bar: bool = True,
) -> dict[str, Any]:
    """Train the top layers' LoRA on the saved states; after each epoch score the development
    items; write the best epoch's weights to ``out/verdict-layer.safetensors``."""
    import torch
    from safetensors.torch import save_file

    torch.set_num_threads(config.threads or os.cpu_count() or 1)
    torch.manual_seed(config.seed)
    model = _load_model(model_dir)
    top = TopLayers(model, config)
    params = top.parameters()
    optimizer = torch.optim.AdamW(params, lr=config.learning_rate, weight_decay=config.weight_decay)
    digits = digit_ids_from_items(model_dir)
    steps = step_plan(items[: len(states)], config)
    if not steps:
        raise ValueError("no training step: too few training pairs have states")
    per_epoch = len(steps) // config.epochs
    dev = [i for i in range(len(states)) if items[i]["dev"]]
    state_path = out / STATE_FILE
    progress, best_state = _start_or_resume(top, optimizer, out, config, resume)
    if progress["step"]:
        say(f"training: resuming at step {progress['step'] + 1} of {len(steps)}")
    say(
        f"training: {len(steps)} steps ({config.epochs} epochs of {per_epoch}), "
        f"{sum(1 for i in range(len(states)) if not items[i]['dev']) // 2} training pairs, "
        f"{len(dev) // 2} development pairs, top {config.layers} layers"
    )

    def checkpoint() -> None:
        tmp = state_path.with_suffix(".tmp")
        torch.save(
            {
                "fingerprint": config.fingerprint(),
                "lora": top.state(),
                "optimizer": optimizer.state_dict(),
                "progress": progress,
                "best_state": best_state,
            },
            tmp,
        )
        os.replace(tmp, state_path)

    from tqdm import tqdm

    bar = tqdm(
        total=len(steps),
        initial=progress["step"],
        unit="step",
        file=sys.stderr,
        disable=not progress_bar,
    )
    last_save = time.monotonic()
    done_now = 0
    with (out / LOG_FILE).open("a") as log:
        while progress["step"] < len(steps):
            step = progress["step"]
            lr = lr_at(step, len(steps), config)
            for group in optimizer.param_groups:
                group["lr"] = lr
            t0 = time.monotonic()
            record = _train_step(
                top, optimizer, [(states[i], items[i]) for i in steps[step]], digits, config
            )
            elapsed = time.monotonic() - t0
            progress["step"] = step + 1
            progress["seconds"] += elapsed
            done_now += 1
            record = {"step": step + 1, "lr": lr, **record, "seconds": round(elapsed, 3)}
            if (step + 1) % per_epoch == 0:
                epoch = (step + 1) // per_epoch
                figures = evaluate(top, states, items, dev, digits)
                entry = {"epoch": epoch, "step": step + 1, "dev": _brief(figures)}
                progress["epochs"].append(entry)
                say(f"epoch {epoch}: development {json.dumps(entry['dev'])}")
                best = progress["best"]
                if best is None or figures["decision_loss"] < best["dev"]["decision_loss"]:
                    progress["best"] = entry
                    best_state = top.state()
                record["dev"] = entry["dev"]
            log.write(json.dumps(record) + "\n")
            log.flush()
            bar.set_postfix(loss=f"{record['loss']:.3f}", dloss=f"{record['decision_loss']:.3f}")
            bar.update(1)
            finished = progress["step"] == len(steps)
            stopping = stop_after is not None and done_now >= stop_after
            if (
                finished
                or stopping
                or "dev" in record
                or (time.monotonic() - last_save >= config.checkpoint_every_s)
            ):
                checkpoint()
                last_save = time.monotonic()
            if stopping and not finished:
                bar.close()
                say(f"stopped after step {progress['step']}; --resume continues")
                return {"finished": False, "step": progress["step"], "steps": len(steps)}
    bar.close()
    assert best_state is not None
    save_file(
        {k: v.contiguous() for k, v in best_state.items()},
        str(out / VERDICT_WEIGHTS),
        metadata={"format": "pt", "scale": repr(top.scale)},
    )
    return {
        "finished": True,
        "steps": len(steps),
        "train_seconds": round(progress["seconds"], 1),
        "epochs": progress["epochs"],
        "chosen": progress["best"],
    }


def _start_or_resume(
    top: TopLayers, optimizer: Any, out: Path, config: VerdictConfig, resume: bool
) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """A new run's progress, or a resumed run's (its weights and optimizer loaded, its log cut
    back to its checkpoint)."""
    import torch

    state_path = out / STATE_FILE
    if resume and state_path.is_file():
        saved = torch.load(state_path, weights_only=False)
        if saved["fingerprint"] != config.fingerprint():
            raise ValueError(f"{state_path} is a run with other settings; train into another out")
        top.load(saved["lora"])
        optimizer.load_state_dict(saved["optimizer"])
        _trim_log(out / LOG_FILE, saved["progress"]["step"])
        return saved["progress"], saved["best_state"]
    if state_path.is_file():
        raise ValueError(f"{out} already holds a training run: pass --resume to continue it")
    (out / LOG_FILE).unlink(missing_ok=True)
    return {"step": 0, "seconds": 0.0, "epochs": [], "best": None}, None


def _train_step(
    top: TopLayers,
    optimizer: Any,
    batch: Sequence[tuple[Any, dict[str, Any]]],
    digits: tuple[int, int],
    config: VerdictConfig,
) -> dict[str, Any]:
    """One optimizer step over the batch (gradients accumulated item by item); its figures."""
    import torch

    optimizer.zero_grad(set_to_none=True)
    losses, towards = [], []
    for states, item in batch:
        loss, toward = item_loss(top, states, item, digits, config.copy_weight)
        (loss / len(batch)).backward()
        losses.append(float(loss.detach()))
        towards.append(toward)
    grad_norm = float(torch.nn.utils.clip_grad_norm_(top.parameters(), config.max_grad_norm))
    optimizer.step()
    softplus = torch.nn.functional.softplus
    return {
        "loss": sum(losses) / len(losses),
        "decision_loss": sum(float(softplus(torch.tensor(-t))) for t in towards) / len(towards),
        "accuracy": sum(1 for t in towards if t > 0) / len(towards),
        "grad_norm": grad_norm,
    }


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
            if k not in ("all", "decision_loss", "format_tokens_right")
        },
    }


def digit_ids_from_items(model_dir: Path) -> tuple[int, int]:
    from transformers import AutoTokenizer

    return digit_ids(AutoTokenizer.from_pretrained(model_dir))


def _trim_log(path: Path, step: int) -> None:
    if not path.is_file():
        return
    kept = [line for line in path.read_text().splitlines() if json.loads(line)["step"] <= step]
    path.write_text("".join(f"{line}\n" for line in kept))


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
    stop_after: int | None = None,
) -> dict[str, Any]:
    """States from the run's merged model (resumable), then the top layers' training
    (resumable); writes ``verdict-layer.safetensors`` and ``verdict-report.json``."""
    import tempfile

    from transformers import AutoTokenizer

    from reflectrm.engines.chat import ChatRenderer
    from reflectrm.judge_artifact import merge_adapter
    from reflectrm.training.judge import ADAPTER_DIR

    out.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    with tempfile.TemporaryDirectory() as tmp:
        model = Path(tmp) / "model"
        merge_adapter(base_model, run_dir / ADAPTER_DIR, model)
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
        if plan_path.is_file() and resume and json.loads(plan_path.read_text()) != record:
            raise ValueError(
                f"{plan_path} records another plan: resume with the same data and settings"
            )
        plan_path.write_text(json.dumps(record, indent=1) + "\n")
        say(f"plan: {record}")
        extracted = extract_states(model, plan, out, config, resume, say, progress_bar)
        states, seconds = load_states(out)
        trained = train_top(model, plan, states, out, config, resume, stop_after, say, progress_bar)
        if not trained["finished"]:
            return trained
    report = {
        "config": asdict(config),
        "plan": record,
        "states_seconds": round(seconds, 1),
        "states": extracted,
        **trained,
        "precision": resolve_precision(config.precision),
        "cpu": cpu_name(),
        "session_seconds": round(time.monotonic() - started, 1),
    }
    (out / REPORT_FILE).write_text(json.dumps(report, indent=1) + "\n")
    return report
