"""NeMo Gym 0.7.0's ``genrm_compare`` resources server and ``genrm_model`` model server, started
as real HTTP servers from the pinned package (requirements/frameworks.txt) in its side
environment (requirements/nemo-gym-servers.txt), each as its own process with the run's
configuration, as Gym's runner starts them (tests/frameworks/gym_serve.py says how and what
differs), with ``genrm_model`` calling a judge at ``base_url``. Stopped by their pids, SIGINT
first."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import yaml

from tests.frameworks import installed

LAUNCHER = Path(__file__).with_name("gym_serve.py")
START_TIMEOUT_S = 180.0


@dataclass(frozen=True)
class GymRun:
    compare_url: str  # genrm_compare: /verify, /compare
    model_url: str  # genrm_model: /v1/responses
    config: dict[str, Any]
    logs: dict[str, Path]

    def log(self, name: str = "genrm_compare_resources_server") -> str:
        return self.logs[name].read_text(errors="replace")


def _url(config: dict[str, Any], name: str) -> str:
    (kind,) = config[name]
    (server,) = config[name][kind]
    block = config[name][kind][server]
    return f"http://{block['host']}:{block['port']}"


def _stop(process: subprocess.Popen[bytes]) -> None:
    for sig, wait_s in ((signal.SIGINT, 10), (signal.SIGTERM, 5), (signal.SIGKILL, 5)):
        if process.poll() is not None:
            return
        process.send_signal(sig)
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(wait_s)


def _wait_healthy(url: str, process: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"{url} exited {process.returncode}:\n{log.read_text()[-3000:]}")
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                return
        time.sleep(0.25)
    raise RuntimeError(f"{url} not healthy in {START_TIMEOUT_S:g} s:\n{log.read_text()[-3000:]}")


@contextlib.contextmanager
def gym_servers(
    judge_url: str, tmp: Path, compare: dict[str, Any], model: dict[str, Any] | None = None
) -> Iterator[GymRun]:
    """Both servers running; ``compare`` and ``model`` are set on Gym's shipped configuration
    of genrm_compare and genrm_model (``base_url`` is ``judge_url`` plus /v1, GENRM_BASE_URL)."""
    python = installed.gym_python()
    model = {"base_url": f"{judge_url}/v1", "api_key": "dummy", "model": "judge", **(model or {})}
    made = subprocess.run(
        [str(python), str(LAUNCHER), "config", json.dumps(compare), json.dumps(model)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert made.returncode == 0, made.stderr[-3000:]
    config = yaml.safe_load(made.stdout)
    names = ["genrm_model", "genrm_compare_resources_server"]
    processes: list[subprocess.Popen[bytes]] = []
    logs = {name: tmp / f"{name}.log" for name in names}
    try:
        for name in names:
            env = {**os.environ, "NEMO_GYM_CONFIG_DICT": made.stdout, "NEMO_GYM_CONFIG_PATH": name}
            with logs[name].open("wb") as out:
                processes.append(
                    subprocess.Popen(
                        [str(python), str(LAUNCHER), "serve", name],
                        env=env,
                        stdout=out,
                        stderr=subprocess.STDOUT,
                    )
                )
        for name, process in zip(names, processes, strict=True):
            _wait_healthy(_url(config, name), process, logs[name])
        yield GymRun(
            compare_url=_url(config, "genrm_compare_resources_server"),
            model_url=_url(config, "genrm_model"),
            config=config,
            logs=logs,
        )
    finally:
        for process in processes:
            _stop(process)
