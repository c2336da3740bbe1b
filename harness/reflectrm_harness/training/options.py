"""What every recipe's ``train`` commands share: a command is a function of the parsed namespace
that returns an exit code, and ``friendly`` makes a bad input a one-line error."""

from __future__ import annotations

import argparse
import functools
import sys
from collections.abc import Callable

from reflectrm.checkpoints.validate import CheckpointError

Command = Callable[[argparse.Namespace], int]


def friendly(command: Command) -> Command:
    """A bad input (a wrong path, a refused checkpoint, a bad setting) is a one-line error and
    exit code 2, not a traceback, whichever CLI calls the command."""

    @functools.wraps(command)
    def run(args: argparse.Namespace) -> int:
        try:
            return command(args)
        except (CheckpointError, ValueError, OSError) as exc:
            sys.stderr.write(f"error: {exc}\n")
            return 2

    return run
