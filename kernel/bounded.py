"""A mapping that keeps what was used most recently, within a bound on the size of it all.

What a process derives from a conversation and reuses at its next requests (the passages of
its condensed turns, their word index, the quote before its question) is kept per key, least
recently used out once the values together pass `bound` (each value's `size`: passages,
characters). The newest value is always kept, whatever its size: one conversation larger
than the bound still reuses what it derived, and the next one pushes it out.

Not thread-safe: a caller shared across threads holds its own lock around it.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

__all__ = ["Bounded"]

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class Bounded(Generic[K, V]):
    """Values by key, the least recently used out past `bound` (summed `size` of each)."""

    def __init__(self, bound: int, size: Callable[[V], int]) -> None:
        self.bound = bound
        self.size = size
        self._values: OrderedDict[K, V] = OrderedDict()
        self._held = 0

    def __len__(self) -> int:
        return len(self._values)

    def held(self) -> int:
        """The summed size of the values kept."""
        return self._held

    def get(self, key: K) -> V | None:
        """The value kept for `key` (now the most recently used), or None."""
        value = self._values.get(key)
        if value is not None:
            self._values.move_to_end(key)
        return value

    def put(self, key: K, value: V) -> V:
        """Keep `value` for `key` (replacing what was), then let the least recently used go
        while the rest passes the bound; returns `value`."""
        self.pop(key)
        self._values[key] = value
        self._held += self.size(value)
        while self._held > self.bound and len(self._values) > 1:
            _, out = self._values.popitem(last=False)
            self._held -= self.size(out)
        return value

    def pop(self, key: K) -> V | None:
        """Forget what is kept for `key`; returns it, or None."""
        value = self._values.pop(key, None)
        if value is not None:
            self._held -= self.size(value)
        return value
