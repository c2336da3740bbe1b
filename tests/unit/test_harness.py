"""loadtests/common on stand-in processes: a child's process group stopped in order and left
empty, a crash, a process family tracked and ended by pid, the waits, the loopback check."""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path

import psutil
import pytest

from loadtests.common.family import Watched, alive, reflectrm_env
from loadtests.common.ports import free_port, is_loopback
from loadtests.common.process import (
    RunError,
    Service,
    kill_group,
    launch,
    stop_process,
    wait_for,
    wait_ready,
)

# A server that ignores SIGINT and SIGTERM, with a child of its own that ignores SIGTERM (as
# the engine is), the child's pid written to a file.
STUBBORN = (
    "import signal, subprocess, sys, time\n"
    "signal.signal(signal.SIGINT, signal.SIG_IGN)\n"
    "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
    "child = subprocess.Popen([sys.executable, '-c', "
    "'import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(120)'])\n"
    "open(sys.argv[1], 'w').write(str(child.pid))\n"
    "time.sleep(120)\n"
)
# A server that ends on the first signal, with a child (the EngineCore stand-in) that outlives it:
# it ignores SIGINT and SIGTERM.
POLITE = (
    "import subprocess, sys, time\n"
    "child = subprocess.Popen([sys.executable, '-c', "
    "'import signal, time\\n"
    "signal.signal(signal.SIGINT, signal.SIG_IGN)\\n"
    "signal.signal(signal.SIGTERM, lambda *a: None)\\n"
    "time.sleep(120)  # EngineCore'])\n"
    "open(sys.argv[1], 'w').write(str(child.pid))\n"
    "time.sleep(120)\n"
)


def child_pid(pid_file: Path) -> int:
    wait_for(lambda: pid_file.is_file() and bool(pid_file.read_text()), "the child's pid", 20)
    return int(pid_file.read_text())


def gone(pid: int) -> bool:
    """No such process, or a zombie waiting to be reaped."""
    try:
        return not alive(psutil.Process(pid))
    except psutil.NoSuchProcess:
        return True


