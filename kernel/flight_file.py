"""Single flight across the processes that share one disk store (`overspill serve --workers N`).

One lock file in the store's directory; a key (tenant, conversation) is one byte of it, at an
offset hashed from the key, locked with a POSIX record lock (`fcntl.lockf`). The kernel drops
a process's record locks when it exits or is killed, so a crashed worker never leaves a stale
flight behind, and nothing is ever written to the file.

Record locks belong to a process, not to a file descriptor: they never exclude holders inside
one process (the store's in-process `SingleFlight` does that, in front of this), and closing
any descriptor of the file would drop them all, so each store keeps exactly one open. Two
different keys share a byte only when 62-bit hashes collide; such a clash only makes one wait
for the other.

Waiting polls a non-blocking lock (every `POLL_SECONDS`): a blocking `fcntl` call would stall
the event loop, and one in a thread could not be cancelled. Callers bound the wait.
"""

from __future__ import annotations

import asyncio
import fcntl
import hashlib
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

POLL_SECONDS = 0.05
"""How often a waiter tries a flight another process holds."""

_OFFSETS = 1 << 62


def offset_of(tenant: str, conversation_id: str) -> int:
    """The byte of the lock file that stands for the key."""
    digest = hashlib.blake2b(
        f"{len(tenant)}:{tenant}:{conversation_id}".encode(), digest_size=8
    ).digest()
    return int.from_bytes(digest, "big") % _OFFSETS


class FlightFile:
    """Cross-process flights on one lock file (see the module docstring)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fd: int | None = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)

    def _try(self, offset: int) -> bool:
        """Take the key's byte if no other process holds it."""
        if self._fd is None:
            raise RuntimeError(f"the flight file {self.path} is closed")
        try:
            fcntl.lockf(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, offset)
        except (BlockingIOError, PermissionError):
            return False
        return True

    def _release(self, offset: int) -> None:
        if self._fd is not None:
            fcntl.lockf(self._fd, fcntl.LOCK_UN, 1, offset)

    def busy(self, tenant: str, conversation_id: str) -> bool:
        """Whether another process holds the key now. Call only while this process does not
        hold it (the probe takes the byte and gives it back at once)."""
        offset = offset_of(tenant, conversation_id)
        if not self._try(offset):
            return True
        self._release(offset)
        return False

    @asynccontextmanager
    async def hold(self, tenant: str, conversation_id: str) -> AsyncIterator[None]:
        """Wait until no other process holds the key, then hold it for the block."""
        offset = offset_of(tenant, conversation_id)
        while not self._try(offset):  # noqa: ASYNC110 (no event crosses processes)
            await asyncio.sleep(POLL_SECONDS)
        try:
            yield
        finally:
            self._release(offset)

    def close(self) -> None:
        """Close the file: this process's flights on it end."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
