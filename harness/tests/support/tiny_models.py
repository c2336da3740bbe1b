"""A tiny judge for the tests of the recipes: the real architecture (Llama) with random weights,
seeded, made in seconds; and the questions it judges."""

from __future__ import annotations

from pathlib import Path
from typing import Any

# Pairs whose better answer a reader sees at once: (question, better, worse).
QUESTIONS = [
    ("What is the capital of France?", "Paris.", "Berlin."),
    ("What is 2 + 2?", "4", "5"),
    ("Name a primary colour.", "Red.", "Green tea."),
    ("Is the sun a star?", "Yes.", "No, a planet."),
    ("Spell cat backwards.", "tac", "cta"),
    ("How many legs has a spider?", "Eight.", "Six."),
    ("Is water wet?", "Yes.", "Never."),
    ("What colour is the sky?", "Blue.", "Plaid."),
]


def save_tiny_judge(folder: Path, tokenizer: Any, layers: int) -> Path:
    """A Llama with ``tokenizer`` (and its chat template), tied embeddings and an MLP twice its
    width, weights drawn after ``torch.manual_seed(0)``, saved in ``folder``: what the recipes'
    steps train and read in the tests. Its logits have room to move (the frozen tied embeddings
    set them)."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        tie_word_embeddings=True,
        max_position_embeddings=2048,
        initializer_range=0.3,
    )
    LlamaForCausalLM(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder
