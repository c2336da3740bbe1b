"""A vLLM fleet as the engine: ``vllm serve`` replicas (usually behind a router) reached over
vLLM's OpenAI-compatible HTTP API. The judging code sees the same Engine as in-process.

What each Engine call becomes (field names checked against vLLM 0.32's entrypoints):

- ``render_chat``: with a local tokenizer (``RemoteConfig.tokenizer``), rendered and tokenized here
  as the in-process engine does (engines/chat.py): quoted texts can never become special tokens
  or chat markers. Without one, ``POST /tokenize`` with ``messages`` (the fleet applies the
  model's chat template with the generation prompt, thinking off where the template knows the
  switch). vLLM's /tokenize encodes the rendered text whole with special tokens parsed and has no
  way to tokenize parts of it as plain text, so on that path a judged text holding the model's
  markup (``<|im_end|>``) does become control tokens: opening such an engine logs a warning, and a
  deployment judging texts it does not trust sets the local tokenizer.
- ``generate``: ``POST /v1/completions`` with the prompt as token ids, ``n``, ``temperature``,
  ``max_tokens``, ``seed``, ``stop`` (kept in the text, as in-process), ``logprobs: 0`` (the sampled
  token's log-prob at each position, ``choices[i].logprobs.token_logprobs``), ``return_token_ids``
  and ``structured_outputs: {"regex": ...}`` (the old ``guided_regex`` is silently ignored by
  vLLM >= 0.12). Cached prompt tokens come from ``usage.prompt_tokens_details.cached_tokens``,
  which replicas report with ``--enable-prompt-tokens-details``.
- Every engine request of one judgment carries the judgment's id in ``X-Session-ID``: a
  consistent-hash router (vllm-router ``--policy consistent_hash``, production-stack
  ``--routing-logic session``) keeps them on one replica, whose prefix cache then serves the
  shared prompt parts. ``X-Request-Id`` carries the engine request id into the replica's logs.
- Cancelling ``generate`` closes its HTTP request; vLLM aborts a request whose client went away.
- ``check_health``: ``GET /health``.

Failures: an attempt is repeated (with a doubling wait) only where it is safe: the request never
reached the fleet (connection refused or timed out), its connection was lost before an answer
(completions have no side effects; a seeded request samples the same again), or the fleet
answered 408/429/502/503/504. Other answers, read timeouts and cancellation are never repeated.
When the attempts run out, or the answer is incomplete, the call raises ``EngineError`` (the
service answers 503): a judgment gets every output it asked for, or fails whole.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import Any

import httpx

from reflectrm.checkpoints.resolve import DEFAULT_MODEL
from reflectrm.engines.base import (
    ChatMessage,
    EngineError,
    FinishReason,
    Generation,
    GenerationResult,
    Prompt,
    SamplingSpec,
    plain_text,
)
from reflectrm.engines.chat import ChatRenderer, continuation
from reflectrm.engines.config import EngineConfig, RemoteConfig
from reflectrm.engines.request_ids import judgment_id_of
from reflectrm.retry import AttemptResult, RetryPolicy, retry_call, retry_call_async

log = logging.getLogger(__name__)

COMPLETIONS = "/v1/completions"
TOKENIZE = "/tokenize"
HEALTH = "/health"
MODELS = "/v1/models"
SESSION_HEADER = "X-Session-ID"
REQUEST_ID_HEADER = "X-Request-Id"
# Statuses that say "not now" rather than "not this request": timeout at a proxy, overload,
# no healthy replica behind the router, a replica starting or stopping.
FLEET_RETRY_STATUSES = frozenset({408, 429, 502, 503, 504})
# Longest wait a Retry-After header may impose between two attempts.
MAX_RETRY_AFTER_S = 10.0
# How often opening the engine asks a fleet that is not ready yet.
STARTUP_POLL_S = 2.0
# Thinking off where a template knows the switch; templates without it ignore the variable.
CHAT_TEMPLATE_KWARGS = {"enable_thinking": False}


class _AttemptError(Exception):
    """An answer that is not a usable result, and why."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def retry_policy(config: RemoteConfig) -> RetryPolicy:
    """Which attempts are repeated, and after how long: ``config.retries`` more after a
    connection that failed or was lost (``CONNECTION_ERRORS``; a read timeout is not repeated:
    the fleet may still be working on it) or a ``FLEET_RETRY_STATUSES`` answer, waiting
    ``config.backoff_s`` doubled per retry (no jitter, no cap), or the fleet's Retry-After up to
    ``MAX_RETRY_AFTER_S`` when that is longer."""
    return RetryPolicy(
        max_retries=config.retries,
        backoff_s=config.backoff_s,
        max_backoff_s=math.inf,
        jitter=0.0,
        statuses=FLEET_RETRY_STATUSES,
        max_retry_after_s=MAX_RETRY_AFTER_S,
    )


