"""Earlier batches: documents placed in earlier turns of a conversation, the existing context.

A batch placed before client message `position` is valid while the messages before it are
unchanged (a retried or edited turn's batch is not); valid batches are re-inserted where they
were, so every message before the new batch keeps its bytes.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from kernel.types import Message


@dataclass(frozen=True, slots=True)
class Batch:
    """A batch placed before client message `position`, valid while the prefix is unchanged."""

    position: int
    prefix: bytes
    message: Mapping[str, Any]
    condensed: bool = False


def prefix_digest(messages: Sequence[Mapping[str, Any]], end: int) -> bytes:
    """A digest of `messages[:end]`."""
    data = orjson.dumps(list(messages[:end]), option=orjson.OPT_SORT_KEYS)
    return hashlib.blake2b(data, digest_size=16).digest()


def still_valid(batches: Sequence[Batch], messages: Sequence[Mapping[str, Any]]) -> list[Batch]:
    """Earlier turns' batches whose preceding messages are unchanged (a retried or edited
    turn's batch is not)."""
    current = last_user(messages)
    return [
        b
        for b in batches
        if b.position < current and b.prefix == prefix_digest(messages, b.position)
    ]


def weave(messages: Sequence[Mapping[str, Any]], batches: Sequence[Batch]) -> list[Any]:
    """The client's messages with each batch inserted before its position."""
    out: list[Any] = []
    for index, message in enumerate(messages):
        out += [b.message for b in batches if b.position == index]
        out.append(message)
    return out


def last_user(messages: Sequence[Mapping[str, Any]]) -> int:
    """The index of the last user message (the end when there is none)."""
    for index in range(len(messages) - 1, -1, -1):
        if messages[index].get("role") == "user":
            return index
    return len(messages)


class BatchMemory:
    """Placed batches per (tenant, conversation), least recently used forgotten first."""

    def __init__(self, max_conversations: int) -> None:
        self.max = max_conversations
        self._batches: OrderedDict[tuple[str, str], tuple[Batch, ...]] = OrderedDict()

    def get(self, key: tuple[str, str]) -> tuple[Batch, ...]:
        """The batches remembered for a conversation."""
        found = self._batches.get(key, ())
        if found:
            self._batches.move_to_end(key)
        return found

    def put(self, key: tuple[str, str], batches: Sequence[Batch]) -> None:
        """Remember a conversation's batches (nothing when the memory is disabled)."""
        if self.max <= 0:
            return
        self._batches[key] = tuple(batches)
        self._batches.move_to_end(key)
        while len(self._batches) > self.max:
            self._batches.popitem(last=False)


def new_batch(messages: Sequence[Mapping[str, Any]], text: str) -> Batch:
    """The batch for this turn: before the client's last user message."""
    position = min(last_user(messages), len(messages))
    message = {"role": "user", "content": text}
    return Batch(position, prefix_digest(messages, position), message)


def insert_before_last_user(messages: Sequence[Any], message: Message) -> list[Any]:
    """The messages with `message` inserted just before the last user message."""
    index = last_user(messages)
    return [*messages[:index], message, *messages[index:]]
