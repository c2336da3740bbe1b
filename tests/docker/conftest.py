"""A real Docker engine and the images built from this repository's Dockerfiles (both builds).

- The engine: the running one, or, as root with Debian's docker.io installed (scripts/system-deps.sh),
  a `dockerd` started here and stopped at the end of the session.
- Builds use BuildKit (the Dockerfiles mount files while installing): `docker build` of a client
  with buildx, or a client older than 23 (Debian's 20.10) with DOCKER_BUILDKIT=1.
- The base image: python:3.11-slim-bookworm where it can be pulled; where no image registry is
  reachable, a Debian bookworm with Python 3.11 made here with debootstrap from the machine's Debian
  mirror (REFLECTRM_TEST_BASE_IMAGE names another).
- This machine's pip configuration goes to the build: a local folder holding the CPU torch wheel
  (mounted as WHEELS_IMAGE while installing, never copied into the image) and pip's CA bundle (the
  `pip_cert` secret). Without them the build takes torch from PyTorch's CPU wheel index.

Every test here that runs the engine in a container needs the machine's engine lock when others
share it: run this folder as `flock /tmp/reflectrm-engine.lock pytest tests/docker` (build first,
outside the lock, with the same command: builds are cached).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.conftest import unavailable

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
TORCH_CPU = re.search(
    r'^TORCH_CPU="torch==(.+)"$', (ROOT / "scripts" / "torch-source.sh").read_text(), re.M
)[1]  # type: ignore[index]
OFFICIAL_BASE = "python:3.11-slim-bookworm"
LOCAL_BASE = "reflectrm-local/debian-python:3.11-bookworm"
WHEELS_IMAGE = "reflectrm-local/wheels:torch-" + TORCH_CPU.replace("+", "-")
SERVICE_IMAGE = "reflectrm:cpu"  # the tag deploy/compose.cpu.yaml gives the judge
TRAIN_IMAGE = "reflectrm-train:cpu"
GPU_SERVICE_IMAGE = "reflectrm:latest"  # the tags compose.yaml gives the GPU build
GPU_TRAIN_IMAGE = "reflectrm-train:latest"
PROMETHEUS_IMAGE = "reflectrm-local/prometheus:debian"  # tests/docker/compose.local.yaml
BUILD_TIMEOUT_S = 3600
# The engine's settings in every container here: a small KV cache, short generations.
ENGINE_ENV = {
    "REFLECTRM_KV_CACHE_GIB": "1",
    "REFLECTRM_MAX_MODEL_LEN": "4096",
    "REFLECTRM_MAX_TOKENS": "48",
}


def tail(text: str, lines: int = 40) -> str:
    return "\n".join(text.splitlines()[-lines:])


@dataclass
class Docker:
    client: str
    buildkit_env: dict[str, str]
    timings: dict[str, float] = field(default_factory=dict)

    def __call__(
        self, *args: str, timeout: float = 300, check: bool = True, input: bytes | None = None
    ) -> subprocess.CompletedProcess[str]:
        result = subprocess.run(
            [self.client, *args],
            capture_output=True,
            text=input is None,
            input=input,
            timeout=timeout,
            cwd=ROOT,
        )
        if isinstance(result.stdout, bytes):
            result.stdout = result.stdout.decode(errors="replace")
            result.stderr = result.stderr.decode(errors="replace")
        if check and result.returncode != 0:
            raise AssertionError(
                f"docker {' '.join(args)} failed ({result.returncode}):\n"
                + tail(result.stdout + result.stderr)
            )
        return result

    def has_image(self, name: str) -> bool:
        return self("image", "inspect", name, check=False).returncode == 0

    def inspect(self, name: str) -> dict[str, object]:
        data: list[dict[str, object]] = json.loads(self("inspect", name).stdout)
        return data[0]

    def build(
        self, tag: str, dockerfile: str, args: dict[str, str], secrets: dict[str, Path]
    ) -> float:
        command = [self.client, "build", "--progress=plain", "-f", dockerfile, "-t", tag]
        for key, value in args.items():
            command += ["--build-arg", f"{key}={value}"]
        for key, path in secrets.items():
            command += ["--secret", f"id={key},src={path}"]
        started = time.monotonic()
        result = subprocess.run(
            [*command, "."],
            capture_output=True,
            text=True,
            timeout=BUILD_TIMEOUT_S,
            cwd=ROOT,
            env={**os.environ, **self.buildkit_env},
        )
        seconds = time.monotonic() - started
        assert result.returncode == 0, f"building {tag} failed:\n" + tail(result.stderr, 60)
        self.timings[tag] = seconds
        print(f"built {tag} in {seconds:.0f} s", file=sys.stderr)
        return seconds


def _version_major(client: str) -> int | None:
    out = subprocess.run(
        [client, "version", "--format", "{{.Client.Version}}"], capture_output=True, text=True
    ).stdout
    m = re.match(r"\s*(\d+)\.", out)
    return int(m[1]) if m else None


def find_client() -> Docker | None:
    """A Docker client that builds with BuildKit, preferring the one on PATH."""
    candidates = [shutil.which("docker"), "/usr/bin/docker"]
    for client in dict.fromkeys(c for c in candidates if c and os.access(c, os.X_OK)):
        buildx = subprocess.run([client, "buildx", "version"], capture_output=True)
        if buildx.returncode == 0:
            return Docker(client, {"DOCKER_BUILDKIT": "1"})
        major = _version_major(client)
        if major is not None and major < 23:  # BuildKit built into the client
            return Docker(client, {"DOCKER_BUILDKIT": "1"})
    return None


@pytest.fixture(scope="session")
def docker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Docker]:
    client = find_client()
    if client is None:
        unavailable(
            "no Docker client that builds with BuildKit (docker buildx, or a client before 23 "
            "such as Debian's docker.io): scripts/system-deps.sh installs it as root"
        )
        raise AssertionError("unreachable")
    process = None
    if client("info", check=False).returncode != 0:
        dockerd = shutil.which("dockerd")
        if dockerd is None or os.geteuid() != 0:
            unavailable(
                "no Docker engine is running and none can be started here (needs root and "
                "dockerd; scripts/system-deps.sh installs Debian's docker.io)"
            )
        log_path = tmp_path_factory.mktemp("dockerd") / "dockerd.log"
        with log_path.open("wb") as log:
            process = subprocess.Popen(
                [str(dockerd)], stdout=log, stderr=subprocess.STDOUT, start_new_session=True
            )
        deadline = time.monotonic() + 120
        while client("info", check=False).returncode != 0:
            if process.poll() is not None or time.monotonic() > deadline:
                process.terminate()
                pytest.fail("dockerd did not start:\n" + tail(log_path.read_text()))
            time.sleep(1)
    try:
        yield client
    finally:
        if client.timings:
            print(f"docker build timings (s): {client.timings}", file=sys.stderr)
        if process is not None:
            process.terminate()
            try:
                process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def debian_mirror() -> str:
    """The machine's Debian mirror, from apt's sources (deb822 or one-line style)."""
    texts = [p.read_text() for p in sorted(Path("/etc/apt/sources.list.d").glob("*.sources"))]
    for text in texts:
        for stanza in text.split("\n\n"):
            uris = re.search(r"^URIs:\s*(\S+)", stanza, re.M)
            suites = re.search(r"^Suites:\s*(.+)$", stanza, re.M)
            if uris and suites and "bookworm" in suites[1].split():
                return uris[1]
    sources = Path("/etc/apt/sources.list")
    if sources.is_file():
        m = re.search(r"^deb\s+(?:\[[^]]*\]\s+)?(\S+)\s+bookworm\s", sources.read_text(), re.M)
        if m:
            return m[1]
    return "http://deb.debian.org/debian"


def make_local_base(docker: Docker) -> None:
    """Debian bookworm (minbase) with Python 3.11 and its venv module, imported as an image."""
    debootstrap = shutil.which("debootstrap")
    if debootstrap is None or os.geteuid() != 0:
        unavailable(
            f"{OFFICIAL_BASE} cannot be pulled and no local base can be made here (needs root and "
            "debootstrap; scripts/system-deps.sh installs it)"
        )
    with tempfile.TemporaryDirectory(prefix="reflectrm-base-") as folder:
        rootfs = Path(folder) / "rootfs"
        result = subprocess.run(
            [
                str(debootstrap),
                "--variant=minbase",
                "--include=python3,python3-venv,ca-certificates",
                "bookworm",
                str(rootfs),
                debian_mirror(),
            ],
            capture_output=True,
            text=True,
            timeout=1800,
        )
        assert result.returncode == 0, "debootstrap failed:\n" + tail(result.stdout + result.stderr)
        for cache in ("var/cache/apt/archives", "var/lib/apt/lists"):
            for item in (rootfs / cache).glob("*"):
                if item.is_file():
                    item.unlink()
        archive = subprocess.run(["tar", "-C", str(rootfs), "-c", "."], capture_output=True)
        assert archive.returncode == 0, archive.stderr.decode(errors="replace")
        docker("import", "-c", "ENV LANG=C.UTF-8", "-", LOCAL_BASE, input=archive.stdout)


@pytest.fixture(scope="session")
def base_image(docker: Docker) -> str:
    chosen = os.environ.get("REFLECTRM_TEST_BASE_IMAGE")
    if chosen:
        return chosen
    if docker.has_image(OFFICIAL_BASE):
        return OFFICIAL_BASE
    if docker("pull", OFFICIAL_BASE, check=False, timeout=900).returncode == 0:
        return OFFICIAL_BASE
    if not docker.has_image(LOCAL_BASE):
        make_local_base(docker)
    return LOCAL_BASE


def pip_config() -> dict[str, str]:
    """pip's effective settings on this machine (`pip config list`, environment included)."""
    out = subprocess.run(
        [sys.executable, "-m", "pip", "config", "list"], capture_output=True, text=True
    ).stdout
    values: dict[str, str] = {}
    for line in out.splitlines():
        m = re.match(r"^[^.]*\.([\w-]+)='(.*)'$", line)
        if m:
            values[m[1]] = (values.get(m[1], "") + " " + m[2]).strip()
    return values


