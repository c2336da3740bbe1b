"""What it takes to open an engine: the model and the engine's own knobs, nothing of the service.

A leaf: the service's ``Settings`` map onto it (``reflectrm.runtime.engine_config``), and so can a
script or a test that opens an engine without the HTTP service.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from reflectrm.settings import DEFAULT_MODEL, default_cache_dir

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
    # Where the default model is prepared.
    cache_dir: Path = field(default_factory=default_cache_dir)
    # Checkpoints trained for another prompt template version are refused.
    template_version: str = "v1"
    served_model_name: str | None = None
    device: Literal["auto", "cpu", "cuda"] = "auto"
    dtype: str = "auto"
    max_model_len: int | None = None
    kv_cache_gib: float = 4.0
    gpu_memory_utilization: float = 0.9
    enforce_eager: bool | None = None
    enable_chunked_prefill: bool | None = None
    enable_prefix_caching: bool = True
    max_num_seqs: int = 64
    # "priority": requests carry SamplingSpec.priority (lower runs first).
    scheduling_policy: Literal["fcfs", "priority"] = "fcfs"
    tensor_parallel_size: int = 1
    remote: RemoteConfig = field(default_factory=RemoteConfig)
    # True once ``model`` is the path or hub id the engine loads (see engines.factory.resolve).
    resolved: bool = False
