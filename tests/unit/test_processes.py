"""Processes, not functions: how commands end on signals, the reaper that ends an engine's
processes when their parent is killed, and `reflectrm serve` when its engine cannot start.
Stand-in children (no vLLM); tests/e2e/test_reliability_e2e.py does the same with the engine."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import psutil
import pytest

from loadtests.common.ports import free_port

ROOT = Path(__file__).resolve().parents[2]
ENV = {**os.environ, "PYTHONPATH": f"{ROOT / 'service'}{os.pathsep}{ROOT}"}


def wait_for(condition: Callable[[], bool], what: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"never happened: {what}"
        time.sleep(0.05)


def alive(p: psutil.Process) -> bool:
    try:
        return p.is_running() and p.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


@pytest.fixture
def started() -> Iterator[list[subprocess.Popen]]:
    """Processes a test starts; whatever is left of them (and theirs) is killed afterwards."""
    procs: list[subprocess.Popen] = []
    yield procs
    for proc in procs:
        try:
            family = [psutil.Process(proc.pid), *psutil.Process(proc.pid).children(recursive=True)]
        except psutil.Error:
            family = []
        for p in family:
            with_suppressed(p.kill)
        proc.kill()
        proc.wait(10)


def with_suppressed(fn: Callable[[], object]) -> None:
    with contextlib.suppress(psutil.Error):
        fn()


# Children start with the signal dispositions a terminal gives them, whatever this test process
# inherited: a process started with a signal ignored passes that on through fork and exec, and
# Python then installs no KeyboardInterrupt for SIGINT (nor asyncio.run its handler). A test
# suite run as a background job of a non-interactive shell (``pytest ... &`` in a script) has
# SIGINT and SIGQUIT ignored, so a job it started and sent SIGINT slept on. ``ignored`` names the
# signals a child starts with ignored, as such a launcher starts it.
LAUNCH = """
import os, signal, sys
ignored = {name for name in sys.argv[1].split(",") if name}
for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT):
    signal.signal(sig, signal.SIG_IGN if sig.name in ignored else signal.SIG_DFL)
signal.pthread_sigmask(signal.SIG_UNBLOCK, [signal.SIGINT, signal.SIGTERM, signal.SIGHUP])
os.execv(sys.executable, [sys.executable, *sys.argv[2:]])
"""


def start(
    procs: list[subprocess.Popen],
    script: str,
    *args: str,
    env: dict | None = None,
    ignored: tuple[signal.Signals, ...] = (),
) -> subprocess.Popen:
    names = ",".join(sig.name for sig in ignored)
    proc = subprocess.Popen(
        [sys.executable, "-c", LAUNCH, names, "-c", textwrap.dedent(script), *args],
        env=env or ENV,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    procs.append(proc)
    return proc


# --- judge, eval, train: SIGTERM ends them like Ctrl-C -----------------------------------------

JOB = """
import asyncio, contextlib, multiprocessing, sys, time
from reflectrm.interrupts import run_command

def engine_core():
    time.sleep(600)

@contextlib.asynccontextmanager
async def engine():
    # Like vLLM: a spawned child that only an explicit shutdown ends.
    proc = multiprocessing.get_context("spawn").Process(target=engine_core)
    proc.start()
    try:
        yield proc
    finally:
        proc.terminate()
        proc.join(10)
        print("engine shut down", flush=True)

async def job():
    async with engine() as proc:
        print(f"engine {proc.pid}", flush=True)
        await asyncio.sleep(600)
    return 0

if __name__ == "__main__":
    sys.exit(run_command(lambda: asyncio.run(job())))
"""


@pytest.mark.parametrize(
    ("sig", "status"), [(signal.SIGTERM, 143), (signal.SIGINT, 130), (signal.SIGHUP, 129)]
)
def test_a_job_ended_by_a_signal_shuts_its_engine_down_and_says_so(started, sig, status):
    job = start(started, JOB)
    assert job.stdout is not None
    line = job.stdout.readline()
    assert line.startswith("engine "), job.stderr.read() if job.stderr else line
    core = psutil.Process(int(line.split()[1]))
    job.send_signal(sig)
    out, err = job.communicate(timeout=180)  # generous: CI machines are shared
    # Without run_command a SIGTERM kills the job on the spot (-15) and the child lives on.
    assert job.returncode == status, err
    assert "engine shut down" in out
    assert f"stopped by {signal.Signals(sig).name}" in err
    wait_for(lambda: not alive(core), "the engine process ends")


@contextlib.contextmanager
def ignoring(sig: signal.Signals) -> Iterator[None]:
    """This test process with ``sig`` ignored, as a background job of a script has SIGINT."""
    previous = signal.signal(sig, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(sig, previous)


def test_a_job_stops_on_sigint_whatever_the_test_run_ignores(started):
    with ignoring(signal.SIGINT):
        job = start(started, JOB)
    assert job.stdout is not None
    assert job.stdout.readline().startswith("engine ")
    job.send_signal(signal.SIGINT)
    out, err = job.communicate(timeout=60)  # before: the job ignored SIGINT and slept on
    assert job.returncode == 130, err
    assert "engine shut down" in out


def test_a_job_started_with_sigint_ignored_still_stops_cleanly_on_sigterm(started):
    # Such a job was asked by its launcher to ignore SIGINT, and does, as every program does;
    # SIGTERM (what kill, timeout and docker stop send) still shuts its engine down.
    job = start(started, JOB, ignored=(signal.SIGINT,))
    assert job.stdout is not None
    line = job.stdout.readline()
    assert line.startswith("engine "), job.stderr.read() if job.stderr else line
    core = psutil.Process(int(line.split()[1]))
    job.send_signal(signal.SIGINT)
    with pytest.raises(subprocess.TimeoutExpired):
        job.wait(1)
    job.send_signal(signal.SIGTERM)
    out, err = job.communicate(timeout=180)
    assert job.returncode == 143, err
    assert "engine shut down" in out
    assert "stopped by SIGTERM" in err
    wait_for(lambda: not alive(core), "the engine process ends")


def test_every_command_that_opens_an_engine_runs_under_run_command():
    # judge (reflectrm.cli), eval and train (their own entry points too) wrap their work.
    for module in (
        "service/reflectrm/cli.py",
        "harness/reflectrm_harness/evaluation/cli.py",
        "harness/reflectrm_harness/training/cli.py",
    ):
        text = (ROOT / module).read_text()
        assert "run_command(lambda: " in text, module


# --- the reaper: the engine dies with its parent, even on SIGKILL -------------------------------

PARENT = """
import subprocess, sys, time
from reflectrm.engines.reaper import Reaper

