"""Commands that end cleanly on SIGTERM as they do on Ctrl-C.

Python's default for SIGTERM is to die on the spot: no ``finally``, no ``async with`` exit, so a
command that opened an engine (``judge``, ``eval``, ``train``) left it running (``timeout``,
``docker stop`` and ``kill`` all send SIGTERM). Under ``run_command`` SIGTERM and SIGHUP do what
SIGINT does: in asyncio code the running task is cancelled and every cleanup runs (the engine is
shut down), elsewhere KeyboardInterrupt unwinds the stack. The command then exits with status
128 + the signal's number, the shell's convention for "ended by this signal".
"""

from __future__ import annotations

import signal
import sys
from collections.abc import Callable
from types import FrameType

FORWARDED = (signal.SIGTERM, signal.SIGHUP)


def run_command(command: Callable[[], int]) -> int:
    received: list[int] = []

    def as_interrupt(signum: int, frame: FrameType | None) -> None:
        received.append(signum)
        handler = signal.getsignal(signal.SIGINT)
        if callable(handler):
            handler(signal.SIGINT, frame)  # asyncio's runner cancels its main task here
        else:
            raise KeyboardInterrupt

    previous = {sig: signal.signal(sig, as_interrupt) for sig in FORWARDED}
    try:
        return command()
    except KeyboardInterrupt:
        signum = received[-1] if received else signal.SIGINT
        print(f"reflectrm: stopped by {signal.Signals(signum).name}", file=sys.stderr)
        return 128 + signum
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
