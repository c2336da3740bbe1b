"""Starting a process in its own session and stopping it with its whole process group, for the
load scripts and the tests: ``launch`` (any command, its output in a log), ``launch_service``
(``reflectrm serve`` on a free loopback port), ``served`` (the service a run measures: one
given by URL, or one started, waited for and always stopped), ``peer_set`` (replicas that know
each other, started, waited for and always stopped), ``wait_ready`` (GET /ready, or
/health, until it answers), ``wait_for`` (a condition, polled), ``stop_process`` (SIGINT,
SIGTERM, then SIGKILL to the child's group, so that no engine process is left behind) and
``kill_group`` (SIGKILL to the group at once, as a machine failure would)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from loadtests.common.ports import HOST, free_port, free_ports


class RunError(Exception):
    """The run could not be made (exit code 2)."""


class Running(Protocol):
    """A started process and its log: a ``Service``, a fleet's replica or router."""

    @property
    def proc(self) -> subprocess.Popen[Any]: ...

    @property
    def log(self) -> Path: ...


def launch(
    command: Sequence[str],
    log: Path,
    env: Mapping[str, str] | None = None,
    cwd: Path | None = None,
) -> subprocess.Popen[bytes]:
    """``command`` in a session (and process group) of its own, stdin from /dev/null, stdout and
    stderr into ``log``: Ctrl-C reaches the caller only, which stops it in order with
    ``stop_process``."""
    with log.open("wb") as sink:
        return subprocess.Popen(
            list(command),
            cwd=cwd,
            env=None if env is None else dict(env),
            stdin=subprocess.DEVNULL,
            stdout=sink,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


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


def stop_process(
    proc: subprocess.Popen[Any],
    grace_s: Sequence[float] = (60.0, 30.0),
    *,
    signals: Sequence[signal.Signals] = (signal.SIGINT, signal.SIGTERM),
    leftovers_s: float = 15.0,
    leftovers_signal: signal.Signals | None = signal.SIGTERM,
) -> None:
    """``signals`` to the child in turn (SIGINT, then SIGTERM), each given its time
    (``grace_s``, one per signal); then SIGKILL to the process group the child leads (it was
    started in its own session, by ``launch``). Then what is left of the group (an engine whose
    server crashed, or one still ending): ``leftovers_signal`` (None: no signal, they are only
    waited for), up to ``leftovers_s``, then SIGKILL. Stopped by pid and group id only, never by
    name. Bounded by ``sum(grace_s) + leftovers_s`` plus the kills; Ctrl-C does not interrupt
    it."""
    with signals_held():
        _stop(proc, signals, grace_s)
        _end_group(proc.pid, leftovers_s, leftovers_signal)


def _stop(
    proc: subprocess.Popen[Any], signals: Sequence[signal.Signals], grace_s: Sequence[float]
) -> None:
    for sig, wait_s in zip(signals, grace_s, strict=True):
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


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # a member runs as another user: still there
        return True
    return True


def _end_group(pgid: int, grace_s: float, first: signal.Signals | None) -> None:
    """Processes left in the stopped child's group: ``first`` (if any), up to ``grace_s`` for
    them to end, then SIGKILL."""
    if not _group_alive(pgid):
        return
    if first is not None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pgid, first)
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline and _group_alive(pgid):
        time.sleep(0.2)
    if _group_alive(pgid):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pgid, signal.SIGKILL)


