"""What it takes to open an engine: the model and the engine's own knobs, nothing of the service.

A leaf: the service's ``Settings`` map onto it (``reflectrm.runtime.engine_config``), and so can a
script or a test that opens an engine without the HTTP service.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from reflectrm.settings import DEFAULT_MODEL, default_cache_dir


@dataclass(frozen=True)
class EngineConfig:
    # 'default' (the embedded default model), a checkpoint folder, or a hub id.
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
    # True once ``model`` is the path or hub id the engine loads (see engines.factory.resolve).
    resolved: bool = False
