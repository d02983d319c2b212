"""Local networking: a free TCP port for a server or a process group to listen on."""

from __future__ import annotations

import socket


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port on `host` that nothing listens on now (the OS picks it; a race with another
    process taking it before the caller binds is possible but rare)."""
    with socket.socket() as probe:
        probe.bind((host, 0))
        return int(probe.getsockname()[1])
