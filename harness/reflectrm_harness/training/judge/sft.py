"""``reflectrm train judge``: supervised training of the verdict from preference labels.

The recipe (docs/training.md, "The judge recipe"): LoRA adapters on a frozen base, trained with
cross-entropy on the service's own output format, from the human labels (never from the model's
own verdicts):

- every training pair is shown in **both orders in the same step** (the target names the chosen
  response's slot each time), so a judge that answers by position alone is stuck at loss ln 2 on
  the decision token;
- the target is ``<Analysis>Response k is the better answer to the user.</Analysis>\\n<Result>
  Response k is better than Response j</Result>`` and the end of turn: the analysis states the
  decision first, so the one token that decides (the ``k`` of the analysis) is sampled from the
  judge's own probability in stage 1, and the verdict agrees with its analysis;
- the second task of the unified framework, analysis preference, is trained jointly: for every
  ``reflection_every``-th pair, a reflection prompt whose two critiques are the two analyses the
  judge writes (one per conclusion), in both critique orders, the one that names the chosen
  response preferred;
- prompts are rendered exactly as the service renders them (``ChatRenderer``: same chat template,
  judged texts tokenized as plain text) with the versioned template.

The run is seeded and resumable: a checkpoint of the adapter, the optimizer, the schedule and
the step every ``checkpoint_every_s`` seconds; ``--resume`` continues at the step after it with
the same batches (the data order is fixed by the seed up front), so an interrupted run resumed
gives the same adapter as an uninterrupted one. A line per step goes to ``train-log.jsonl``.
"""

from __future__ import annotations

import hashlib
import json
import math
import random
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from reflectrm.judging.prompts import TEMPLATE_VERSION
from reflectrm_harness.datasets import Pair
from reflectrm_harness.training.judge.items import Item, pair_items, tokenize_targets
from reflectrm_harness.training.judge.model import (
    ADAPTER_DIR,
    cpu_name,
    resolve_precision,
    save_atomically,
    use_threads,
)

STATE_FILE = "state.pt"
LOG_FILE = "train-log.jsonl"
CONFIG_FILE = "run-config.json"
# Written when a run finishes: what ``ship`` reads.
SUMMARY_FILE = "run-summary.json"


@dataclass(frozen=True)
class JudgeTrainConfig:
    seed: int = 0
    template_version: str = TEMPLATE_VERSION
    pairs_per_step: int = 4  # each in both orders: 8 preference sequences per optimizer step
    max_steps: int = 200
    learning_rate: float = 3e-4
    warmup_steps: int = 10
    final_lr_fraction: float = 0.1  # linear decay to this fraction of the rate
    weight_decay: float = 0.0
    max_grad_norm: float = 1.0
    lora_r: int = 16
    lora_alpha: int = 32
    lora_targets: tuple[str, ...] = (
        "q_proj",
        "k_proj",
        "v_proj",
        "o_proj",
        "gate_proj",
        "up_proj",
        "down_proj",
    )
    # One reflection item (in both critique orders) per this many pairs: the paper's 4:1 mix.
    # 0 trains response preference only.
    reflection_every: int = 4
    # Pairs whose judging prompt is longer are not trained on (bounds the cost of a step).
    max_prompt_tokens: int = 768
    # "auto": bf16 autocast where the CPU has bf16 matrix units (AMX or AVX512-BF16), else f32.
    precision: str = "auto"
    threads: int = 0  # 0: every core
    checkpoint_every_s: float = 300.0

    def fingerprint(self) -> str:
        """What a resumed run must share with the run it resumes (not run-control settings)."""
        skip = {"checkpoint_every_s", "threads"}
        body = {k: v for k, v in asdict(self).items() if k not in skip}
        return hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()[:16]