def local_torch_wheel() -> Path | None:
    """The CPU torch wheel in one of pip's find-links folders, if this machine has one."""
    links = pip_config().get("find-links", "") + " " + os.environ.get("PIP_FIND_LINKS", "")
    for link in links.split():
        folder = Path(link.removeprefix("file://"))
        if folder.is_dir():
            for wheel in sorted(folder.glob(f"torch-{TORCH_CPU}-*.whl")):
                return wheel
    return None


@pytest.fixture(scope="session")
def build_inputs(docker: Docker, base_image: str) -> tuple[dict[str, str], dict[str, Path]]:
    """Build arguments and secrets for the CPU build on this machine."""
    args = {"BASE_IMAGE": base_image, "VLLM_BUILD": "cpu"}
    wheel = local_torch_wheel()
    if wheel is not None:
        if not docker.has_image(WHEELS_IMAGE):
            archive = subprocess.run(
                ["tar", "-C", str(wheel.parent), "-c", wheel.name], capture_output=True
            )
            assert archive.returncode == 0, archive.stderr.decode(errors="replace")
            docker("import", "-", WHEELS_IMAGE, input=archive.stdout)
        args["WHEELS_IMAGE"] = WHEELS_IMAGE
    return args, pip_secrets()


def pip_secrets() -> dict[str, Path]:
    """pip's CA bundle on this machine, for the builds' `pip_cert` secret."""
    cert = os.environ.get("PIP_CERT") or pip_config().get("cert")
    return {"pip_cert": Path(cert)} if cert and Path(cert).is_file() else {}


