"""The OpenAI-compatible judge protocol of NeMo Gym's GenRM pipeline, as this service speaks it.

NeMo Gym's ``genrm_compare`` resources server judges a pair through its ``genrm_model`` server,
which posts an OpenAI chat completion to ``{base_url}/chat/completions`` (NeMo-RL sets base_url
from ``GENRM_BASE_URL``): the conversation in the ordinary roles, then, appended by
``GenRMModelMixin._preprocess_chat_completion_create_params``, an optional ``principle``
message and the two candidates as messages of role ``response_1`` and ``response_2``. It parses
the reply's content for JSON ``{"score_1": 1..5, "score_2": 1..5, "ranking": 1..6}``
(``parse_genrm_output``; ranking 1 = response 1 much better, 6 = response 2 much better).
See docs/nemo-gym.md for the commit read and what each field becomes.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from reflectrm.api.schemas import DEBIAS_DESCRIPTION, MAX_TEXT_CHARS, MODE_DESCRIPTION
from reflectrm.judging import defaults
from reflectrm.judging.debias import Debias
from reflectrm.judging.types import Message, Mode, Scoring

# Roles of the conversation before the candidates; developer is OpenAI's newer name for system.
CONVERSATION_ROLES = {
    "system": "system",
    "developer": "system",
    "user": "user",
    "assistant": "assistant",
}
CANDIDATE_ROLES = ("response_1", "response_2")
# Part types of a list-valued content that carry text (OpenAI chat, and Responses API items).
TEXT_PARTS = frozenset({"text", "input_text", "output_text"})


class TextPart(BaseModel):
    model_config = ConfigDict(extra="allow")
    type: str
    text: str | None = None


class GenRMMessage(BaseModel):
    """A chat message. Fields besides role and content (name, reasoning_content, ...) are
    accepted and not judged: the judge reads what each turn says."""

    model_config = ConfigDict(extra="allow")
    role: str = Field(..., max_length=64)
    content: str | list[TextPart] | None = None

    def text(self, where: str) -> str:
        """The content as one string; a part that is not text is refused, naming it."""
        content = self.content
        if content is None:
            return ""
        if isinstance(content, str):
            return content
        texts = []
        for k, part in enumerate(content):
            if part.type not in TEXT_PARTS or part.text is None:
                raise ValueError(
                    f"{where}: content part {k} is of type {part.type[:40]!r}; this judge reads "
                    f"text only (parts of type {', '.join(sorted(TEXT_PARTS))})"
                )
            texts.append(part.text)
        return "".join(texts)


class ReflectRMOptions(BaseModel):
    """How this service judges the pair (NeMo Gym: ``extra_body: {reflectrm: {...}}`` in the
    genrm_model server's config). The OpenAI sampling fields (temperature, top_p, max_tokens)
    are not these: the method samples as it is defined."""

    model_config = ConfigDict(extra="forbid")

    mode: Mode = Field(defaults.REWARD_MODE, description=MODE_DESCRIPTION)
    debias: Debias = Field(
        "swap",
        description=DEBIAS_DESCRIPTION + " Default swap: genrm_compare always shows a pair in "
        "the order its strategy lists it, so one order would let position bias into rewards.",
    )
    num_candidates: int | None = Field(None, ge=1, le=32, description="Stage-1 samples.")
    max_tokens: int | None = Field(
        None, ge=16, description="Generation limit per judge output. Default from the server."
    )
    no_verdict: Literal["failed", "unparseable", "neutral"] = Field(
        "failed",
        description="The reply when no judge output in any order had a verdict. failed: an "
        "empty answer, which genrm_compare (NeMo Gym 0.7) takes for a failed judge call: after "
        "its retries the cohort fails and every member is masked (mask_sample, failure_kind "
        "judge_failed, failure_reason) instead of rewarded; unparseable: a sentence without "
        "scores, a completed answer that genrm_compare scores with its default_score and "
        "default_ranking; neutral: the scores of a tie "
        '({"score_1": 3, "score_2": 3, "ranking": 3.5}). The last two are made-up scores.',
    )


class GenRMChatRequest(BaseModel):
    """An OpenAI chat completion request in the GenRM roles. Unknown fields are ignored (as an
    OpenAI-compatible server does) and named in the reply's ``reflectrm.ignored``."""

    model_config = ConfigDict(
        extra="allow",
        json_schema_extra={
            "examples": [
                {
                    "model": "reflectrm",
                    "messages": [
                        {"role": "user", "content": "What is the capital of France?"},
                        {"role": "response_1", "content": "Paris."},
                        {"role": "response_2", "content": "Lyon."},
                    ],
                    "max_tokens": 16384,
                    "temperature": 0.6,
                    "top_p": 0.95,
                }
            ]
        },
    )

    messages: list[GenRMMessage] = Field(
        ...,
        min_length=3,
        max_length=1002,
        description="The conversation (at most 1,000 turns, ending with a user turn), then one "
        "message of role response_1 and one of role response_2, last, in that order.",
    )
    model: str | None = Field(
        None, max_length=1000, description="Any name; the reply names the model that judged."
    )
    seed: int | None = Field(None, ge=0, lt=2**31, description="The judgment's seed.")
    n: int | None = Field(None, description="Choices: 1 only.")
    stream: bool | None = Field(None, description="false only: the verdict comes whole.")
    logprobs: bool | None = Field(None, description="false only: no token log-probs are given.")
    tools: list[Any] | None = Field(None, description="None: a judge calls no tools.")
    reflectrm: ReflectRMOptions = Field(default_factory=ReflectRMOptions)

    @model_validator(mode="after")
    def _protocol(self) -> GenRMChatRequest:
        if self.n not in (None, 1):
            raise ValueError(f"n is {self.n}; this judge answers with one choice (n: 1)")
        if self.stream:
            raise ValueError("stream: true is not served; the verdict comes whole (stream: false)")
        if self.logprobs:
            raise ValueError(
                "logprobs: true is not served: the reply is a verdict, not sampled tokens "
                "(NeMo Gym: return_token_id_information: false for the GenRM model server)"
            )
        if self.tools:
            raise ValueError("tools are not served: a judge calls no tools")
        self.split()  # the roles, checked once here so that errors are 422s naming the message
        return self

    def ignored(self) -> list[str]:
        """The body's fields this route does not read (sampling settings among them)."""
        return sorted(self.model_extra or {})

    def split(self) -> tuple[tuple[Message, ...], tuple[str, str]]:
        """The conversation, and the two candidates; ValueError saying what to fix."""
        *history, first, second = self.messages
        if (first.role, second.role) != CANDIDATE_ROLES:
            raise ValueError(
                "the last two messages must be the candidates, of role response_1 and then "
                f"response_2 (got {first.role[:40]!r} and {second.role[:40]!r})"
            )
        responses = (first.text("response_1"), second.text("response_2"))
        for name, text in zip(CANDIDATE_ROLES, responses, strict=True):
            if not text:
                raise ValueError(f"the {name} message is empty; send the candidate's text")
            if len(text) > MAX_TEXT_CHARS:
                raise ValueError(f"the {name} message is over {MAX_TEXT_CHARS:,} characters")
        if len(history) > 1000:
            raise ValueError(f"{len(history)} conversation turns; at most 1000")
        conversation = []
        for k, m in enumerate(history):
            where = f"messages[{k}]"
            if m.role == "principle":
                raise ValueError(
                    f"{where} is a principle: this judge takes none (its judging prompt has no "
                    "place for one, and adding a turn would change what is judged); set "
                    "use_principle: false in genrm_compare's config"
                )
            role = CONVERSATION_ROLES.get(m.role)
            if role is None:
                raise ValueError(
                    f"{where} has role {m.role[:40]!r}; before the candidates come the "
                    "conversation's turns, of role system, developer, user or assistant"
                )
            text = m.text(where)
            if not text:
                raise ValueError(f"{where} ({m.role}) is empty; every turn needs its text")
            if len(text) > MAX_TEXT_CHARS:
                raise ValueError(f"{where} is over {MAX_TEXT_CHARS:,} characters")
            conversation.append(Message(role, text))  # type: ignore[arg-type]
        if not conversation or conversation[-1].role != "user":
            raise ValueError(
                "the conversation before the candidates must end with a user turn: the query "
                "the two responses answer"
            )
        return tuple(conversation), responses


# --- the reply ----------------------------------------------------------------------------------


class ChatMessageOut(BaseModel):
    role: Literal["assistant"] = "assistant"
    content: str


class ChatChoice(BaseModel):
    index: int = 0
    message: ChatMessageOut
    finish_reason: Literal["stop"] = "stop"
    logprobs: None = None


class ChatUsage(BaseModel):
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int


class GenRMOrder(BaseModel):
    first: Literal[1, 2] = Field(description="The response shown first in this order.")
    winner: Literal[1, 2] | None
    scores: tuple[float, float] = Field(description="Vote shares of response 1 and 2.")


class ReflectRMVerdict(BaseModel):
    """This service's own account of the judgment (genrm_compare reads only the content)."""

    winner: Literal[1, 2] | None
    scores: tuple[float, float] = Field(
        description="Scores of response 1 and 2 (debiased; verdict probabilities or vote shares, "
        "as `scoring` says); score_i = 1 + 4 x score."
    )
    outcome: Literal["verdict", "no_verdict"]
    no_verdict: bool = Field(description="No judge output in any order had a verdict.")
    mode: Mode
    scoring: Scoring
    debias: Debias
    consistent: bool | None
    orders: list[GenRMOrder] | None
    votes: tuple[int, int]
    analysis: str | None
    parse_failures: int
    seed: int
    request_id: str
    latency_ms: float
    template_version: str
    ignored: list[str] = Field(description="Fields of the request that were not read.")


class GenRMChatCompletion(BaseModel):
    """An OpenAI chat completion whose content is the GenRM verdict JSON."""

    id: str
    object: Literal["chat.completion"] = "chat.completion"
    created: int
    model: str
    choices: list[ChatChoice]
    usage: ChatUsage
    reflectrm: ReflectRMVerdict


class ModelCard(BaseModel):
    id: str
    object: Literal["model"] = "model"
    created: int
    owned_by: str = "reflectrm"


class ModelList(BaseModel):
    object: Literal["list"] = "list"
    data: list[ModelCard]
