"""CPU time the engine reaper's watchdog spends while it watches a running engine.

    .venv/bin/python -m studies.reaper_cpu

Starts a stand-in engine (a process with a child, as vLLM's engine core has its worker), lets
the reaper watch it, and reads the watchdog's CPU time over 30 seconds."""

from __future__ import annotations

import subprocess
import sys
import time

import psutil

from reflectrm.engines.reaper import Reaper

ENGINE = (
    "import subprocess, sys, time; "
    "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']); time.sleep(60)"
)


def main(seconds: float = 30.0) -> None:
    reaper = Reaper()
    core = subprocess.Popen([sys.executable, "-c", ENGINE])
    try:
        time.sleep(1)
        reaper.engine_started()
        assert reaper.pid is not None
        watchdog = psutil.Process(reaper.pid)
        time.sleep(2)
        t0, w0 = sum(watchdog.cpu_times()[:2]), time.monotonic()
        time.sleep(seconds)
        t1, w1 = sum(watchdog.cpu_times()[:2]), time.monotonic()
        share = 100 * (t1 - t0) / (w1 - w0)
        print(f"reaper CPU: {t1 - t0:.3f} s in {w1 - w0:.1f} s = {share:.2f}% of a core")
    finally:
        core.terminate()
        core.wait(10)
        reaper.close()  # ends the stand-in's child too


if __name__ == "__main__":
    main()
