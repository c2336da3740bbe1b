"""An optional supervised warm-up before GRPO, for base models that never write the format.

Not in the paper, whose 4B-14B backbones already write parseable verdicts. A small model
unconstrained writes none (0 of 128 outputs of SmolLM2-135M, docs/results.md), so every GRPO
group scores 0 and its advantages, hence gradients, are all 0. The warm-up teaches the format
from the base model's own format-enforced judgments that build-data saved (judgments.jsonl),
keeping only correct ones (rejection sampling), balanced between the two positions so it
teaches no positional preference.
"""

from __future__ import annotations

import dataclasses
import logging
import random
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from reflectrm.checkpoints.base import default_cache_dir
from reflectrm.checkpoints.files import file_sha256
from reflectrm.checkpoints.resolve import resolve_model
from reflectrm.engines.chat import chat_template_kwargs
from reflectrm.judging.prompts import get_template
from reflectrm_harness.prompts import preference_messages
from reflectrm_harness.training.grpo.data import JudgedPair, judged_from_json, read_items
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


@dataclass(frozen=True)
class WarmupSettings:
    model: str = "default"
    output_dir: str = "checkpoints/reflectrm-warmup"
    template_version: str = "v1"
    per_pair: int = 1  # distinct correct judgments taken from each pair
    max_examples: int | None = None
    epochs: float = 1.0
    learning_rate: float = 5e-5
    batch: int = 8
    max_length: int = 1024
    lora: bool = False
    lora_r: int = 16
    lora_alpha: int = 32
    seed: int = 0


def warmup_examples(
    judged: Sequence[JudgedPair], settings: WarmupSettings, rng: random.Random
) -> list[dict[str, Any]]:
    """Prompt-completion examples from correct judgments, as many per verdict position."""
    template = get_template(settings.template_version)
    by_label: dict[int, list[dict[str, Any]]] = {1: [], 2: []}
    for pair in judged:
        texts = list(dict.fromkeys(c.text for c in pair.correct()))
        r1, r2 = pair.responses
        for text in rng.sample(texts, min(settings.per_pair, len(texts))):
            by_label[pair.label].append(
                {
                    "prompt": preference_messages(template, pair.conversation, r1, r2),
                    "completion": [{"role": "assistant", "content": text}],
                    "label": pair.label,
                }
            )
    per_side = min(len(by_label[1]), len(by_label[2]))
    if settings.max_examples is not None:
        per_side = min(per_side, settings.max_examples // 2)
    examples = rng.sample(by_label[1], per_side) + rng.sample(by_label[2], per_side)
    rng.shuffle(examples)
    return examples


def warmup(settings: WarmupSettings, judgments: Path, cache_dir: Path | None = None) -> Path:
    from datasets import Dataset
    from trl import SFTConfig, SFTTrainer

    judged = [judged_from_json(r) for r in read_items(judgments)]
    examples = warmup_examples(judged, settings, random.Random(settings.seed))
    if not examples:
        raise ValueError(f"{judgments} has no correct judgments in both positions to learn from")
    cache = cache_dir or default_cache_dir()
    # Training reads the float32 base, built here when set-up has not yet.
    base = resolve_model(settings.model, cache, settings.template_version, build=True)
    out = Path(settings.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    gpu = has_gpu()
    tokenizer = load_tokenizer(base)
    chat = chat_template_kwargs(tokenizer)
    args = SFTConfig(
        output_dir=str(out / "trainer"),
        num_train_epochs=settings.epochs,
        per_device_train_batch_size=settings.batch,
        learning_rate=settings.learning_rate,
        max_length=settings.max_length,
        completion_only_loss=True,  # learn the judgment, not the prompt
        bf16=gpu,
        use_cpu=not gpu,
        logging_steps=1,
        save_strategy="no",
        report_to="none",
        seed=settings.seed,
        dataset_kwargs={"chat_template_kwargs": chat} if chat else None,
    )
    dataset = Dataset.from_list([{k: e[k] for k in ("prompt", "completion")} for e in examples])
    trainer = SFTTrainer(
        model=load_model(base, "auto", gpu),
        args=args,
        train_dataset=dataset,
        processing_class=tokenizer,
        peft_config=lora_config(settings.lora, settings.lora_r, settings.lora_alpha),
        callbacks=[metrics_callback(out / METRICS_FILE)],
    )
    log.info("warm-up on %d examples (%d per position)", len(examples), len(examples) // 2)
    return train_and_export(
        trainer,
        tokenizer,
        out,
        model=settings.model,
        base=base,
        template_version=settings.template_version,
        data={
            "judgments": str(judgments),
            "sha256": file_sha256(judgments),
            "examples": len(examples),
        },
        config={"stage": "sft-warmup", **dataclasses.asdict(settings)},
        gpu=gpu,
    )
