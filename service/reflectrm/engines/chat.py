"""The one chat-template rule, shared by serving and training, and the rendering of a judging
prompt into token ids in which judged texts can never act as markup.

A tokenizer's ``encode`` turns the text ``<|im_end|>`` into the special token wherever it
appears, so encoding a rendered prompt whole lets a judged response close its turn and open one
of its own (a reward hack for a policy that finds it). ``ChatRenderer`` renders the chat
template with a placeholder for each ``Quoted`` text, so it knows where each quoted text sits in
the rendered text, and then:

- a quoted text that no marker's spelling overlaps (the spelling of a special or added token,
  inside it or across its edges) stays in the text that is encoded whole, as before: benign
  prompts get exactly the ids they always got, and the prefix cache sees the same prefixes;
- any other quoted text is cut out and tokenized on its own as plain text: through the
  tokenizer's normalizer, pre-tokenizer and model alone, past its added vocabulary, so that
  neither special tokens nor ordinary added tokens (``<think>``, ``</think>`` in thinking
  templates, which ``split_special_tokens`` would still match) can come out of it. A
  vocabulary that spells a marker as an ordinary token (BPE merges that reach one) has that
  piece tokenized a character at a time. The text around it is encoded as before.

So the only markers of a prompt are those of the template's own text. Boundary effects: at the
two edges of a cut-out text a token can differ from the whole text's encoding (a newline run
split in two, say); the prompt's token count is always that of the ids the engine is given.
Tokenizers without a Hugging Face fast backend (and those that match markers after normalizing
the text) have every quoted text cut out. Limits: a template whose turn markers are ordinary
text (Llama 2's ``[INST]``) has no marker tokens to withhold, so a quoted text can always spell
them; a tokenizer that prepends a space to every text it encodes (SentencePiece's Metaspace with
prepend_scheme "always") prepends one to a cut-out text too.
"""

from __future__ import annotations

import re
import secrets
from collections.abc import Callable, Sequence
from typing import Any

from reflectrm.engines.base import ChatMessage, EngineError, Prompt, Quoted

# A placeholder is a private-use character, a per-prompt nonce, the text's index and another
# private-use character: nothing a template writes, and never what a quoted text holds (quoted
# texts are not rendered through the template at all).
_OPEN, _CLOSE = "\ue000", "\ue001"


def chat_template_kwargs(tokenizer: Any) -> dict[str, Any]:
    """How prompts are rendered everywhere (serving, training): thinking switched off where the
    model's chat template knows the switch (Qwen3's ``enable_thinking``)."""
    template = getattr(tokenizer, "chat_template", None) or ""
    return {"enable_thinking": False} if "enable_thinking" in template else {}


def continuation(messages: Sequence[ChatMessage]) -> dict[str, bool]:
    """How a chat is closed: with the assistant's generation prompt, or, when it ends in an
    assistant message (the start of an output the judge must continue, such as a decision-first
    lead), with that message left open (the chat template's ``continue_final_message``)."""
    if messages and messages[-1]["role"] == "assistant":
        return {"add_generation_prompt": False, "continue_final_message": True}
    return {"add_generation_prompt": True}


def marker_ids(tokenizer: Any) -> frozenset[int]:
    """The ids no quoted text may produce: every special token and every added token (added
    tokens that are not "special", such as Qwen3's ``<think>``, are chat markers all the same)."""
    ids = {int(i) for i in getattr(tokenizer, "all_special_ids", None) or ()}
    ids.update(int(i) for i in getattr(tokenizer, "added_tokens_decoder", None) or {})
    return frozenset(ids)