def group_gone(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return True
    return False


def test_stop_process_leaves_nothing_of_the_childs_group(tmp_path):
    pid_file = tmp_path / "grandchild.pid"
    proc = launch([sys.executable, "-c", STUBBORN, str(pid_file)], tmp_path / "log")
    grandchild = child_pid(pid_file)

    stop_process(proc, grace_s=(0.2, 0.2))

    assert proc.returncode == -signal.SIGKILL
    assert group_gone(proc.pid)  # the group is empty: the grandchild was killed too
    assert gone(grandchild)


def test_stop_process_sends_only_the_signals_given_and_waits_for_leftovers(tmp_path):
    """SIGTERM alone (as overload.py stops the service); the child that ignores SIGTERM is given
    leftovers_s without a signal, then SIGKILL."""
    pid_file = tmp_path / "child.pid"
    proc = launch([sys.executable, "-c", POLITE, str(pid_file)], tmp_path / "log")
    child = child_pid(pid_file)

    started = time.monotonic()
    stop_process(
        proc, grace_s=(10.0,), signals=(signal.SIGTERM,), leftovers_s=0.5, leftovers_signal=None
    )

    assert proc.returncode == -signal.SIGTERM
    assert time.monotonic() - started < 8.0
    # SIGKILL was sent to what was left; the kernel ends and reaps it a moment later.
    wait_for(lambda: gone(child) and group_gone(proc.pid), "the killed child is reaped", 10)


def test_kill_group_kills_the_child_and_its_group_at_once(tmp_path):
    pid_file = tmp_path / "grandchild.pid"
    proc = launch([sys.executable, "-c", STUBBORN, str(pid_file)], tmp_path / "log")
    grandchild = child_pid(pid_file)

    kill_group(proc)

    assert proc.returncode == -signal.SIGKILL
    wait_for(lambda: gone(grandchild), "the grandchild is gone", 10)


def test_launch_writes_the_output_to_the_log_in_a_session_of_its_own(tmp_path):
    log = tmp_path / "out.log"
    proc = launch(
        [
            sys.executable,
            "-c",
            "import os, sys; print(os.getsid(0) == os.getpid()); print('err', file=sys.stderr)",
        ],
        log,
    )
    assert proc.wait(30) == 0
    assert sorted(log.read_text().split()) == ["True", "err"]


def test_wait_ready_names_the_process_that_exited_and_its_log(tmp_path):
    log = tmp_path / "replica.log"
    proc = launch([sys.executable, "-c", "print('no model'); raise SystemExit(3)"], log)
    proc.wait(30)
    service = Service(proc=proc, url=f"http://127.0.0.1:{free_port()}", log=log, settings={})
    with pytest.raises(RunError, match=r"replica-0 exited with code 3(.|\n)*no model"):
        wait_ready(service.url, 30, service, "/health", what="replica-0")


def test_wait_ready_and_wait_for_give_up_after_their_timeout():
    with pytest.raises(RunError, match=r"did not answer 200 within 0\.3 s"):
        wait_ready(f"http://127.0.0.1:{free_port()}", 0.3, poll_s=0.1)
    with pytest.raises(RunError, match="never happened within 0 s: the sky falls"):
        wait_for(lambda: False, "the sky falls", 0.2, poll_s=0.05)
    assert wait_for(lambda: True, "at once", 1.0) < 1.0


def test_a_watched_family_is_noted_and_ended_by_pid(tmp_path):
    """Watched runs in the caller's process group; stop sends SIGTERM, then SIGKILL, to each
    noted process still running, by pid."""
    pid_file = tmp_path / "grandchild.pid"
    p = Watched([sys.executable, "-c", STUBBORN, str(pid_file)], tmp_path / "log", os.environ)
    grandchild = child_pid(pid_file)
    assert os.getpgid(p.proc.pid) == os.getpgid(0)

    family = p.note_family()

    assert [q.pid for q in family] == [p.proc.pid, grandchild]
    assert all(alive(q) for q in p.left_running())
    p.stop(wait_s=0.5)  # both ignore SIGTERM: SIGKILL follows the wait
    assert p.left_running() == []
    assert gone(grandchild)


def test_a_watched_engine_core_is_found_by_its_command_line(tmp_path):
    pid_file = tmp_path / "child.pid"
    p = Watched([sys.executable, "-c", POLITE, str(pid_file)], tmp_path / "log", os.environ)
    try:
        child = child_pid(pid_file)
        core = p.engine_core()
        assert core is not None
        assert core.pid == child
    finally:
        p.stop(signals=(signal.SIGKILL,))
    assert gone(child)


def test_reflectrm_env_puts_settings_over_defaults_over_the_environment(monkeypatch):
    monkeypatch.setenv("REFLECTRM_MAX_TOKENS", "7")
    env = reflectrm_env({"max_tokens": "9", "shutdown_grace_s": "40"}, pythonpath=(Path("/a"),))
    assert env["PYTHONPATH"] == "/a"
    assert env["REFLECTRM_MAX_TOKENS"] == "9"
    assert env["REFLECTRM_SHUTDOWN_GRACE_S"] == "40"
    assert env["REFLECTRM_KV_CACHE_GIB"] == "1"
    assert reflectrm_env()["REFLECTRM_MAX_TOKENS"] == "48"  # the defaults win over it


@pytest.mark.parametrize(
    ("url", "loopback"),
    [
        ("http://127.0.0.1:8000", True),
        ("http://127.3.2.1", True),
        ("http://localhost:9000/", True),
        ("http://[::1]:8000", True),
        ("http://10.0.0.5:8000", False),
        ("http://judge.example.com", False),
    ],
)
def test_is_loopback(url, loopback):
    assert is_loopback(url) is loopback


def test_stopping_a_process_twice_is_harmless(tmp_path):
    """A test stops the fleet's router, and the fleet stops it again on its way out."""
    proc = launch([sys.executable, "-c", "pass"], tmp_path / "log")
    proc.wait(30)
    stop_process(proc, grace_s=(0.1, 0.1))
    stop_process(proc, grace_s=(0.1, 0.1))
    assert proc.returncode == 0


# Answers 200 to every GET on the port REFLECTRM_PORT names, as a ready service does.
READY = (
    "import http.server, os\n"
    "class H(http.server.BaseHTTPRequestHandler):\n"
    "    def do_GET(self):\n"
    "        self.send_response(200); self.end_headers()\n"
    "    def log_message(self, *a): pass\n"
    "http.server.HTTPServer(('127.0.0.1', int(os.environ['REFLECTRM_PORT'])), H).serve_forever()\n"
)


def test_served_starts_waits_for_and_always_stops_the_service(tmp_path, monkeypatch):
    from loadtests.common import process

    started: list[Service] = []

    def launch_stand_in(log: Path, settings: dict[str, str]) -> Service:
        port = free_port()
        env = {**os.environ, **settings, "REFLECTRM_PORT": str(port)}
        proc = launch([sys.executable, "-c", READY], log, env=env)
        started.append(Service(proc=proc, url=f"http://127.0.0.1:{port}", log=log, settings={}))
        return started[-1]

    monkeypatch.setattr(process, "launch_service", launch_stand_in)
    record: dict = {}
    seen: list[bool] = []

    def failing_run() -> None:
        with process.served(None, tmp_path / "s.log", {}, 30, record) as url:
            seen.append(url == started[0].url and started[0].proc.poll() is None)
            raise RuntimeError("the run failed")

    with pytest.raises(RuntimeError, match="the run failed"):
        failing_run()
    assert seen == [True]  # the service was up while the run ran
    assert started[0].proc.poll() is not None
    assert record["service_exit_code"] == started[0].proc.returncode
    assert 0 <= record["ready_after_s"] < 30
    # A service given by URL is waited for and left running.
    given: dict = {}
    proc = launch_stand_in(tmp_path / "given.log", {}).proc
    try:
        with process.served(started[1].url + "/", tmp_path / "x.log", {}, 30, given) as url:
            assert url == started[1].url
        assert proc.poll() is None
        assert set(given) == {"ready_after_s"}
    finally:
        stop_process(proc)


def test_a_peer_set_names_the_whole_set_to_each_replica_and_always_stops_all(tmp_path, monkeypatch):
    from loadtests.common import process

    started: list[Service] = []

    def launch_stand_in(log: Path, settings: dict[str, str], port: int | None = None) -> Service:
        env = {**os.environ, **settings, "REFLECTRM_PORT": str(port)}
        proc = launch([sys.executable, "-c", READY], log, env=env)
        started.append(Service(proc, f"http://127.0.0.1:{port}", log, settings))
        return started[-1]

    monkeypatch.setattr(process, "launch_service", launch_stand_in)
    record: dict = {}
    seen: list[bool] = []

    def failing_run() -> None:
        with process.peer_set(
            3, tmp_path, lambda urls, me: {"PEERS": ",".join(urls), "ME": me}, 30, record
        ) as services:
            seen.extend(s.proc.poll() is None for s in services)
            raise RuntimeError("the run failed")

    with pytest.raises(RuntimeError, match="the run failed"):
        failing_run()
    urls = [s.url for s in started]
    assert len(set(urls)) == 3
    assert seen == [True] * 3
    assert [s.settings for s in started] == [{"PEERS": ",".join(urls), "ME": u} for u in urls]
    assert all(s.proc.poll() is not None for s in started)
    assert record["replica_exit"] == {
        s.url: {"pid": s.proc.pid, "exit_code": s.proc.returncode} for s in started
    }
    assert [s.log.name for s in started] == ["service-0.log", "service-1.log", "service-2.log"]
