"""Tiny Llama checkpoints for the tests of the checkpoints and of a policy: the real architecture
with random weights (seeded), made in seconds. (The harness's tests have their own tiny judge,
harness/tests/support/tiny_models.py.)"""

from __future__ import annotations

from pathlib import Path
from typing import Any


def save_tiny_llama(
    folder: Path,
    vocab_size: int,
    *,
    hidden_size: int,
    layers: int = 1,
    heads: int = 2,
    kv_heads: int = 1,
    tokenizer: Any = None,
    **config: Any,
) -> Path:
    """A Llama with tied embeddings and an MLP twice its width, weights drawn after
    ``torch.manual_seed(0)``, saved in ``folder`` (with ``tokenizer``, when given)."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    model_config = LlamaConfig(
        vocab_size=vocab_size,
        hidden_size=hidden_size,
        intermediate_size=2 * hidden_size,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=kv_heads,
        tie_word_embeddings=True,
        **config,
    )
    LlamaForCausalLM(model_config).save_pretrained(folder)
    if tokenizer is not None:
        tokenizer.save_pretrained(folder)
    return folder


def save_tiny_judge(folder: Path, tokenizer: Any, layers: int) -> Path:
    """A tiny Llama with the default model's tokenizer (and chat template): what the judge
    recipe's steps train and read in the tests; its logits have room to move (the frozen tied
    embeddings set them)."""
    return save_tiny_llama(
        folder,
        len(tokenizer),
        hidden_size=32,
        layers=layers,
        heads=4,
        kv_heads=2,
        tokenizer=tokenizer,
        max_position_embeddings=2048,
        initializer_range=0.3,
    )