def plan_steps(
    pairs: Sequence[Pair],
    renderer: Any,
    tokenizer: Any,
    config: JudgeTrainConfig,
) -> tuple[list[list[Item]], dict[str, int]]:
    """The run's batches, fixed by the seed up front: pairs in a seeded order, too-long ones
    left out, ``pairs_per_step`` pairs per step (both orders of each in the same step)."""
    tokens = tokenize_targets(tokenizer)
    rng = random.Random(config.seed)
    order = list(pairs)
    rng.shuffle(order)
    steps: list[list[Item]] = []
    current: list[Item] = []
    used = too_long = 0
    pairs_in_step = 0
    for pair in order:
        if len(steps) >= config.max_steps:
            break
        reflect = config.reflection_every > 0 and (used % config.reflection_every) == (
            config.reflection_every - 1
        )
        items = pair_items(pair, renderer, tokens, config.template_version, rng, reflect)
        if any(len(i.prompt_ids) > config.max_prompt_tokens for i in items):
            too_long += 1
            continue
        used += 1
        current += items
        pairs_in_step += 1
        if pairs_in_step == config.pairs_per_step:
            steps.append(current)
            current, pairs_in_step = [], 0
    counts = {
        "pairs_available": len(pairs),
        "pairs_used": config.pairs_per_step * len(steps),
        "pairs_too_long_skipped": too_long,
        "steps": len(steps),
        "preference_sequences": sum(1 for s in steps for i in s if i.kind == "preference"),
        "reflection_sequences": sum(1 for s in steps for i in s if i.kind == "reflection"),
        "prompt_tokens": sum(len(i.prompt_ids) for s in steps for i in s),
    }
    return steps, counts


# --- the loop --------------------------------------------------------------------------------


def lr_at(step: int, config: JudgeTrainConfig) -> float:
    """Linear warm-up, then linear decay to ``final_lr_fraction`` at the last step."""
    base = config.learning_rate
    if step < config.warmup_steps:
        return base * (step + 1) / config.warmup_steps
    span = max(1, config.max_steps - config.warmup_steps)
    done = min(1.0, (step - config.warmup_steps) / span)
    return base * (1.0 - (1.0 - config.final_lr_fraction) * done)


def wrap_lora(model: Any, config: JudgeTrainConfig) -> Any:
    from peft import LoraConfig, get_peft_model

    lora = LoraConfig(
        r=config.lora_r,
        lora_alpha=config.lora_alpha,
        lora_dropout=0.0,  # no dropout: a step is a function of the weights and the batch
        target_modules=list(config.lora_targets),
        bias="none",
        task_type="CAUSAL_LM",
    )
    return get_peft_model(model, lora)


def item_loss(model: Any, item: Item, precision: str) -> tuple[Any, dict[str, float]]:
    """Mean cross-entropy over the target's tokens, and the decision token's figures."""
    import torch

    ids = torch.tensor([list(item.prompt_ids) + list(item.target_ids)], dtype=torch.long)
    n_prompt = len(item.prompt_ids)
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=precision == "bf16"):
        logits = model(input_ids=ids).logits
    # The logit at position p predicts token p + 1: the target's tokens are predicted from
    # positions n_prompt - 1 .. end - 1.
    pred = logits[0, n_prompt - 1 : -1].float()
    target = ids[0, n_prompt:]
    loss = torch.nn.functional.cross_entropy(pred, target)
    with torch.no_grad():
        d = pred[item.decision]
        right = d[item.target_ids[item.decision]]
        wrong = d[item.other_id]
        margin = float(right - wrong)
        # The decision token's loss between the two slots only: ln 2 for a judge by position.
        dloss = float(torch.nn.functional.softplus(-(right - wrong)))
    return loss, {"decision_loss": dloss, "decision_correct": float(margin > 0)}


@dataclass
class Progress:
    step: int = 0  # steps done
    seconds: float = 0.0  # training time so far, over every session of the run


def train_judge(
    base_model: Path,
    pairs: Sequence[Pair],
    output_dir: Path,
    config: JudgeTrainConfig,
    resume: bool = False,
    stop_after: int | None = None,
    say: Callable[[str], None] = print,
    progress_bar: bool = True,
    end_at: int | None = None,
) -> dict[str, Any]:
    """Train (or resume) a run into ``output_dir``; returns the run's summary.

    ``stop_after`` ends this session after that many steps (as an interrupt would, after a
    checkpoint): the resume test's interruption, and a way to train in slices. ``end_at`` ends
    the run itself at that step (the adapter is written; the schedule stays the planned one,
    and the summary records both), for a run that must finish within a time budget.
    """
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from reflectrm.engines.chat import ChatRenderer

    precision = resolve_precision(config.precision)
    threads = use_threads(config.threads)
    output_dir.mkdir(parents=True, exist_ok=True)
    state_path = output_dir / STATE_FILE
    config_path = output_dir / CONFIG_FILE
    _check_resumable(output_dir, config, resume)

    torch.manual_seed(config.seed)
    tokenizer = AutoTokenizer.from_pretrained(base_model)
    model = AutoModelForCausalLM.from_pretrained(base_model, dtype=torch.float32)
    model = wrap_lora(model, config)
    model.train()
    trainable = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(
        trainable, lr=config.learning_rate, weight_decay=config.weight_decay
    )
    renderer = ChatRenderer(tokenizer)
    steps, counts = plan_steps(pairs, renderer, tokenizer, config)
    if not steps:
        raise ValueError("no training step: too few pairs fit max_prompt_tokens")
    progress = Progress()
    if resume and state_path.is_file():
        state = torch.load(state_path, weights_only=False)
        _load_trainable(model, state["adapter"])
        optimizer.load_state_dict(state["optimizer"])
        progress = Progress(**state["progress"])
        _trim_log(output_dir / LOG_FILE, progress.step)
        say(f"resuming at step {progress.step + 1} of {len(steps)}")
    else:
        config_path.write_text(
            json.dumps(
                {"fingerprint": config.fingerprint(), "config": asdict(config), "plan": counts},
                indent=1,
            )
        )
        (output_dir / LOG_FILE).unlink(missing_ok=True)
    say(
        f"training: {len(steps)} steps of {config.pairs_per_step} pairs in both orders "
        f"({counts['preference_sequences']} preference, {counts['reflection_sequences']} "
        f"reflection sequences, {counts['prompt_tokens']} prompt tokens); precision {precision}, "
        f"{threads} threads"
    )
    bar = None
    if progress_bar:
        from tqdm import tqdm

        bar = tqdm(total=len(steps), initial=progress.step, unit="step", file=sys.stderr)
    last_checkpoint = time.monotonic()
    session_start = time.monotonic()
    done_this_session = 0
    last = len(steps) if end_at is None else min(end_at, len(steps))
    with (output_dir / LOG_FILE).open("a") as logf:
        while progress.step < last:
            batch = steps[progress.step]
            lr = lr_at(progress.step, config)
            for group in optimizer.param_groups:
                group["lr"] = lr
            t0 = time.monotonic()
            record = _train_step(model, optimizer, trainable, batch, precision, config)
            progress.step += 1
            elapsed = time.monotonic() - t0
            progress.seconds += elapsed
            done_this_session += 1
            record = {"step": progress.step, "lr": lr, **record, "seconds": round(elapsed, 3)}
            logf.write(json.dumps(record) + "\n")
            logf.flush()
            if bar is not None:
                bar.set_postfix(
                    loss=f"{record['loss']:.3f}", dloss=f"{record['decision_loss']:.3f}"
                )
                bar.update(1)
            finished = progress.step == last
            stopping = stop_after is not None and done_this_session >= stop_after
            due = time.monotonic() - last_checkpoint >= config.checkpoint_every_s
            if finished or stopping or due:
                _save_state(state_path, model, optimizer, progress)
                last_checkpoint = time.monotonic()
            if stopping and not finished:
                if bar is not None:
                    bar.close()
                say(f"stopped after step {progress.step}; --resume continues")
                return {"finished": False, "step": progress.step, "steps": len(steps)}
    if bar is not None:
        bar.close()
    adapter_dir = output_dir / ADAPTER_DIR
    model.save_pretrained(adapter_dir, safe_serialization=True)
    summary = {
        "finished": True,
        "step": progress.step,
        "steps": len(steps),
        "ended_early": progress.step < len(steps),
        "train_seconds": round(progress.seconds, 1),
        "session_seconds": round(time.monotonic() - session_start, 1),
        "precision": precision,
        "threads": threads,
        "cpu": cpu_name(),
        "plan": counts,
        "config": asdict(config),
    }
    (output_dir / SUMMARY_FILE).write_text(json.dumps(summary, indent=1) + "\n")
    say(f"adapter written to {adapter_dir} ({progress.seconds:.0f} s of training)")
    return summary