class ChatRenderer:
    """Renders chats through one tokenizer's chat template into a ``Prompt``."""

    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer = tokenizer
        self.template_kwargs = chat_template_kwargs(tokenizer)
        self.markers = marker_ids(tokenizer)
        self._pieces = _plain_pieces(tokenizer)
        self._spellings = _marker_spellings(tokenizer)

    def render(self, messages: Sequence[ChatMessage]) -> Prompt:
        """The conversation through the chat template, with the generation prompt and no extra
        special tokens (the template adds them), as vLLM's own chat rendering does; its quoted
        texts tokenized as plain text. A chat that ends in an assistant message ends in that
        message's text, left open, so that the model continues it (``continuation``)."""
        nonce = secrets.token_hex(8)
        quoted: list[str] = []

        def slot(part: str | Quoted) -> str:
            if not isinstance(part, Quoted):
                return part
            quoted.append(part.text)
            return f"{_OPEN}{nonce}.{len(quoted) - 1}{_CLOSE}"

        chat = []
        for m in messages:
            content = m["content"]
            text = content if isinstance(content, str) else "".join(slot(p) for p in content)
            chat.append({"role": m["role"], "content": text})
        rendered = self.tokenizer.apply_chat_template(
            chat, tokenize=False, **continuation(messages), **self.template_kwargs
        )
        # Even pieces: the template's text; odd pieces: the index of a quoted text.
        pieces = re.split(f"{_OPEN}{nonce}\\.(\\d+){_CLOSE}", rendered)
        if any(nonce in piece for piece in pieces[::2]):
            raise EngineError("the model's chat template altered the text of a message")
        parts: list[str] = []
        spans: list[tuple[int, int]] = []  # where each quoted text sits in the prompt's text
        at = 0
        for k, piece in enumerate(pieces):
            piece = piece if k % 2 == 0 else quoted[int(piece)]
            if k % 2:
                spans.append((at, at + len(piece)))
            parts.append(piece)
            at += len(piece)
        text = "".join(parts)
        ids: list[int] = []
        start = 0
        for a, b in self._markup_spans(text, spans):
            ids += self._encode(text[start:a]) + self.encode_plain(text[a:b])
            start = b
        ids += self._encode(text[start:])
        return Prompt(text=text, token_ids=tuple(ids))

    def _markup_spans(self, text: str, spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
        """The quoted texts that the whole text's encoding could turn, in part, into a marker:
        those that a marker's spelling overlaps (within them, or across their edge)."""
        if self._spellings is None:
            return spans
        found = [(m.start(), m.start() + len(m.group(1))) for m in self._spellings.finditer(text)]
        return [(a, b) for a, b in spans if any(s < b and a < e for s, e in found)]

    def _encode(self, text: str) -> list[int]:
        return list(self.tokenizer.encode(text, add_special_tokens=False)) if text else []

    def encode_plain(self, text: str) -> list[int]:
        """``text`` as plain text: never an id of ``markers``."""
        ids: list[int] = []
        for piece in self._pieces(text):
            tokens = self._pieces.tokenize(piece)
            if self.markers.intersection(tokens):
                # The vocabulary spells a marker as an ordinary token: one character at a time.
                tokens = [t for char in piece for t in self._pieces.tokenize(char)]
                if self.markers.intersection(tokens):
                    raise EngineError(
                        "a quoted text cannot be tokenized without a special token of the model"
                    )
            ids += tokens
        return ids


def _marker_spellings(tokenizer: Any) -> re.Pattern[str] | None:
    """A pattern that finds every place a marker is spelled in a text (overlapping ones too,
    the longest at each place), or None where that cannot stand for the tokenizer's own
    matching (it has no added vocabulary to match against, or matches some markers after
    normalizing the text): then every quoted text is tokenized on its own."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    added = getattr(tokenizer, "added_tokens_decoder", None)
    if backend is None or added is None:
        return None
    normalized = [t for t in added.values() if getattr(t, "normalized", True)]
    if backend.normalizer is not None and normalized:
        return None
    spellings = {str(getattr(t, "content", t)) for t in added.values()}
    spellings.update(str(t) for t in getattr(tokenizer, "all_special_tokens", None) or ())
    spellings.discard("")
    if not spellings:
        return re.compile("(?!)")  # nothing to spell
    ordered = sorted(spellings, key=len, reverse=True)
    return re.compile("(?=(" + "|".join(re.escape(t) for t in ordered) + "))")


class _PlainPieces:
    """A tokenizer's path for plain text, past its added vocabulary: ``__call__`` cuts a text
    into the pieces its model tokenizes (pre-tokens), ``tokenize`` gives one piece's ids."""

    def __init__(
        self, split: Callable[[str], list[str]], tokenize: Callable[[str], list[int]]
    ) -> None:
        self._split = split
        self.tokenize = tokenize

    def __call__(self, text: str) -> list[str]:
        return self._split(text)


def _plain_pieces(tokenizer: Any) -> _PlainPieces:
    backend = getattr(tokenizer, "backend_tokenizer", None)
    model = getattr(backend, "model", None)
    if backend is not None and model is not None:
        # A Hugging Face fast tokenizer: its normalizer, pre-tokenizer and model are the steps it
        # takes for the text between added tokens; taken here for the whole text.
        normalizer, pre_tokenizer = backend.normalizer, backend.pre_tokenizer

        def split(text: str) -> list[str]:
            if normalizer is not None:
                text = normalizer.normalize_str(text)
            if pre_tokenizer is None:
                return [text] if text else []
            return [piece for piece, _ in pre_tokenizer.pre_tokenize_str(text)]

        def tokenize(piece: str) -> list[int]:
            return [token.id for token in model.tokenize(piece)]

        return _PlainPieces(split, tokenize)

    # Any other tokenizer (a slow one, Mistral's): special tokens split, which slow tokenizers
    # apply to every added token; the marker check in encode_plain catches the rest.
    def encode(text: str) -> list[int]:
        if not text:
            return []
        try:
            ids = tokenizer.encode(text, add_special_tokens=False, split_special_tokens=True)
        except TypeError:
            ids = tokenizer.encode(text, add_special_tokens=False)
        return [int(i) for i in ids]

    return _PlainPieces(lambda text: [text] if text else [], encode)
