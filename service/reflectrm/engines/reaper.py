"""Ends an engine's processes when the process that started them is gone.

vLLM runs its engine in child processes (``VLLM::EngineCore``, which starts ``VLLM::Worker``).
They stop when the parent shuts the engine down, and the workers stop when the engine core goes
(vLLM gives them a death pipe), but nothing stops the engine core when its parent dies without
shutting it down (``kill -9``, the OOM killer, a crash): it is re-parented to init and keeps its
gigabytes. vLLM 0.32 offers no switch for this (no PR_SET_PDEATHSIG, no parent check in the
engine core), and the child is started by vLLM's own code, so it cannot be given one.

So before the engine starts, the parent starts this small watchdog as its own process, in a
session of its own (a Ctrl-C or a signal to the parent's process group does not reach it), with
a pipe from the parent on its standard input. It notes every process the engine starts: the
parent's new children while the engine starts, then (``watch``) the engine's processes and
their descendants. When the pipe closes, because the parent closed it after shutting the engine
down or because the parent died, whatever it noted that still runs gets SIGTERM, then SIGKILL
after ``GRACE_S``. Processes are identified by pid and start time, so a reused pid is never hit.

The watchdog imports nothing but the standard library and psutil; it runs as
``python reaper.py PARENT_PID [PIDS OF THE PARENT'S CHILDREN BEFORE THE ENGINE]``.
"""

from __future__ import annotations

import contextlib
import os
import select
import subprocess
import sys
from collections.abc import Iterable
from typing import IO, Any

# How often the engine's process tree is re-read while the engine starts, and once its processes
# are known (each read scans every process on the machine; four a second cost a busy 2-core box
# about 5% of a core per service, measured). A closed pipe is seen at once either way, and a
# last read of the watched processes' descendants follows it. SIGTERM's grace before SIGKILL.
POLL_S = 0.25
WATCH_POLL_S = 2.0
GRACE_S = 5.0


class Reaper:
    """The parent's side: start the watchdog, tell it the engine's processes, let it finish."""

    def __init__(self) -> None:
        # Children from before the engine: none of the reaper's business.
        self.before = children_now()
        self._proc: subprocess.Popen[bytes] | None = subprocess.Popen(
            [sys.executable, os.path.abspath(__file__), str(os.getpid())]
            + [str(pid) for pid in sorted(self.before)],
            stdin=subprocess.PIPE,
            start_new_session=True,
            close_fds=True,
        )

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    def engine_started(self) -> list[int]:
        """Once the engine has started: watch exactly its processes (this process's children
        started since) and their descendants. Returns their pids."""
        pids = [p for p in engine_children(self.before) if p != self.pid]
        self.watch(pids)
        return pids

    def watch(self, pids: Iterable[int]) -> None:
        """From now on, watch exactly these processes (the engine's) and their descendants."""
        self._send("watch " + " ".join(str(p) for p in pids) + "\n")

    def close(self, wait_s: float = 2 * GRACE_S + 5) -> None:
        """End whatever of the engine still runs (nothing, after a clean shutdown) and wait
        for the watchdog to finish."""
        proc, self._proc = self._proc, None
        if proc is None:
            return
        if proc.stdin is not None:
            with contextlib.suppress(OSError):
                proc.stdin.close()
        # Past the wait it is still ending processes, and finishes on its own.
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=wait_s)

    def _send(self, line: str) -> None:
        if self._proc is None or self._proc.stdin is None:
            return
        try:
            self._proc.stdin.write(line.encode())
            self._proc.stdin.flush()
        except OSError:
            pass  # the watchdog is gone; nothing more can be done from here


def engine_children(before: set[int]) -> list[int]:
    """This process's children that are not in ``before`` (the engine's, once it started)."""
    import psutil

    return [c.pid for c in psutil.Process().children() if c.pid not in before and _ours(c)]


def children_now() -> set[int]:
    import psutil

    return {c.pid for c in psutil.Process().children()}


