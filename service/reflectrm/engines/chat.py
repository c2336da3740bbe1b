"""The one chat-template rule, shared by serving and training."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from reflectrm.engines.base import Prompt


def chat_template_kwargs(tokenizer: Any) -> dict[str, Any]:
    """How prompts are rendered everywhere (serving, training): thinking switched off where the
    model's chat template knows the switch (Qwen3's ``enable_thinking``)."""
    template = getattr(tokenizer, "chat_template", None) or ""
    return {"enable_thinking": False} if "enable_thinking" in template else {}


def render_chat_with(tokenizer: Any, messages: Sequence[dict[str, str]]) -> Prompt:
    """A conversation through a local tokenizer's chat template, with the generation prompt and
    no extra special tokens (the template adds them), as vLLM's own chat rendering does."""
    text = tokenizer.apply_chat_template(
        list(messages),
        tokenize=False,
        add_generation_prompt=True,
        **chat_template_kwargs(tokenizer),
    )
    ids = tokenizer.encode(text, add_special_tokens=False)
    return Prompt(text=text, token_ids=tuple(ids))
