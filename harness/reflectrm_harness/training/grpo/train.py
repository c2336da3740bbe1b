"""GRPO training with TRL's GRPOTrainer on the built data, then export for the service."""

from __future__ import annotations

import dataclasses
import json
import logging
from pathlib import Path
from typing import Any

from reflectrm.checkpoints.base import default_cache_dir
from reflectrm.checkpoints.files import file_sha256
from reflectrm.checkpoints.resolve import resolve_model
from reflectrm.engines.chat import chat_template_kwargs
from reflectrm.judging.prompts import get_template
from reflectrm_harness.training.grpo.batches import (
    chosen_longer_by_pair,
    length_balanced,
    length_cells,
    position_balanced,
    with_chosen_longer,
)
from reflectrm_harness.training.grpo.config import GRPOSettings
from reflectrm_harness.training.grpo.data import JUDGMENTS_FILE, STATS_FILE, read_items, refit
from reflectrm_harness.training.grpo.rewards import format_reward, verdict_reward
from reflectrm_harness.training.grpo.trainer import (
    METRICS_FILE,
    has_gpu,
    load_model,
    load_tokenizer,
    lora_config,
    metrics_callback,
    train_and_export,
)

log = logging.getLogger(__name__)

ITEM_COLUMNS = ("prompt", "label", "kind", "chosen_longer")


def check_items(items: list[dict[str, Any]], template_version: str) -> None:
    get_template(template_version)
    if not items:
        raise ValueError("the training data has no items")
    versions = {item.get("template_version") for item in items}
    if versions != {template_version}:
        raise ValueError(
            f"the data was built with template version(s) {sorted(map(str, versions))} but the "
            f"job trains for {template_version!r}; rebuild the data or set template_version"
        )


def prompt_lengths(items: list[dict[str, Any]], tokenizer: Any) -> list[int]:
    kwargs = chat_template_kwargs(tokenizer)
    texts = [
        tokenizer.apply_chat_template(
            i["prompt"], tokenize=False, add_generation_prompt=True, **kwargs
        )
        for i in items
    ]
    return [len(tokenizer.encode(t, add_special_tokens=False)) for t in texts]


def trl_config(cfg: GRPOSettings, gpu: bool, out: Path, chat: dict[str, Any]) -> Any:
    from trl import GRPOConfig

    use_vllm = cfg.wants_vllm(gpu)
    bf16 = cfg.dtype == "bfloat16" or (cfg.dtype == "auto" and gpu)
    weights = [1.0] + ([cfg.format_reward_weight] if cfg.format_reward_weight else [])
    return GRPOConfig(
        output_dir=str(out / "trainer"),
        num_train_epochs=cfg.epochs,
        max_steps=cfg.max_steps if cfg.max_steps is not None else -1,
        per_device_train_batch_size=cfg.micro_batch,
        gradient_accumulation_steps=cfg.accumulation_steps(),
        num_generations=cfg.group_size,
        learning_rate=cfg.learning_rate,
        max_completion_length=cfg.max_completion_length,
        temperature=cfg.temperature,
        beta=cfg.kl_beta,
        reward_weights=weights,
        seed=cfg.seed,
        bf16=bf16,
        use_cpu=not gpu,
        gradient_checkpointing=cfg.gradient_checkpointing,
        use_vllm=use_vllm,
        vllm_mode="colocate",
        vllm_gpu_memory_utilization=cfg.vllm_gpu_memory_utilization,
        chat_template_kwargs=chat or None,
        logging_steps=cfg.logging_steps,
        report_to=cfg.report_to,
        save_strategy="steps" if cfg.save_steps else "no",
        save_steps=cfg.save_steps or 500,
        log_completions=False,
        # the items come ordered so that each step's prompts are half position 1, half 2
        # (batches.position_balanced); TRL's own shuffling would undo that
        shuffle_dataset=False,
    )


def train(cfg: GRPOSettings, data: Path, cache_dir: Path | None = None) -> Path:
    """Train on ``data`` (train.jsonl from build-data) and export to ``<output_dir>/checkpoint``."""
    from datasets import Dataset
    from trl import GRPOTrainer

    out = Path(cfg.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    items = read_items(data)
    check_items(items, cfg.template_version)
    cache = cache_dir or default_cache_dir()
    # Training reads the float32 base, built here when set-up has not yet.
    base = resolve_model(cfg.model, cache, cfg.template_version, build=True)
    gpu = has_gpu()
    tokenizer = load_tokenizer(base)
    chat = chat_template_kwargs(tokenizer)
    dropped = 0
    if cfg.max_prompt_tokens is not None:
        limit = cfg.max_prompt_tokens

        def fits(item: dict[str, Any]) -> bool:
            return prompt_lengths([item], tokenizer)[0] <= limit

        # Filter first, then mix again: dropping long items from the mixed file alone would
        # skew the preference:reflection ratio (reflection prompts are the longer ones).
        before = len(items)
        items = refit(items, fits)
        dropped = before - len(items)
        log.info("max_prompt_tokens %d: %d of %d items kept, ratio kept", limit, len(items), before)
        check_items(items, cfg.template_version)
    # for the per-step rewards by stratum (rewards.reward_strata): the pair's chosen reply longer?
    items = with_chosen_longer(items, chosen_longer_by_pair(data.parent / JUDGMENTS_FILE))
    unlengthed = 0
    if cfg.balance_length:
        items, unlengthed = length_balanced(items, cfg.seed)
        log.info("balance_length: %d items left out, %d kept", unlengthed, len(items))
    items, unbalanced = position_balanced(items, cfg.prompts_per_batch, cfg.seed)
    log.info(
        "%d items ordered so each step of %d prompts holds both positions equally "
        "(%d left out to balance them)",
        len(items),
        cfg.prompts_per_batch,
        unbalanced,
    )
    check_items(items, cfg.template_version)
    dataset = Dataset.from_list([{k: i.get(k) for k in ITEM_COLUMNS} for i in items])
    rewards: list[Any] = [verdict_reward]
    if cfg.format_reward_weight:
        rewards.append(format_reward)
    trainer = GRPOTrainer(
        model=load_model(base, cfg.dtype, gpu),
        reward_funcs=rewards,
        args=trl_config(cfg, gpu, out, chat),
        train_dataset=dataset,
        processing_class=tokenizer,
        peft_config=lora_config(cfg.lora, cfg.lora_r, cfg.lora_alpha, cfg.lora_dropout),
        callbacks=[metrics_callback(out / METRICS_FILE)],
    )
    log.info(
        "training on %d items (%d dropped as too long), gpu=%s, vllm=%s, lora=%s",
        len(items),
        dropped,
        gpu,
        cfg.wants_vllm(gpu),
        cfg.lora,
    )
    stats_file = data.parent / STATS_FILE
    return train_and_export(
        trainer,
        tokenizer,
        out,
        model=cfg.model,
        base=base,
        template_version=cfg.template_version,
        data={
            "path": str(data),
            "sha256": file_sha256(data),
            "items": len(items),
            "dropped_too_long": dropped,
            "dropped_to_balance_positions": unbalanced,
            "dropped_to_balance_length": unlengthed,
            "length_cells": length_cells(items),
            "kinds": {k: sum(i["kind"] == k for i in items) for k in ("preference", "reflection")},
            "statistics": json.loads(stats_file.read_text()) if stats_file.is_file() else None,
        },
        config=dataclasses.asdict(cfg),
        gpu=gpu,
    )