# --- the watchdog process ------------------------------------------------------------------------


def _say(message: str) -> None:
    print(f"reflectrm engine reaper: {message}", file=sys.stderr, flush=True)


def _read_commands(
    stream: IO[bytes], buffer: bytearray, wait_s: float = POLL_S
) -> tuple[list[str], bool]:
    """Commands that arrive on the pipe within ``wait_s``, and whether it has closed."""
    commands: list[str] = []
    ready, _, _ = select.select([stream], [], [], wait_s)
    if not ready:
        return commands, False
    chunk = os.read(stream.fileno(), 65536)
    if not chunk:
        return commands, True
    buffer.extend(chunk)
    while b"\n" in buffer:
        line, _, rest = bytes(buffer).partition(b"\n")
        buffer[:] = rest
        commands.append(line.decode(errors="replace").strip())
    return commands, False


def _watchdog(parent_pid: int, before: set[int]) -> int:
    import psutil

    baseline = before | {os.getpid()}
    try:
        parent: Any = psutil.Process(parent_pid)
    except psutil.NoSuchProcess:
        return 0
    roots: list[Any] | None = None  # None: the parent's new children
    seen: dict[int, Any] = {}
    buffer = bytearray()
    closed = False
    while not closed:
        wait_s = POLL_S if roots is None else WATCH_POLL_S
        commands, closed = _read_commands(sys.stdin.buffer, buffer, wait_s)
        for command in commands:
            verb, _, args = command.partition(" ")
            if verb == "watch":
                roots = []
                seen.clear()
                for pid in args.split():
                    with contextlib.suppress(psutil.NoSuchProcess, ValueError):
                        roots.append(psutil.Process(int(pid)))
        _note(parent, baseline, roots, seen)
    _note(None, baseline, roots, seen)  # the parent may be gone; its former children remain
    alive = [p for p in seen.values() if _running(p)]
    if not alive:
        return 0
    _say(
        f"process {parent_pid} is done with its engine, but {len(alive)} of the engine's "
        f"processes still run (pids {', '.join(str(p.pid) for p in alive)}); ending them"
    )
    for p in alive:
        _signal(p, "terminate")
    _, left = psutil.wait_procs(alive, timeout=GRACE_S)
    for p in left:
        _signal(p, "kill")
    psutil.wait_procs(left, timeout=GRACE_S)
    return 0


def _note(parent: Any, baseline: set[int], roots: list[Any] | None, seen: dict[int, Any]) -> None:
    """Add the engine's processes running now to ``seen``."""
    import psutil

    tops: list[Any] = []
    if roots is not None:
        tops = list(roots)
    elif parent is not None:
        try:
            tops = [c for c in parent.children() if c.pid not in baseline]
        except psutil.NoSuchProcess:
            tops = []
    tops += list(seen.values())  # the engine's processes seen before: their new children too
    for top in tops:
        if not _running(top) or not _ours(top):
            continue
        seen.setdefault(top.pid, top)
        try:
            for child in top.children(recursive=True):
                if _ours(child):
                    seen.setdefault(child.pid, child)
        except psutil.NoSuchProcess:
            pass
    for pid in [pid for pid, p in seen.items() if not _running(p)]:
        del seen[pid]


def _ours(p: Any) -> bool:
    """Not multiprocessing's resource tracker: it ends by itself when its owners are gone, and
    frees the shared memory they left; ending it first would leak that memory."""
    try:
        return "resource_tracker" not in " ".join(p.cmdline())
    except Exception:
        return True  # gone or unreadable: harmless either way


def _running(p: Any) -> bool:
    import psutil

    try:
        return bool(p.is_running()) and p.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def _signal(p: Any, how: str) -> None:
    import psutil

    with contextlib.suppress(psutil.Error):
        getattr(p, how)()  # psutil checks the start time first: never a reused pid


if __name__ == "__main__":
    sys.exit(_watchdog(int(sys.argv[1]), {int(pid) for pid in sys.argv[2:]}))