unrelated = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
reaper = Reaper()
# The engine: a child that starts a child of its own, as EngineCore starts its worker.
core = subprocess.Popen([sys.executable, "-c",
    "import subprocess, sys, time; "
    "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)']); time.sleep(600)"])
if sys.argv[1] == "watch":
    reaper.engine_started()
print(core.pid, unrelated.pid, reaper.pid, flush=True)
if sys.argv[2] == "close":
    while not [c for c in __import__("psutil").Process(core.pid).children()]:
        time.sleep(0.05)
    time.sleep(1)  # the reaper has seen the worker
    reaper.close()
    print("closed", flush=True)
time.sleep(600)
"""


def family_of(
    parent: subprocess.Popen,
) -> tuple[psutil.Process, psutil.Process, psutil.Process, psutil.Process]:
    assert parent.stdout is not None
    core_pid, unrelated_pid, reaper_pid = map(int, parent.stdout.readline().split())
    core = psutil.Process(core_pid)
    wait_for(lambda: len(core.children()) == 1, "the engine starts its worker")
    worker = core.children()[0]
    return core, worker, psutil.Process(unrelated_pid), psutil.Process(reaper_pid)


@pytest.mark.parametrize("phase", ["watch", "starting"])
def test_a_killed_parent_takes_its_engine_processes_along(started, phase):
    parent = start(started, PARENT, phase, "stay")
    core, worker, unrelated, reaper = family_of(parent)
    time.sleep(1)  # the reaper has seen the engine core (and finds its worker through it)
    parent.send_signal(signal.SIGKILL)
    parent.wait(10)
    # Re-parented to init, as vLLM's processes were; then ended by the reaper.
    wait_for(lambda: not alive(core) and not alive(worker), "the engine processes end", 30)
    wait_for(lambda: not alive(reaper), "the reaper finishes")
    assert alive(unrelated)  # started before the engine: none of the reaper's business
    unrelated.kill()


def test_a_clean_close_ends_what_is_left_of_the_engine_and_nothing_else(started):
    parent = start(started, PARENT, "watch", "close")
    core, worker, unrelated, reaper = family_of(parent)
    assert parent.stdout is not None
    assert parent.stdout.readline().strip() == "closed"
    assert not alive(core)
    assert not alive(worker)
    assert not alive(reaper)
    assert alive(unrelated)
    assert parent.poll() is None


# --- serve: an engine that cannot start ends the process -----------------------------------------


def serve(started: list, *args: str, **env: str) -> subprocess.Popen:
    return start(
        started,
        "import sys; from reflectrm.cli import main; sys.exit(main(sys.argv[1:]))",
        "serve",
        "--port",
        str(env.pop("PORT")),
        *args,
        env={**ENV, **env},
    )


def test_serve_exits_1_and_says_why_when_the_engine_cannot_start(started, tmp_path):
    proc = serve(started, "--model", str(tmp_path / "no-such-model"), PORT=str(free_port()))
    _out, err = proc.communicate(timeout=120)
    assert proc.returncode == 1, err[-2000:]
    assert "engine failed to start" in err
    assert "no-such-model" in err
    assert "REFLECTRM_EXIT_ON_ENGINE_FAILURE" in err


def test_serve_stays_up_answering_503_when_told_to_and_drains_on_sigterm(started, tmp_path):
    port = free_port()
    proc = serve(
        started,
        "--model",
        str(tmp_path / "no-such-model"),
        PORT=str(port),
        REFLECTRM_EXIT_ON_ENGINE_FAILURE="false",
    )

    def ready_status() -> int | None:
        try:
            return httpx.get(f"http://127.0.0.1:{port}/ready", timeout=5).status_code
        except httpx.TransportError:
            return None

    wait_for(lambda: ready_status() == 503 and proc.poll() is None, "serving 503", 120)
    r = httpx.get(f"http://127.0.0.1:{port}/ready")
    assert "failed to start" in r.json()["detail"]
    proc.send_signal(signal.SIGTERM)
    _out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err[-2000:]  # uvicorn alone re-raised the signal: -15
    assert "Traceback" not in err
