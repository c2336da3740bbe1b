"""The one chat-template rule, shared by serving and training."""

from __future__ import annotations

from typing import Any


def chat_template_kwargs(tokenizer: Any) -> dict[str, Any]:
    """How prompts are rendered everywhere (serving, training): thinking switched off where the
    model's chat template knows the switch (Qwen3's ``enable_thinking``)."""
    template = getattr(tokenizer, "chat_template", None) or ""
    return {"enable_thinking": False} if "enable_thinking" in template else {}
