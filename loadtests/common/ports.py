"""The loopback interface: a free TCP port on it, and whether a URL points at it."""

from __future__ import annotations

import ipaddress
import socket
from urllib.parse import urlsplit

HOST = "127.0.0.1"


def free_port() -> int:
    """A port no one listens on now (the OS's choice); bind it soon, another may take it."""
    with socket.socket() as s:
        s.bind((HOST, 0))
        return int(s.getsockname()[1])


def free_ports(n: int) -> list[int]:
    """``n`` distinct free ports, for servers that must know each other's before they start."""
    ports: list[int] = []
    while len(ports) < n:
        port = free_port()
        if port not in ports:
            ports.append(port)
    return ports


def is_loopback(url: str) -> bool:
    """Whether ``url``'s host is ``localhost`` or a loopback address (127.0.0.0/8, ::1)."""
    host = urlsplit(url).hostname or ""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
