"""Starting a service and stopping any child process in its own process group, for the load
scripts: ``reflectrm serve`` on a free loopback port (``launch_service``), GET /ready until it
answers (``wait_ready``), and ``stop_process``: SIGINT, SIGTERM, then SIGKILL to the child's
group, so that no engine process is left behind."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from loadtests.harness.ports import free_port


class RunError(Exception):
    """The run could not be made (exit code 2)."""


@contextlib.contextmanager
def signals_held() -> Iterator[None]:
    """Ignore SIGINT and SIGTERM for a while: a second Ctrl-C must not cut a stop short."""
    if threading.current_thread() is not threading.main_thread():
        yield  # only the main thread may set handlers
        return
    previous = {sig: signal.signal(sig, signal.SIG_IGN) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def stop_process(proc: subprocess.Popen[Any], grace_s: Sequence[float] = (60.0, 30.0)) -> None:
    """SIGINT, then SIGTERM, each given its time; then SIGKILL to the process group the child
    leads (it was started in its own session), so that no engine process is left behind.
    Bounded by ``sum(grace_s)`` plus the kill; Ctrl-C does not interrupt it."""
    with signals_held():
        _stop(proc, grace_s)


def _stop(proc: subprocess.Popen[Any], grace_s: Sequence[float]) -> None:
    for sig, wait_s in zip((signal.SIGINT, signal.SIGTERM), grace_s, strict=True):
        if proc.poll() is not None:
            break
        proc.send_signal(sig)
        try:
            proc.wait(wait_s)
            break
        except subprocess.TimeoutExpired:
            continue
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    _end_group(proc.pid)


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
        return True
    except ProcessLookupError:
        return False


def _end_group(pgid: int, grace_s: float = 15.0) -> None:
    """Processes left in the stopped child's group (an engine whose server crashed): SIGTERM,
    then SIGKILL."""
    if not _group_alive(pgid):
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline and _group_alive(pgid):
        time.sleep(0.5)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, signal.SIGKILL)


def tail(path: Path, lines: int = 20) -> str:
    if not path.is_file():
        return ""
    return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])


@dataclass
class Service:
    proc: subprocess.Popen[Any]
    url: str
    log: Path
    settings: dict[str, str]


def launch_service(log: Path, settings: dict[str, str]) -> Service:
    """``reflectrm serve`` with these REFLECTRM_* settings over the environment's, on a free
    loopback port, in its own session, its output in ``log``. Stop it with ``stop_process``."""
    port = free_port()
    settings = {**settings, "REFLECTRM_HOST": "127.0.0.1", "REFLECTRM_PORT": str(port)}
    script = Path(sys.executable).with_name("reflectrm")
    command = [str(script)] if script.is_file() else [sys.executable, "-m", "reflectrm.cli"]
    with log.open("wb") as sink:
        proc = subprocess.Popen(
            [*command, "serve"],
            env={**os.environ, **settings},
            stdin=subprocess.DEVNULL,
            stdout=sink,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # Ctrl-C reaches the runner only, which stops it in order
        )
    return Service(proc=proc, url=f"http://127.0.0.1:{port}", log=log, settings=settings)


def wait_ready(
    url: str, timeout_s: float, service: Service | None = None, path: str = "/ready"
) -> float:
    """Seconds until GET ``path`` answers 200; RunError past ``timeout_s`` or if the service
    exits."""
    started = time.monotonic()
    last = "no answer"
    while time.monotonic() - started < timeout_s:
        if service is not None and service.proc.poll() is not None:
            raise RunError(
                f"the service exited with code {service.proc.returncode} before it was ready; "
                f"the end of {service.log}:\n{tail(service.log)}"
            )
        try:
            r = httpx.get(url.rstrip("/") + path, timeout=5.0)
            if r.status_code == 200:
                return time.monotonic() - started
            last = f"{r.status_code} {r.text[:200]}"
        except httpx.HTTPError as exc:
            last = f"{type(exc).__name__}: {exc}"
        time.sleep(1.0)
    raise RunError(f"{url}{path} did not answer 200 within {timeout_s:g} s (last: {last})")
