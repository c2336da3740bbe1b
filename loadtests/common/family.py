"""A ``reflectrm`` command whose every process is tracked by pid, for the fault measurements
(loadtests/faults.py) and the reliability tests (tests/e2e/test_reliability_e2e.py), which break
a service (kill its engine, SIGTERM or SIGKILL it) and then look at what is left of it.

The command runs in the caller's process group, as an operator's shell would run it (no session
of its own: what a fault leaves behind is what is measured, so nothing here stops a group), its
stderr in a log. ``note_family`` records the process and every process under it (the engine's,
the reaper); ``stop`` ends whatever of them still runs, by pid: SIGTERM, then SIGKILL.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import httpx
import psutil

from loadtests.common.metrics import parse_metrics
from loadtests.common.ports import HOST, free_port
from loadtests.common.process import RunError, wait_for, wait_ready

ROOT = Path(__file__).resolve().parents[2]
# A service of its own on a small machine: 1 GiB of KV cache, a 4096-token context, short
# default generations, no swap checks, a long request timeout.
SMALL = {
    "REFLECTRM_KV_CACHE_GIB": "1",
    "REFLECTRM_MAX_MODEL_LEN": "4096",
    "REFLECTRM_MAX_TOKENS": "48",
    "REFLECTRM_SWAP_CHECK_FRACTION": "0",
    "REFLECTRM_REQUEST_TIMEOUT_S": "600",
}


def reflectrm_env(
    settings: Mapping[str, str] | None = None,
    defaults: Mapping[str, str] = SMALL,
    pythonpath: Sequence[Path] = (ROOT / "service",),
) -> dict[str, str]:
    """The environment's variables, ``PYTHONPATH`` set to ``pythonpath``, then ``defaults``,
    then ``settings`` (``name`` for REFLECTRM_NAME)."""
    return {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(str(p) for p in pythonpath),
        **defaults,
        **{f"REFLECTRM_{k.upper()}": v for k, v in (settings or {}).items()},
    }


def alive(p: psutil.Process) -> bool:
    """Running and not a zombie."""
    try:
        return p.is_running() and p.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def describe(p: psutil.Process) -> str:
    """The process's name, and what it runs when that is only "python"."""
    with contextlib.suppress(psutil.Error):
        name = p.name()
        if name.startswith("python"):
            args = p.cmdline()[1:]
            return f"{name} {' '.join(args)[:70]}".rstrip()
        return name
    return "?"


def reflectrm_command(*args: str) -> list[str]:
    """``python -m reflectrm.cli <args>`` with this interpreter."""
    return [sys.executable, "-m", "reflectrm.cli", *args]


class Watched:
    """``command`` (``reflectrm_command(...)``) with ``env``, its stdout dropped, its stderr in
    ``log``, its processes tracked once ``note_family`` is called."""

    def __init__(self, command: Sequence[str], log: Path, env: Mapping[str, str]) -> None:
        self.log = log
        self._stderr = log.open("w")
        self.started = time.monotonic()
        self.proc: subprocess.Popen[Any] = subprocess.Popen(
            list(command),
            env=dict(env),
            stdout=subprocess.DEVNULL,
            stderr=self._stderr,
        )
        self.family: list[psutil.Process] = []
        self.names: dict[int, str] = {}

    @property
    def stderr(self) -> str:
        return self.log.read_text(errors="replace")

    def note_family(self) -> list[psutil.Process]:
        """Every process of the command now: itself and every process under it (the engine's,
        the reaper), their names kept in ``names``."""
        me = psutil.Process(self.proc.pid)
        self.family = [me, *me.children(recursive=True)]
        self.names = {p.pid: describe(p) for p in self.family}
        return self.family

    def engine_core(self) -> psutil.Process | None:
        """The engine core process under the command (vLLM's ``EngineCore``), if there is one."""
        for p in psutil.Process(self.proc.pid).children(recursive=True):
            with contextlib.suppress(psutil.Error):
                if "EngineCore" in p.name() or "EngineCore" in " ".join(p.cmdline()):
                    return p
        return None

    def left_running(self) -> list[psutil.Process]:
        """The noted processes still running."""
        return [p for p in self.family if alive(p)]

    def stop(
        self,
        signals: Sequence[signal.Signals] = (signal.SIGTERM, signal.SIGKILL),
        wait_s: float = 15.0,
    ) -> None:
        """Whatever still runs of it (a failed run): each of ``signals`` in turn to every noted
        process still running, by pid, each followed by up to ``wait_s`` for them to end."""
        if self.proc.poll() is None:
            self.note_family()
        for sig in signals:
            for p in self.left_running():
                with contextlib.suppress(psutil.Error):
                    p.send_signal(sig)
            # Wait on the noted processes as ``alive`` sees them: psutil.wait_procs counts an
            # unreaped zombie as running and would sit out the whole wait for it.
            with contextlib.suppress(RunError):
                wait_for(lambda: not self.left_running(), "the family ended", wait_s)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(30)
        self._stderr.close()


class WatchedServe(Watched):
    """``reflectrm serve`` on a loopback port (``port``, else a free one), watched."""

    def __init__(self, log: Path, env: Mapping[str, str], port: int | None = None) -> None:
        self.port = free_port() if port is None else port
        self.url = f"http://{HOST}:{self.port}"
        super().__init__(reflectrm_command("serve", "--port", str(self.port)), log, env)

    def ready_status(self) -> int | None:
        """GET /ready's status; None when nothing answers."""
        try:
            return httpx.get(f"{self.url}/ready", timeout=5).status_code
        except httpx.TransportError:
            return None

    def wait_ready(self, timeout_s: float = 900.0) -> float:
        """Seconds from the start until /ready answered 200 (RunError if serve exits first)."""
        wait_ready(self.url, timeout_s, self, poll_s=1.0, what="serve")
        return time.monotonic() - self.started

    def metrics(self) -> dict[str, float]:
        """Every sample of /metrics, summed over labels by name."""
        text = httpx.get(f"{self.url}/metrics", timeout=10).text
        return parse_metrics(text, by="name")