def _check_resumable(output_dir: Path, config: JudgeTrainConfig, resume: bool) -> None:
    if resume and (output_dir / STATE_FILE).is_file():
        recorded = json.loads((output_dir / CONFIG_FILE).read_text())
        if recorded.get("fingerprint") != config.fingerprint():
            raise ValueError(
                f"{output_dir} holds a run with other settings ({recorded.get('config')}); "
                "resume it with the same settings, or train into another folder"
            )
    elif (output_dir / STATE_FILE).is_file():
        raise ValueError(f"{output_dir} already holds a run: pass --resume to continue it")


def _train_step(
    model: Any,
    optimizer: Any,
    trainable: list[Any],
    batch: Sequence[Item],
    precision: str,
    config: JudgeTrainConfig,
) -> dict[str, Any]:
    """One optimizer step over the batch (gradients accumulated item by item); its figures."""
    import torch

    optimizer.zero_grad(set_to_none=True)
    figures: dict[str, list[float]] = {"loss": [], "decision_loss": [], "correct": []}
    by_kind: dict[str, list[float]] = {"preference": [], "reflection": []}
    for item in batch:
        loss, fig = item_loss(model, item, precision)
        (loss / len(batch)).backward()
        figures["loss"].append(float(loss.detach()))
        figures["decision_loss"].append(fig["decision_loss"])
        figures["correct"].append(fig["decision_correct"])
        by_kind[item.kind].append(fig["decision_correct"])
    grad_norm = float(torch.nn.utils.clip_grad_norm_(trainable, config.max_grad_norm))
    optimizer.step()
    return {
        "loss": _mean(figures["loss"]),
        "decision_loss": _mean(figures["decision_loss"]),
        "accuracy": _mean(figures["correct"]),
        "preference_accuracy": _mean(by_kind["preference"]),
        "reflection_accuracy": _mean(by_kind["reflection"]) if by_kind["reflection"] else None,
        "grad_norm": grad_norm,
        "tokens": sum(len(i.prompt_ids) + len(i.target_ids) for i in batch),
    }


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values) if values else math.nan


def _trainable_state(model: Any) -> dict[str, Any]:
    return {n: p.detach().clone() for n, p in model.named_parameters() if p.requires_grad}


def _load_trainable(model: Any, state: dict[str, Any]) -> None:
    import torch

    params = dict(model.named_parameters())
    with torch.no_grad():
        for name, value in state.items():
            params[name].copy_(value)


def _save_state(path: Path, model: Any, optimizer: Any, progress: Progress) -> None:
    """Atomically: a run stopped while writing keeps its previous checkpoint."""
    state = {
        "adapter": _trainable_state(model),
        "optimizer": optimizer.state_dict(),
        "progress": asdict(progress),
    }
    save_atomically(state, path)


def _trim_log(path: Path, step: int) -> None:
    """Drop log lines of steps after the checkpoint (they are trained again on resume)."""
    if not path.is_file():
        return
    kept = [line for line in path.read_text().splitlines() if json.loads(line)["step"] <= step]
    path.write_text("".join(f"{line}\n" for line in kept))
