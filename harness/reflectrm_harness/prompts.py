"""The judge's prompts as plain-text chat messages, as chat-template tools (training data, a
tokenizer's ``apply_chat_template``) take them: the serving package's chats
(``reflectrm.judging.prompts``) with each message's parts joined, the quoted texts inserted as
they are. The engines render the chats themselves."""

from __future__ import annotations

from collections.abc import Sequence

from reflectrm.engines.base import ChatMessage, plain_text
from reflectrm.judging.prompts import Template, preference_chat, reflection_chat
from reflectrm.judging.types import Message


def as_text(messages: Sequence[ChatMessage]) -> list[dict[str, str]]:
    """Messages with plain-string contents."""
    return [{"role": m["role"], "content": plain_text(m["content"])} for m in messages]


def preference_messages(
    template: Template, conversation: Sequence[Message], response_1: str, response_2: str
) -> list[dict[str, str]]:
    """The stage-1 prompt as plain text."""
    return as_text(preference_chat(template, conversation, response_1, response_2))


def reflection_messages(
    template: Template,
    conversation: Sequence[Message],
    response_1: str,
    response_2: str,
    critique_1: str,
    critique_2: str,
) -> list[dict[str, str]]:
    """The reflection prompt as plain text."""
    chat = reflection_chat(template, conversation, response_1, response_2, critique_1, critique_2)
    return as_text(chat)
