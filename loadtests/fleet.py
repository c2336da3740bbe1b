"""A real vLLM fleet on loopback, for the fleet tests and measurements: ``vllm serve`` replicas
(the CPU build here, run exactly like the in-process engine) behind ``vllm-router``.

Every process is started in its own process group and stopped through that group only
(SIGINT first, then SIGTERM, then SIGKILL for whatever of the group is left), so a replica's
engine-core and worker processes go with it. ``Replica.crash`` kills a replica's group at once,
as a machine failure would.

    with local_fleet(replicas=2, log_dir=Path("runs/fleet")) as fleet:
        fleet.router_url, fleet.replicas[0].metrics()
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from loadtests.common.metrics import parse_metrics
from loadtests.common.ports import HOST, free_port
from loadtests.common.process import kill_group, launch, stop_process, wait_ready
from reflectrm.engines.config import EngineConfig
from reflectrm.engines.factory import resolve
from reflectrm.engines.vllm_engine import engine_environment, vllm_serve_args

# Finished requests (a request aborted by its client is not counted here by vLLM 0.32).
SUCCESS = "vllm:request_success_total"
# The engine counters read from each replica's own /metrics.
COUNTERS = (
    SUCCESS,
    "vllm:prefix_cache_queries_total",
    "vllm:prefix_cache_hits_total",
    "vllm:prompt_tokens_total",
    "vllm:generation_tokens_total",
    "vllm:num_requests_running",
)


def stop_group(process: subprocess.Popen[Any], grace_s: float = 30.0) -> None:
    """Stop a process started in its own session and everything in its group: SIGINT (given
    ``grace_s``), SIGTERM (10 s), SIGKILL to the group; children still ending (engine core,
    workers) are given 10 s more, then SIGKILL too."""
    stop_process(process, grace_s=(grace_s, 10.0), leftovers_s=10.0, leftovers_signal=None)


@dataclass
class Replica:
    name: str
    port: int
    proc: subprocess.Popen[Any]
    log: Path

    @property
    def url(self) -> str:
        return f"http://{HOST}:{self.port}"

    def alive(self) -> bool:
        return self.proc.poll() is None

    def metrics(self) -> dict[str, float]:
        response = httpx.get(f"{self.url}/metrics", timeout=10)
        response.raise_for_status()
        return parse_metrics(response.text, by="name", names=COUNTERS)

    def crash(self) -> None:
        """Kill the replica and its engine processes at once (SIGKILL to its process group)."""
        kill_group(self.proc)

    def stop(self) -> None:
        stop_group(self.proc)


def replica_config(
    kv_cache_gib: float = 1.0,
    max_model_len: int = 4096,
    dtype: str = "auto",
    model: str = "default",
) -> EngineConfig:
    """A model setting's model (the default judge unless told), resolved, with the small KV
    cache a shared machine affords."""
    return resolve(
        EngineConfig(
            model=model, kv_cache_gib=kv_cache_gib, max_model_len=max_model_len, dtype=dtype
        )
    )


def start_replica(
    config: EngineConfig,
    name: str,
    log_dir: Path,
    core: int | None = None,
    extra_env: dict[str, str] | None = None,
    extra_args: Sequence[str] = (),
) -> Replica:
    """``vllm serve`` for a resolved config. The CPU build's ``vllm`` console script fails
    (it looks up the version of a distribution named ``vllm``), so the server module runs.
    ``core``: the CPU core its engine's threads are bound to (the CPU build binds every engine to
    core 0 otherwise, so two replicas on one machine would share one core). ``extra_args``: more
    ``vllm serve`` options (``--enable-log-requests`` logs each request's id)."""
    port = free_port()
    env = {**engine_environment(), **(extra_env or {})}
    if core is not None:
        env["VLLM_CPU_OMP_THREADS_BIND"] = str(core)
    command = [
        sys.executable,
        "-m",
        "vllm.entrypoints.openai.api_server",
        *vllm_serve_args(config, HOST, port),
        "--disable-uvicorn-access-log",
        *extra_args,
    ]
    log = log_dir / f"{name}.log"
    return Replica(name, port, launch(command, log, env=env), log)


def wait_healthy(started: Replica | Router, timeout_s: float, what: str) -> None:
    """GET /health answers 200 within ``timeout_s``; RunError past it or if the process exits."""
    wait_ready(started.url, timeout_s, started, "/health", what=what)


@dataclass
class Router:
    port: int
    metrics_port: int
    proc: subprocess.Popen[Any]
    log: Path

    @property
    def url(self) -> str:
        return f"http://{HOST}:{self.port}"

    def stop(self) -> None:
        stop_group(self.proc, grace_s=10.0)


def start_router(worker_urls: Sequence[str], log_dir: Path, policy: str) -> Router:
    """vllm-router in front of the replicas; health checked every 2 s so a dead replica leaves
    the hash ring quickly."""
    port, metrics_port = free_port(), free_port()
    command = [
        str(Path(sys.executable).parent / "vllm-router"),
        "--host",
        HOST,
        "--port",
        str(port),
        "--worker-urls",
        *worker_urls,
        "--policy",
        policy,
        "--prometheus-host",
        HOST,
        "--prometheus-port",
        str(metrics_port),
        "--worker-startup-check-interval",
        "1",
        "--health-check-interval-secs",
        "2",
        "--health-failure-threshold",
        "1",
        "--log-level",
        "warning",
    ]
    log = log_dir / "router.log"
    return Router(port, metrics_port, launch(command, log), log)


@dataclass
class Fleet:
    replicas: list[Replica]
    router: Router
    config: EngineConfig
    log_dir: Path
    stopped: list[str] = field(default_factory=list)

    @property
    def router_url(self) -> str:
        return self.router.url

    def counters(self) -> dict[str, dict[str, float]]:
        """Each live replica's engine counters, by replica name."""
        return {r.name: r.metrics() for r in self.replicas if r.alive()}


@contextlib.contextmanager
def local_fleet(
    replicas: int = 2,
    log_dir: Path | None = None,
    policy: str = "consistent_hash",
    kv_cache_gib: float = 1.0,
    max_model_len: int = 4096,
    start_timeout_s: float = 600.0,
    extra_env: dict[str, str] | None = None,
    extra_args: Sequence[str] = (),
    dtype: str = "auto",
    model: str = "default",
) -> Iterator[Fleet]:
    """Start the replicas (in parallel) and the router; stop all of them on exit."""
    log_dir = log_dir or Path(os.environ.get("TMPDIR", "/tmp")) / f"reflectrm-fleet-{os.getpid()}"
    log_dir.mkdir(parents=True, exist_ok=True)
    config = replica_config(kv_cache_gib, max_model_len, dtype, model)
    started: list[Replica] = []
    router: Router | None = None
    try:
        cores = os.cpu_count() or 1
        for i in range(replicas):
            started.append(
                start_replica(
                    config,
                    f"replica-{i}",
                    log_dir,
                    core=i % cores,
                    extra_env=extra_env,
                    extra_args=extra_args,
                )
            )
        for r in started:
            wait_healthy(r, start_timeout_s, r.name)
        router = start_router([r.url for r in started], log_dir, policy)
        wait_healthy(router, 120, "vllm-router")
        yield Fleet(started, router, config, log_dir)
    finally:
        if router is not None:
            router.stop()
        for r in started:
            r.stop()
