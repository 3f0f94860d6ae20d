"""A loopback port for a server a test or a bench starts (stdlib only: the benches import it
too, without the tests' fixtures)."""

from __future__ import annotations

import socket


def free_port() -> int:
    """A loopback port nobody listens on right now (the kernel's pick, released at once: a
    server started on it may still find it taken, which its caller retries)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])