@pytest.fixture(scope="session")
def gpu_build_inputs(base_image: str) -> tuple[dict[str, str], dict[str, Path]]:
    """Build arguments and secrets for the GPU build: vLLM and its CUDA torch from PyPI alone (no
    wheels image: its CPU torch would satisfy vLLM's torch pin)."""
    return {"BASE_IMAGE": base_image, "VLLM_BUILD": "gpu"}, pip_secrets()


@pytest.fixture(scope="session")
def gpu_service_image(
    docker: Docker, gpu_build_inputs: tuple[dict[str, str], dict[str, Path]]
) -> str:
    docker.build(GPU_SERVICE_IMAGE, "Dockerfile", *gpu_build_inputs)
    return GPU_SERVICE_IMAGE


@pytest.fixture(scope="session")
def gpu_train_image(
    docker: Docker, gpu_build_inputs: tuple[dict[str, str], dict[str, Path]]
) -> str:
    docker.build(GPU_TRAIN_IMAGE, "deploy/train.Dockerfile", *gpu_build_inputs)
    return GPU_TRAIN_IMAGE


@pytest.fixture(scope="session")
def service_image(docker: Docker, build_inputs: tuple[dict[str, str], dict[str, Path]]) -> str:
    docker.build(SERVICE_IMAGE, "Dockerfile", *build_inputs)
    return SERVICE_IMAGE


@pytest.fixture(scope="session")
def train_image(docker: Docker, build_inputs: tuple[dict[str, str], dict[str, Path]]) -> str:
    docker.build(TRAIN_IMAGE, "deploy/train.Dockerfile", *build_inputs)
    return TRAIN_IMAGE


@pytest.fixture(scope="session")
def prometheus_image(docker: Docker, base_image: str) -> str:
    docker.build(
        PROMETHEUS_IMAGE,
        str((HERE / "prometheus.Dockerfile").relative_to(ROOT)),
        {"BASE_IMAGE": base_image},
        {},
    )
    return PROMETHEUS_IMAGE


class Containers:
    """Containers a test starts, removed (by name) however the test ends."""

    def __init__(self, docker: Docker) -> None:
        self.docker = docker
        self.names: list[str] = []

    def run(self, name: str, image: str, *options: str, command: Sequence[str] = ()) -> str:
        self.docker("rm", "-f", name, check=False)
        self.names.append(name)
        self.docker("run", "-d", "--name", name, *options, image, *command)
        return name

    def remove_all(self) -> None:
        for name in reversed(self.names):
            self.docker("rm", "-f", "-v", name, check=False, timeout=120)


@pytest.fixture
def containers(docker: Docker) -> Iterator[Containers]:
    started = Containers(docker)
    try:
        yield started
    finally:
        started.remove_all()