def _connection_failure(exc: httpx.HTTPError) -> str:
    """Why a request got no answer, in words."""
    if isinstance(exc, httpx.ConnectTimeout | httpx.ConnectError | httpx.PoolTimeout):
        return f"cannot connect ({type(exc).__name__}: {exc})"
    if isinstance(exc, httpx.TimeoutException):
        return f"no answer in time ({type(exc).__name__})"
    if isinstance(exc, httpx.RemoteProtocolError | httpx.ReadError | httpx.WriteError):
        return f"connection lost ({type(exc).__name__}: {exc})"
    return f"{type(exc).__name__}: {exc}"


def _failure_of(result: AttemptResult) -> str:
    """Why an attempt failed: its exception, or the answer's status and message."""
    if isinstance(result, httpx.HTTPError):
        return _connection_failure(result)
    if isinstance(result, Exception):
        return f"{type(result).__name__}: {result}"
    return f"answered {result.status_code}: {_error_message(result)}"


def _error_message(response: httpx.Response) -> str:
    """vLLM's ``{"error": {"message": ...}}``, FastAPI's ``{"detail": ...}``, or the text."""
    try:
        data = response.json()
    except ValueError:
        return response.text[:300]
    if isinstance(data, dict):
        error = data.get("error")
        if isinstance(error, dict) and error.get("message"):
            return str(error["message"])[:300]
        if data.get("detail"):
            return str(data["detail"])[:300]
        if isinstance(data.get("message"), str):
            return str(data["message"])[:300]
    return response.text[:300]


def _json_of(response: httpx.Response) -> dict[str, Any]:
    """The body of a 200, or the attempt's failure."""
    if response.status_code != 200:
        raise _AttemptError(_failure_of(response))
    try:
        data = response.json()
    except ValueError as exc:
        raise _AttemptError(f"answered 200 with a body that is not JSON: {exc}") from None
    if not isinstance(data, dict):
        raise _AttemptError("answered 200 with a JSON body that is not an object")
    return data


