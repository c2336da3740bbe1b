"""The CPU's bf16 matrix units decide what dtype 'auto' means on the CPU."""

from __future__ import annotations

from pathlib import Path

import pytest

from reflectrm.engines.config import EngineConfig
from reflectrm.hardware import cpu_dtype, cpu_has_bf16_matmul, cpu_name

AMX = "flags\t\t: fpu vme sse2 avx2 avx512f avx512_bf16 amx_bf16 amx_tile\n"
AVX512_BF16 = "flags\t\t: fpu sse2 avx2 avx512f avx512_bf16\n"
AVX2_ONLY = "flags\t\t: fpu sse2 avx2 fma\n"


@pytest.mark.parametrize(
    ("flags", "dtype"),
    [(AMX, "bfloat16"), (AVX512_BF16, "bfloat16"), (AVX2_ONLY, "float32"), ("", "float32")],
)
def test_auto_is_bf16_only_with_bf16_matrix_units(tmp_path: Path, flags: str, dtype: str) -> None:
    info = tmp_path / "cpuinfo"
    info.write_text("processor\t: 0\nmodel name\t: Some CPU\n" + flags)
    assert cpu_dtype(info) == dtype
    assert cpu_has_bf16_matmul(info) is (dtype == "bfloat16")
    assert cpu_name(info) == "Some CPU"


def test_no_cpuinfo_is_float32(tmp_path: Path) -> None:
    assert cpu_dtype(tmp_path / "missing") == "float32"


def test_the_cpu_engine_takes_the_cpus_dtype_and_an_explicit_one_wins(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import reflectrm.engines.vllm_engine as vllm_engine

    config = EngineConfig(model="/m/x", device="cpu", resolved=True)
    monkeypatch.setattr(vllm_engine, "cpu_dtype", lambda: "bfloat16")
    assert vllm_engine.engine_kwargs(config)["dtype"] == "bfloat16"
    monkeypatch.setattr(vllm_engine, "cpu_dtype", lambda: "float32")
    assert vllm_engine.engine_kwargs(config)["dtype"] == "float32"
    explicit = EngineConfig(model="/m/x", device="cpu", dtype="float32", resolved=True)
    monkeypatch.setattr(vllm_engine, "cpu_dtype", lambda: "bfloat16")
    assert vllm_engine.engine_kwargs(explicit)["dtype"] == "float32"


def test_a_built_checkpoint_is_written_in_the_dtype_the_engine_passes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """What the set-up builds the default judge in is what the engine is told to serve."""
    import reflectrm.engines.vllm_engine as vllm_engine

    for cpu in ("bfloat16", "float32"):
        monkeypatch.setattr(vllm_engine, "cpu_dtype", lambda cpu=cpu: cpu)
        for dtype in ("auto", "float32", "bfloat16"):
            config = EngineConfig(model="/m/x", device="cpu", dtype=dtype, resolved=True)
            served = vllm_engine.served_dtype(config)
            assert served == (cpu if dtype == "auto" else dtype)
            assert served == vllm_engine.engine_kwargs(config)["dtype"]
