"""A free TCP port on the loopback interface."""

from __future__ import annotations

import socket

HOST = "127.0.0.1"


def free_port() -> int:
    """A port no one listens on now (the OS's choice); bind it soon, another may take it."""
    with socket.socket() as s:
        s.bind((HOST, 0))
        return int(s.getsockname()[1])
