"""What the machine's CPU offers: bf16 matrix units decide the dtype on the CPU (a leaf module).

On CPUs with AMX-BF16 or AVX512-BF16 vLLM's CPU backend and torch run bf16 matmuls in hardware
(measured here: 2.6-3.1x the float32 generation rate of the default model); elsewhere bf16 is
emulated and several times slower than float32.
"""

from __future__ import annotations

import platform
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


def cpu_name(cpuinfo: Path = Path("/proc/cpuinfo")) -> str:
    try:
        for line in cpuinfo.read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def cpu_dtype(cpuinfo: Path = Path("/proc/cpuinfo")) -> str:
    """The dtype 'auto' means on this CPU: bfloat16 with bf16 matrix units, else float32."""
    return "bfloat16" if cpu_has_bf16_matmul(cpuinfo) else "float32"