def kill_group(proc: subprocess.Popen[Any], wait_s: float = 30.0) -> None:
    """SIGKILL to the group the child leads, at once (a crash, not a stop), and reap it."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(wait_s)


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


def launch_service(log: Path, settings: dict[str, str], port: int | None = None) -> Service:
    """``reflectrm serve`` with these REFLECTRM_* settings over the environment's, on ``port``
    (default a free loopback port), in its own session, its output in ``log``. Stop it with
    ``stop_process``."""
    port = port or free_port()
    settings = {**settings, "REFLECTRM_HOST": HOST, "REFLECTRM_PORT": str(port)}
    script = Path(sys.executable).with_name("reflectrm")
    command = [str(script)] if script.is_file() else [sys.executable, "-m", "reflectrm.cli"]
    proc = launch([*command, "serve"], log, env={**os.environ, **settings})
    return Service(proc=proc, url=f"http://{HOST}:{port}", log=log, settings=settings)


@contextlib.contextmanager
def served(
    url: str | None,
    log: Path,
    settings: dict[str, str],
    ready_timeout_s: float,
    record: dict[str, Any] | None = None,
    *,
    stop: Callable[[subprocess.Popen[Any]], None] | None = None,
) -> Iterator[str]:
    """The base URL of the service a run measures: ``url`` when given (waited for until ready),
    else ``reflectrm serve`` started with ``settings`` (its output in ``log``), waited for, and
    stopped on leaving whatever happens (``stop``, default ``stop_process``). ``record`` gets
    ``ready_after_s``, and ``service_exit_code`` of a service started here. RunError when the
    service does not become ready."""
    record = {} if record is None else record
    service: Service | None = None
    try:
        if url:
            url = url.rstrip("/")
            record["ready_after_s"] = round(wait_ready(url, ready_timeout_s), 1)
        else:
            service = launch_service(log, settings)
            print(f"starting the service (log: {log}) ...", flush=True)
            record["ready_after_s"] = round(wait_ready(service.url, ready_timeout_s, service), 1)
            url = service.url
            print(f"service ready at {url} after {record['ready_after_s']} s", flush=True)
        yield url
    finally:
        if service is not None:
            print("stopping the service ...", flush=True)
            (stop or stop_process)(service.proc)
            record["service_exit_code"] = service.proc.returncode


@contextlib.contextmanager
def peer_set(
    count: int,
    log_dir: Path,
    settings: Callable[[Sequence[str], str], dict[str, str]],
    ready_timeout_s: float,
    record: dict[str, Any] | None = None,
) -> Iterator[list[Service]]:
    """``count`` replicas of ``reflectrm serve`` that know each other: their ports are chosen
    first, so that ``settings(urls, own_url)`` can name the whole set (REFLECTRM_PEERS). Each is
    started (output in ``log_dir/service-<i>.log``), all are waited for, and all are stopped on
    leaving whatever happens. ``record`` gets ``ready_after_s`` and ``replica_exit`` (each
    replica's pid and exit code)."""
    record = {} if record is None else record
    ports = free_ports(count)
    urls = [f"http://{HOST}:{port}" for port in ports]
    services: list[Service] = []
    try:
        for i, (url, port) in enumerate(zip(urls, ports, strict=True)):
            log = log_dir / f"service-{i}.log"
            services.append(launch_service(log, settings(urls, url), port))
            print(f"starting replica {i} at {url} (pid {services[-1].proc.pid}, log: {log})")
        started = time.monotonic()
        for i, service in enumerate(services):
            wait_ready(service.url, ready_timeout_s, service, what=f"replica {i}")
        record["ready_after_s"] = round(time.monotonic() - started, 1)
        print(f"{count} replicas ready after {record['ready_after_s']} s", flush=True)
        yield services
    finally:
        record["replica_exit"] = {}
        for service in services:
            stop_process(service.proc)
            record["replica_exit"][service.url] = {
                "pid": service.proc.pid,
                "exit_code": service.proc.returncode,
            }


def wait_ready(
    url: str,
    timeout_s: float,
    service: Running | None = None,
    path: str = "/ready",
    *,
    poll_s: float = 1.0,
    what: str = "the service",
) -> float:
    """Seconds until GET ``path`` answers 200, asked every ``poll_s``; RunError past
    ``timeout_s`` or if ``service``'s process exits (``what`` names it in the message)."""
    import httpx  # on use: the rest of this module is the standard library's (gpu_check's set-up)

    started = time.monotonic()
    last = "no answer"
    while time.monotonic() - started < timeout_s:
        if service is not None and service.proc.poll() is not None:
            raise RunError(
                f"{what} exited with code {service.proc.returncode} before it was ready; "
                f"the end of {service.log}:\n{tail(service.log)}"
            )
        try:
            r = httpx.get(url.rstrip("/") + path, timeout=5.0)
            if r.status_code == 200:
                return time.monotonic() - started
            last = f"{r.status_code} {r.text[:200]}"
        except httpx.HTTPError as exc:
            last = f"{type(exc).__name__}: {exc}"
        time.sleep(poll_s)
    raise RunError(f"{url}{path} did not answer 200 within {timeout_s:g} s (last: {last})")


def wait_for(
    condition: Callable[[], bool], what: str, timeout_s: float, poll_s: float = 0.1
) -> float:
    """Seconds until ``condition()`` held, asked every ``poll_s``; RunError past ``timeout_s``."""
    started = time.monotonic()
    while not condition():
        if time.monotonic() - started > timeout_s:
            raise RunError(f"never happened within {timeout_s:.0f} s: {what}")
        time.sleep(poll_s)
    return time.monotonic() - started
