"""The CPU images built from the Dockerfiles and run on a real Docker engine (see conftest.py).

- The service's image: unprivileged, no wheel left behind, the model baked in.
- The compose stack (compose.yaml + deploy/compose.cpu.yaml, Prometheus built from Debian's
  package): the judge turns healthy, judges a pair through its published loopback port, runs as
  10001 with a writable cache volume, is scraped by Prometheus (reflectrm_* and vllm:* series),
  and `docker stop` ends it cleanly (exit 0, so within the grace period) with no engine process
  left.
- An engine that cannot start (Docker's default 64 MB of /dev/shm is too small for vLLM's CPU
  backend) ends the container, so restart policies act; REFLECTRM_EXIT_ON_ENGINE_FAILURE=false
  keeps it up answering 503.
- The training image: `train --help` and a tiny build-data on the real engine.

Grafana's image cannot be had where no registry is reachable: its provisioning is checked by
tests/unit/test_deploy.py only.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from loadtests.common.ports import free_port
from reflectrm.settings import Settings
from tests.conftest import require_shared_data
from tests.docker.conftest import ENGINE_ENV, ROOT, Containers, Docker, tail, unavailable

PAIR = {
    "prompt": "What is the capital of France?",
    "responses": ["The capital of France is Paris.", "The capital of France is Berlin."],
    "num_candidates": 2,
    "max_tokens": 48,
    "seed": 7,
}
# Engine start plus the first compile of the CPU sampler take about a minute here; a loaded machine
# can take several.
READY_TIMEOUT_S = 900
STACK_FILES = ["compose.yaml", "deploy/compose.cpu.yaml", "tests/docker/compose.local.yaml"]


def wait_for(check: Callable[[], Any], timeout_s: float, what: str) -> Any:
    deadline = time.monotonic() + timeout_s
    while True:
        result = check()
        if result:
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s:.0f} s waiting for {what}")
        time.sleep(2)


def env_options(env: dict[str, str]) -> list[str]:
    return [option for key, value in env.items() for option in ("-e", f"{key}={value}")]


def state(docker: Docker, container: str) -> dict[str, Any]:
    found: dict[str, Any] = docker.inspect(container)["State"]  # type: ignore[assignment]
    return found


def wait_healthy(docker: Docker, container: str) -> None:
    def healthy() -> bool:
        now = state(docker, container)
        if now["Status"] != "running":
            logs = docker("logs", container, check=False)
            raise AssertionError(
                f"{container} stopped ({now['Status']}, exit {now['ExitCode']}):\n"
                + tail(logs.stdout + logs.stderr)
            )
        return bool(now.get("Health", {}).get("Status") == "healthy")

    wait_for(healthy, READY_TIMEOUT_S, f"{container} to turn healthy")


def test_service_image_is_unprivileged_and_keeps_no_wheels(docker: Docker, service_image: str):
    config = docker.inspect(service_image)["Config"]
    assert isinstance(config, dict)
    assert config["User"] == "10001"
    assert config["Cmd"] == ["reflectrm", "serve"]
    # The health check follows the port setting.
    assert "REFLECTRM_PORT" in " ".join(config["Healthcheck"]["Test"])
    listing = docker(
        "run",
        "--rm",
        "--entrypoint",
        "sh",
        service_image,
        "-c",
        "find / -xdev \\( -name 'torch-*.whl' -o -path '*/.cache/pip' \\) -print; "
        "ls /opt/reflectrm/cache/models/*/; id -u",
    ).stdout.split()
    assert not [line for line in listing if line.endswith(".whl") or "/.cache/pip" in line]
    assert "model.safetensors" in listing
    assert "config.json" in listing
    assert listing[-1] == "10001"
    # The serving image holds no harness: eval and train say what to install, in one line.
    missing = docker("run", "--rm", service_image, "reflectrm", "eval", "--help", check=False)
    assert missing.returncode == 2
    assert missing.stderr.strip().splitlines() == [
        "reflectrm eval needs the harness (reflectrm-harness): pip install -e harness "
        "(from the repository; `make setup` installs it)"
    ]


@dataclass
class Stack:
    compose: list[str]
    judge: str
    judge_url: str
    prometheus_url: str


def compose_command(docker: Docker) -> list[str]:
    if docker("compose", "version", check=False).returncode == 0:
        return [docker.client, "compose"]
    legacy = shutil.which("docker-compose")
    if legacy is None:
        unavailable("neither `docker compose` nor docker-compose (scripts/system-deps.sh)")
    return [str(legacy)]


@pytest.fixture
def stack(
    docker: Docker, service_image: str, prometheus_image: str, tmp_path: Path
) -> Iterator[Stack]:
    import subprocess

    judge_port, prometheus_port = free_port(), free_port()
    judge_env = tmp_path / "judge.env"
    judge_env.write_text(
        "".join(f"{k}={v}\n" for k, v in {**ENGINE_ENV, "REFLECTRM_MODEL": "default"}.items())
    )
    models = tmp_path / "models"
    models.mkdir()
    compose_env = tmp_path / "compose.env"
    compose_env.write_text(
        f"BIND_ADDRESS=127.0.0.1\nJUDGE_PORT={judge_port}\nPROMETHEUS_PORT={prometheus_port}\n"
        f"JUDGE_ENV_FILE={judge_env}\nMODELS_DIR={models}\n"
    )
    compose = [*compose_command(docker), "--env-file", str(compose_env), "-p", "reflectrm-test"]
    for file in STACK_FILES:
        compose += ["-f", file]
    env = {k: v for k, v in os.environ.items() if not k.startswith("COMPOSE_")}

    def run(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
        result = subprocess.run(
            [*compose, *args], capture_output=True, text=True, cwd=ROOT, env=env, timeout=timeout
        )
        assert result.returncode == 0, f"compose {args} failed:\n" + tail(
            result.stdout + result.stderr
        )
        return result

    try:
        run("up", "-d", "--no-build", "judge", "prometheus")
        judge = run("ps", "-q", "judge").stdout.strip()
        assert judge, "compose started no judge container"
        yield Stack(
            compose, judge, f"http://127.0.0.1:{judge_port}", f"http://127.0.0.1:{prometheus_port}"
        )
    finally:
        subprocess.run(
            [*compose, "down", "-v", "--remove-orphans", "-t", "60"],
            capture_output=True,
            cwd=ROOT,
            env=env,
            timeout=300,
        )


def prometheus_series(url: str, pattern: str) -> list[str]:
    r = httpx.get(
        f"{url}/api/v1/query",
        params={"query": f'count by (__name__) ({{__name__=~"{pattern}"}})'},
        timeout=10,
    )
    r.raise_for_status()
    return [item["metric"]["__name__"] for item in r.json()["data"]["result"]]


def test_compose_stack_judges_is_scraped_and_stops_cleanly(docker: Docker, stack: Stack):
    started = time.monotonic()
    wait_healthy(docker, stack.judge)
    print(f"judge healthy {time.monotonic() - started:.0f} s after compose up", file=sys.stderr)

    # A judgment through the port published on loopback.
    r = httpx.post(f"{stack.judge_url}/v1/judge", json=PAIR, timeout=600)
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["usage"]["generated_tokens"] > 0
    assert body["usage"]["engine_requests"] >= 1
    assert body["winner"] in (1, 2, None)
    assert body["model"]
    print(f"judgment in {body['latency_ms'] / 1000:.1f} s: {body['outcome']}", file=sys.stderr)

    # Unprivileged, with a writable cache volume.
    assert docker("exec", stack.judge, "id", "-u").stdout.strip() == "10001"
    probe = "/home/reflectrm/.cache/reflectrm-write-probe"
    docker("exec", stack.judge, "sh", "-c", f"echo ok > {probe} && cat {probe} && rm {probe}")
    mounts = {m["Destination"]: m for m in docker.inspect(stack.judge)["Mounts"]}  # type: ignore[attr-defined]
    assert mounts["/home/reflectrm/.cache"]["Type"] == "volume"
    assert mounts["/models"]["RW"] is False

    # Prometheus (deploy/prometheus.yml) scrapes the judge on the compose network.
    def judge_target_up() -> bool:
        r = httpx.get(f"{stack.prometheus_url}/api/v1/targets", timeout=10)
        targets = r.json()["data"]["activeTargets"] if r.status_code == 200 else []
        return any(
            t["scrapeUrl"] == "http://judge:8000/metrics" and t["health"] == "up" for t in targets
        )

    wait_for(judge_target_up, 120, "Prometheus to scrape the judge")
    reflectrm = wait_for(
        lambda: prometheus_series(stack.prometheus_url, "reflectrm_.+"), 60, "reflectrm_ series"
    )
    vllm = wait_for(lambda: prometheus_series(stack.prometheus_url, "vllm:.+"), 60, "vllm: series")
    assert "reflectrm_judgments_total" in reflectrm or any(
        name.startswith("reflectrm_judgment") for name in reflectrm
    ), reflectrm
    assert any(name.startswith("vllm:") for name in vllm)

    # `docker stop`: SIGTERM, a clean shutdown within the grace period (else SIGKILL: exit 137),
    # and none of the container's processes (the engine's among them) left on the machine.
    top = docker("top", stack.judge, "-eo", "pid,args").stdout.splitlines()[1:]
    processes = {int(line.split(None, 1)[0]): line.split(None, 1)[1] for line in top}
    assert any("VLLM::EngineCore" in args for args in processes.values()), processes
    stopping = time.monotonic()
    docker("stop", stack.judge, timeout=120)
    print(f"docker stop took {time.monotonic() - stopping:.1f} s", file=sys.stderr)
    stopped = state(docker, stack.judge)
    assert stopped["Status"] == "exited"
    assert stopped["ExitCode"] == 0, stopped
    assert not stopped["OOMKilled"], stopped
    left = {pid: args for pid, args in processes.items() if Path(f"/proc/{pid}").exists()}
    assert not left, f"processes left after docker stop: {left}"


# Depends on the service's fail-fast setting REFLECTRM_EXIT_ON_ENGINE_FAILURE (default true): the
# process exits non-zero when the engine cannot start; false keeps it up answering 503.
FAIL_FAST = "exit_on_engine_failure"


@pytest.mark.skipif(
    FAIL_FAST not in Settings.model_fields,
    reason="the service has no REFLECTRM_EXIT_ON_ENGINE_FAILURE setting yet (fail-fast exit)",
)
def test_engine_that_cannot_start_ends_the_container(
    docker: Docker, service_image: str, containers: Containers
):
    # Docker's default /dev/shm (64 MB) is below what vLLM's CPU backend needs.
    name = containers.run(
        "reflectrm-test-no-shm", service_image, "--shm-size=16m", *env_options(ENGINE_ENV)
    )
    exit_code = int(docker("wait", name, timeout=READY_TIMEOUT_S).stdout.strip())
    logs = docker("logs", name)
    assert exit_code != 0, tail(logs.stdout + logs.stderr)
    assert "engine" in (logs.stdout + logs.stderr).lower()

    # The debugging setting keeps the process up, answering 503 with the reason.
    port = free_port()
    name = containers.run(
        "reflectrm-test-no-shm-debug",
        service_image,
        "--shm-size=16m",
        "-p",
        f"127.0.0.1:{port}:8000",
        *env_options({**ENGINE_ENV, "REFLECTRM_EXIT_ON_ENGINE_FAILURE": "false"}),
    )

    def failure_reported() -> str:
        assert state(docker, name)["Status"] == "running", docker("logs", name).stderr[-2000:]
        try:
            r = httpx.get(f"http://127.0.0.1:{port}/ready", timeout=5)
        except httpx.TransportError:
            return ""
        assert r.status_code == 503, r.text
        detail = str(r.json()["detail"])
        return detail if "fail" in detail else ""

    wait_for(failure_reported, READY_TIMEOUT_S, "/ready to report the failed engine")
    assert state(docker, name)["Status"] == "running"


def test_training_image_helps_and_builds_data(
    docker: Docker, train_image: str, containers: Containers, tmp_path: Path
):
    shown = docker("run", "--rm", train_image).stdout
    assert "build-data" in shown
    assert "grpo" in shown

    pairs = require_shared_data("train", "pandalm_human_testset.jsonl.gz")
    out = tmp_path / "out"
    out.mkdir()
    out.chmod(0o777)  # written by the image's user, 10001
    name = containers.run(
        "reflectrm-test-build-data",
        train_image,
        "--shm-size=1g",
        "-v",
        f"{pairs}:/data/pairs.jsonl.gz:ro",
        "-v",
        f"{out}:/work/out",
        *env_options(ENGINE_ENV),
        command=[
            "build-data",
            "--data", "/data/pairs.jsonl.gz",
            "--limit", "2",
            "--samples", "2",
            "--max-tokens", "48",
            "--out", "/work/out",
        ],
    )  # fmt: skip
    exit_code = int(docker("wait", name, timeout=READY_TIMEOUT_S).stdout.strip())
    logs = docker("logs", name)
    assert exit_code == 0, tail(logs.stdout + logs.stderr)
    judged = [json.loads(line) for line in (out / "judgments.jsonl").read_text().splitlines()]
    assert len(judged) == 2
    stats = json.loads((out / "stats.json").read_text())
    assert stats
    assert (out / "train.jsonl").is_file()
