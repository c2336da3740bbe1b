"""The one narrow interface between the judging code and a text-generation engine, and its
vocabulary: the chat messages an engine renders (their quoted parts never markup) and what it
returns. It imports nothing of the judging code, which builds the messages."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal, Protocol, TypedDict

FinishReason = Literal["stop", "length", "abort"]


@dataclass(frozen=True)
class Quoted:
    """A text the prompt quotes rather than says: a conversation turn, a judged response, a
    critique. Engines tokenize it as plain text only, so whatever it contains (``<|im_end|>``,
    ``<think>``, the end-of-text token) it never becomes a special token or a chat marker of the
    model (engines/chat.py); only the chat template and the prompt's own text make those."""

    text: str


# A message's content: the prompt's own text (a str), or a sequence of its own text and quoted
# texts, in order.
Content = str | tuple[str | Quoted, ...]


class ChatMessage(TypedDict):
    """One message of a chat as the engines render it (``Engine.render_chat``)."""

    role: str
    content: Content


def plain_text(content: Content) -> str:
    """The content as one string, the quoted texts inserted as they are."""
    if isinstance(content, str):
        return content
    return "".join(p.text if isinstance(p, Quoted) else p for p in content)


class EngineError(RuntimeError):
    """The engine cannot serve requests (not started, or dead)."""


@dataclass(frozen=True)
class Prompt:
    """A prompt rendered through the model's chat template, tokenized once. ``text`` is the
    rendered text where it was rendered locally; empty when a remote fleet rendered it (its
    /tokenize returns only the token ids, which are what the engine is given)."""

    text: str
    token_ids: tuple[int, ...]

    @property
    def num_tokens(self) -> int:
        return len(self.token_ids)


@dataclass(frozen=True)
class SamplingSpec:
    """What one engine request asks for. ``n`` outputs share one prefill of the prompt."""

    n: int = 1
    temperature: float = 1.0
    max_tokens: int = 1024
    seed: int | None = None
    # A regular expression the output must match (structured outputs), or None.
    regex: str | None = None
    stop: tuple[str, ...] = ()
    # Lower runs first where the engine schedules by priority; ignored elsewhere.
    priority: int = 0
    # How many of the likeliest tokens to report at each generated position, with their
    # log-probs (``Generation.top_logprobs``); 0: the sampled token's log-prob alone.
    top_logprobs: int = 0
    # Tokens whose log-probs to report at each generated position whatever their rank
    # (``Generation.asked_logprobs``), in this order. An engine that can (vLLM's
    # ``logprob_token_ids``) reports them instead of the likeliest tokens; one that cannot
    # leaves ``asked_logprobs`` empty and reports ``top_logprobs`` as asked, for the caller to
    # read instead.
    logprob_token_ids: tuple[int, ...] = ()
    # Report the log-prob of each prompt token given those before it
    # (``GenerationResult.prompt_logprobs``): a text's likelihood in one prefill.
    prompt_logprobs: bool = False
    # With prompt_logprobs: the first prompt token whose log-prob is wanted. An engine may then
    # read the prompt before it from its prefix cache instead of prefilling it; the tokens whose
    # log-probs it did not compute (before the cache's end) are NaN in the result. 0: every
    # prompt token's, none read from the cache.
    prompt_logprobs_start: int = 0


# The likeliest tokens at one position: each token's text and log-prob.
Alternatives = tuple[tuple[str, float], ...]


@dataclass(frozen=True)
class Generation:
    """One sampled output: its text and the log-prob of each token it sampled; with
    ``SamplingSpec.top_logprobs``, also each sampled token's text and, per position, the
    likeliest tokens. Log-probs are taken before temperature; an enforced output format's mask
    sets the tokens it forbids to -inf first, which leaves the ratio of two allowed tokens (the
    two verdict digits) the model's own."""

    text: str
    token_logprobs: tuple[float, ...]
    finish_reason: FinishReason
    tokens: tuple[str, ...] = ()
    top_logprobs: tuple[Alternatives, ...] = ()
    # With ``SamplingSpec.logprob_token_ids``, per position the log-prob of each of those tokens
    # in their order; empty when the engine does not give them.
    asked_logprobs: tuple[tuple[float, ...], ...] = ()

    @property
    def num_tokens(self) -> int:
        return len(self.token_logprobs)


@dataclass(frozen=True)
class GenerationResult:
    generations: tuple[Generation, ...]
    prompt_tokens: int
    # Prompt tokens whose KV cache the engine reused from an earlier request (prefix caching).
    cached_prompt_tokens: int = 0
    # With SamplingSpec.prompt_logprobs: the log-prob of each prompt token but the first (NaN
    # where the engine did not compute it: see ``SamplingSpec.prompt_logprobs_start``).
    prompt_logprobs: tuple[float, ...] = ()

    @property
    def generated_tokens(self) -> int:
        return sum(g.num_tokens for g in self.generations)


class Engine(Protocol):
    """What the judging code needs from an engine; nothing more."""

    @property
    def model_name(self) -> str: ...

    @property
    def max_model_len(self) -> int: ...

    def render_chat(self, messages: Sequence[ChatMessage]) -> Prompt:
        """Apply the model's chat template (thinking off where it knows the switch) and tokenize;
        ``Quoted`` parts of the messages as plain text only, never as markup."""
        ...

    async def generate(
        self, prompt: Prompt, spec: SamplingSpec, request_id: str
    ) -> GenerationResult:
        """Run one request. Cancelling the awaiting task aborts it in the engine."""
        ...

    async def check_health(self) -> None:
        """Raise EngineError if the engine cannot answer."""
        ...


class WrappedEngine:
    """An Engine that hands everything to ``inner``; subclasses override a method to change it
    (``MeteredEngine`` sees each request)."""

    def __init__(self, inner: Engine) -> None:
        self.inner = inner

    @property
    def model_name(self) -> str:
        return self.inner.model_name

    @property
    def max_model_len(self) -> int:
        return self.inner.max_model_len

    def render_chat(self, messages: Sequence[ChatMessage]) -> Prompt:
        return self.inner.render_chat(messages)

    async def generate(
        self, prompt: Prompt, spec: SamplingSpec, request_id: str
    ) -> GenerationResult:
        return await self.inner.generate(prompt, spec, request_id)

    async def check_health(self) -> None:
        await self.inner.check_health()


# Told of each request an engine completes: its request id and its result.
RequestObserver = Callable[[str, GenerationResult], None]


class MeteredEngine(WrappedEngine):
    """The one metering wrapper: an Engine that tells ``observe`` of every request it completes
    (the service's metrics, an evaluation's count of engine work)."""

    def __init__(self, inner: Engine, observe: RequestObserver) -> None:
        super().__init__(inner)
        self.observe = observe

    async def generate(
        self, prompt: Prompt, spec: SamplingSpec, request_id: str
    ) -> GenerationResult:
        result = await self.inner.generate(prompt, spec, request_id)
        self.observe(request_id, result)
        return result