class RemoteEngine:
    """The Engine interface over a vLLM fleet's HTTP API."""

    def __init__(
        self,
        config: RemoteConfig,
        client: httpx.AsyncClient,
        sync_client: httpx.Client,
        served_model: str,
        max_model_len: int,
        model_name: str | None = None,
        tokenizer: Any = None,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self._config = config
        self._client = client
        self._sync = sync_client
        self._served_model = served_model
        self._max_model_len = max_model_len
        self._model_name = model_name or served_model
        self._renderer = ChatRenderer(tokenizer) if tokenizer is not None else None
        self._sleep = sleep
        self._retry = retry_policy(config)

    @property
    def model_name(self) -> str:
        return self._model_name

    @property
    def max_model_len(self) -> int:
        return self._max_model_len

    # --- rendering ----------------------------------------------------------------------------

    @property
    def renders_locally(self) -> bool:
        """Whether prompts are tokenized here, quoted texts as plain text (see the module doc)."""
        return self._renderer is not None

    def render_chat(self, messages: Sequence[ChatMessage]) -> Prompt:
        if self._renderer is not None:
            return self._renderer.render(messages)
        # The fleet tokenizes the texts as it tokenizes the template: markup in them is parsed.
        body = {
            "model": self._served_model,
            "messages": [
                {"role": m["role"], "content": plain_text(m["content"])} for m in messages
            ],
            **continuation(messages),
            "add_special_tokens": False,
            "chat_template_kwargs": CHAT_TEMPLATE_KWARGS,
        }
        data = self._call_sync(TOKENIZE, body)
        tokens = data.get("tokens")
        if not isinstance(tokens, list) or not all(isinstance(t, int) for t in tokens):
            raise EngineError(f"the engine fleet's {TOKENIZE} answered without token ids")
        # The fleet renders the text itself and returns only its tokens.
        return Prompt(text="", token_ids=tuple(tokens))

    # --- generation ---------------------------------------------------------------------------

    def completion_body(self, prompt: Prompt, spec: SamplingSpec) -> dict[str, Any]:
        body: dict[str, Any] = {
            "model": self._served_model,
            "prompt": list(prompt.token_ids),
            "n": spec.n,
            "temperature": spec.temperature,
            "max_tokens": spec.max_tokens,
            "logprobs": spec.top_logprobs,
            "return_token_ids": True,
            "include_stop_str_in_output": True,
        }
        if spec.seed is not None:
            body["seed"] = spec.seed
        if spec.stop:
            body["stop"] = list(spec.stop)
        if spec.regex is not None:
            body["structured_outputs"] = {"regex": spec.regex}
        if spec.logprob_token_ids:
            # vLLM's extension (0.32: ``CompletionRequest.logprob_token_ids``, which needs
            # ``logprobs`` set): each position's ``top_logprobs`` then holds the sampled token
            # and these, keyed by their text as usual, whatever their rank. A fleet that ignores
            # it answers the likeliest ``logprobs`` tokens instead; both are read as
            # alternatives (``Generation.top_logprobs``), never as ``asked_logprobs``, since
            # the answer does not say which of the two it is.
            body["logprob_token_ids"] = list(spec.logprob_token_ids)
            body["logprobs"] = spec.top_logprobs or len(spec.logprob_token_ids)
        if spec.prompt_logprobs:
            # vLLM's extension of the completions API. ``prompt_logprobs_start`` is not passed:
            # vLLM's API has no way to let such a request read the prefix cache
            # (``skip_reading_prefix_cache`` is not a field of its CompletionRequest), so every
            # prompt token's log-prob is computed, as a start of 0 asks.
            body["prompt_logprobs"] = 0
        return body

    def headers_for(self, request_id: str) -> dict[str, str]:
        headers = {REQUEST_ID_HEADER: request_id}
        if self._config.affinity:
            headers[SESSION_HEADER] = judgment_id_of(request_id)
        return headers

    async def generate(
        self, prompt: Prompt, spec: SamplingSpec, request_id: str
    ) -> GenerationResult:
        body = self.completion_body(prompt, spec)
        data = await self._call(COMPLETIONS, body, self.headers_for(request_id))
        return parse_completion(data, prompt, spec, request_id)

    async def check_health(self) -> None:
        try:
            response = await self._client.get(HEALTH)
        except httpx.HTTPError as exc:
            raise EngineError(
                f"the engine fleet at {self._config.url} is unreachable: {_connection_failure(exc)}"
            ) from exc
        if response.status_code != 200:
            raise EngineError(
                f"the engine fleet at {self._config.url} is not healthy: {HEALTH} answered "
                f"{response.status_code} {_error_message(response)}".rstrip()
            )

    # --- attempts -----------------------------------------------------------------------------

    def _give_up(
        self, path: str, exc: httpx.HTTPError | _AttemptError, attempts: _Attempts
    ) -> EngineError:
        """The error of a call whose last attempt failed with ``exc``."""
        reason = exc.reason if isinstance(exc, _AttemptError) else _connection_failure(exc)
        tries = f" (after {attempts.made} attempts)" if attempts.made > 1 else ""
        return EngineError(f"the engine fleet at {self._config.url} failed {path}: {reason}{tries}")

    async def _call(self, path: str, body: dict[str, Any], headers: dict[str, str]) -> dict:
        attempts = _Attempts(path, headers)
        try:
            response = await retry_call_async(
                self._retry,
                lambda: self._client.post(path, json=body, headers=headers),
                sleep=self._sleep,
                on_retry=attempts.retrying,
            )
            return _json_of(response)
        except (httpx.HTTPError, _AttemptError) as exc:
            raise self._give_up(path, exc, attempts) from None

    def _call_sync(self, path: str, body: dict[str, Any]) -> dict:
        attempts = _Attempts(path)
        try:
            response = retry_call(
                self._retry,
                lambda: self._sync.post(path, json=body),
                sleep=time.sleep,
                on_retry=attempts.retrying,
            )
            return _json_of(response)
        except (httpx.HTTPError, _AttemptError) as exc:
            raise self._give_up(path, exc, attempts) from None


class _Attempts:
    """Counts one call's attempts and logs each retry."""

    def __init__(self, path: str, headers: dict[str, str] | None = None) -> None:
        self.path = path
        self.headers = headers
        self.made = 1

    def retrying(self, attempt: int, result: AttemptResult, delay: float) -> None:
        self.made += 1
        what = self.path if self.headers is None else f"{self.path} {self.headers}"
        log.warning("%s: %s; retrying in %.1f s", what, _failure_of(result), delay)


def parse_completion(
    data: dict[str, Any], prompt: Prompt, spec: SamplingSpec, request_id: str
) -> GenerationResult:
    """A /v1/completions answer as the engine's result; anything short of ``spec.n`` complete
    outputs with a log-prob per token is an EngineError, never a partial result."""

    def bad(what: str) -> EngineError:
        return EngineError(f"the engine fleet's answer to {request_id} is incomplete: {what}")

    choices = data.get("choices")
    if not isinstance(choices, list) or len(choices) != spec.n:
        count = len(choices) if isinstance(choices, list) else "no"
        raise bad(f"{count} outputs for n={spec.n}")
    generations = []
    for choice in sorted(choices, key=lambda c: int(c.get("index", 0))):
        logprobs = (choice.get("logprobs") or {}).get("token_logprobs")
        token_ids = choice.get("token_ids")
        if not isinstance(logprobs, list) or any(lp is None for lp in logprobs):
            raise bad("an output without per-token log-probs")
        if isinstance(token_ids, list) and len(token_ids) != len(logprobs):
            raise bad(f"{len(token_ids)} token ids but {len(logprobs)} log-probs")
        reason = choice.get("finish_reason")
        finish: FinishReason = reason if reason in ("stop", "length") else "abort"
        tokens, top = _alternatives(choice.get("logprobs") or {}, spec.top_logprobs)
        generations.append(
            Generation(
                text=str(choice.get("text", "")),
                token_logprobs=tuple(float(lp) for lp in logprobs),
                finish_reason=finish,
                tokens=tokens,
                top_logprobs=top,
            )
        )
    usage = data.get("usage") or {}
    details = usage.get("prompt_tokens_details") or {}
    return GenerationResult(
        generations=tuple(generations),
        prompt_tokens=len(prompt.token_ids),
        cached_prompt_tokens=int(details.get("cached_tokens") or 0),
        prompt_logprobs=_prompt_logprobs(choices, prompt, bad) if spec.prompt_logprobs else (),
    )


def _prompt_logprobs(
    choices: list[dict[str, Any]], prompt: Prompt, bad: Callable[[str], EngineError]
) -> tuple[float, ...]:
    """The prompt tokens' log-probs of a vLLM completions answer (``prompt_logprobs``: per
    position None or {token id: {"logprob": x, ...}}); the first token has none."""
    entries = choices[0].get("prompt_logprobs")
    if not isinstance(entries, list) or len(entries) != len(prompt.token_ids):
        raise bad("no prompt log-probs (a fleet that is not vLLM ignores prompt_logprobs)")
    out = []
    for token, entry in zip(prompt.token_ids[1:], entries[1:], strict=True):
        value = entry.get(str(token)) if isinstance(entry, dict) else None
        logprob = value.get("logprob") if isinstance(value, dict) else value
        if not isinstance(logprob, (int, float)):
            raise bad(f"no log-prob for prompt token {token}")
        out.append(float(logprob))
    return tuple(out)


def _alternatives(
    logprobs: dict[str, Any], wanted: int
) -> tuple[tuple[str, ...], tuple[tuple[tuple[str, float], ...], ...]]:
    """The sampled tokens' texts and each position's likeliest tokens, as the completions API
    gives them (``tokens``, ``top_logprobs``: one {text: log-prob} per position); empty when not
    asked for, or when the fleet ignored the request (the judge then reports its fallback)."""
    tokens, top = logprobs.get("tokens"), logprobs.get("top_logprobs")
    if not wanted or not isinstance(tokens, list) or not isinstance(top, list):
        return (), ()
    if len(top) != len(tokens) or not all(isinstance(entry, dict) for entry in top):
        return (), ()
    alternatives = tuple(
        tuple((str(text), float(lp)) for text, lp in entry.items() if lp is not None)
        for entry in top
    )
    return tuple(str(t) for t in tokens), alternatives


# --- opening the engine ---------------------------------------------------------------------


def _clients(config: RemoteConfig, transport: Any = None) -> tuple[httpx.AsyncClient, httpx.Client]:
    """The two connection pools: async for generation and health, sync for rendering (which the
    judging code calls from worker threads). ``transport`` replaces the network in tests."""
    assert config.url is not None
    headers = {"Authorization": f"Bearer {config.api_key}"} if config.api_key else {}
    timeout = httpx.Timeout(config.timeout_s, connect=config.connect_timeout_s)
    # No pool limit: concurrency is bounded by the judge's admission (slots x requests each).
    limits = httpx.Limits(max_connections=None, max_keepalive_connections=256)
    base = config.url.rstrip("/")
    common: dict[str, Any] = {
        "base_url": base,
        "headers": headers,
        "timeout": timeout,
        "limits": limits,
    }
    if transport is not None:
        common["transport"] = transport
    return httpx.AsyncClient(**common), httpx.Client(**common)


def choose_model(models: dict[str, Any], wanted: str, url: str) -> tuple[str, int | None]:
    """The fleet's model the judge asks for (``wanted``, or the only one for 'default'), and its
    context length if /v1/models reports it (vLLM does; production-stack's router does not)."""
    cards = [m for m in models.get("data") or [] if isinstance(m, dict) and m.get("id")]
    names = [str(m["id"]) for m in cards]
    if wanted == DEFAULT_MODEL:
        if len(cards) != 1:
            raise EngineError(
                f"the engine fleet at {url} serves {names or 'no models'}; name the one to judge "
                "with (REFLECTRM_MODEL)"
            )
        card = cards[0]
    else:
        found = [m for m in cards if m["id"] == wanted]
        if not found:
            raise EngineError(
                f"the engine fleet at {url} does not serve {wanted!r}; it serves {names}"
            )
        card = found[0]
    max_len = card.get("max_model_len")
    return str(card["id"]), max_len if isinstance(max_len, int) and max_len > 0 else None


async def _wait_for_fleet(
    client: httpx.AsyncClient, config: RemoteConfig, wanted: str
) -> tuple[str, int]:
    """Poll /health and /v1/models until the fleet answers (a fleet may start after the judge)."""
    deadline = time.monotonic() + config.startup_timeout_s
    last = "no answer yet"
    while True:
        try:
            health = await client.get(HEALTH)
            models = _json_of(await client.get(MODELS)) if health.status_code == 200 else None
            if models is not None and not models.get("data"):
                last = f"{MODELS} lists no models yet"
            elif models is not None:
                name, max_len = choose_model(models, wanted, str(config.url))
                if max_len is None:
                    # /tokenize reports the serving replica's context length.
                    probe = {"model": name, "prompt": "context length"}
                    max_len = _json_of(await client.post(TOKENIZE, json=probe)).get("max_model_len")
                if not isinstance(max_len, int) or max_len <= 0:
                    raise EngineError(
                        f"the engine fleet at {config.url} reports no context length for {name}"
                    )
                return name, max_len
            else:
                last = f"{HEALTH} answered {health.status_code}"
        except httpx.HTTPError as exc:
            last = _connection_failure(exc)
        except _AttemptError as exc:
            last = f"{MODELS} {exc.reason}"
        if time.monotonic() >= deadline:
            raise EngineError(
                f"the engine fleet at {config.url} was not ready within "
                f"{config.startup_timeout_s:.0f} s: {last}"
            )
        log.info("waiting for the engine fleet at %s: %s", config.url, last)
        await asyncio.sleep(min(STARTUP_POLL_S, max(0.0, deadline - time.monotonic())))


def _local_tokenizer(config: EngineConfig) -> Any:
    from transformers import AutoTokenizer

    from reflectrm.checkpoints.resolve import resolve_model

    assert config.remote.tokenizer is not None
    path = resolve_model(config.remote.tokenizer, config.cache_dir, config.template_version)
    return AutoTokenizer.from_pretrained(path)


@contextlib.asynccontextmanager
async def remote_engine(config: EngineConfig, transport: Any = None) -> AsyncIterator[RemoteEngine]:
    """Connect to the fleet, wait until it serves the model, and close the connections on exit."""
    remote = config.remote
    if not remote.url:
        raise EngineError("the remote engine needs the fleet's base URL (REFLECTRM_ENGINE_URL)")
    client, sync_client = _clients(remote, transport)
    try:
        served, max_len = await _wait_for_fleet(client, remote, config.model)
        tokenizer = None
        if remote.tokenizer is not None:
            tokenizer = await asyncio.to_thread(_local_tokenizer, config)
        engine = RemoteEngine(
            remote,
            client,
            sync_client,
            served_model=served,
            max_model_len=min(max_len, config.max_model_len or max_len),
            model_name=config.served_model_name or served,
            tokenizer=tokenizer,
        )
        log.info("engine fleet at %s serves %s (max_model_len=%d)", remote.url, served, max_len)
        if tokenizer is None:
            log.warning(
                "prompts are tokenized by the fleet's %s, which turns chat markup inside judged "
                "texts (such as <|im_end|>) into control tokens of the judge's prompt; set "
                "REFLECTRM_ENGINE_TOKENIZER to the fleet model's tokenizer to tokenize judged "
                "texts as plain text",
                TOKENIZE,
            )
        yield engine
    finally:
        await client.aclose()
        sync_client.close()
