"""Earlier batches: documents placed in earlier turns of a conversation, the existing context.

A batch placed before client message `position` is valid while the messages before it are
unchanged (a retried or edited turn's batch is not): its `prefix` is the same chain over those
messages that cached extractions use (kernel.conversation.chain). Valid batches are re-inserted
where they were, so every message before the new batch keeps its bytes. Batches live in the
store (kernel.records.DocumentBatches), so replicas and restarts place them alike.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from kernel.conversation import chain
from kernel.records import StoredBatch
from kernel.types import Message

Batch = StoredBatch
"""A batch as placed and stored."""
PREFIX_VERSION = "documents/1"
"""Seeds the prefix chain, so a batch's chain never equals an extraction's."""


def prefix_of(messages: Sequence[Mapping[str, Any]], end: int) -> str:
    """The chain over `messages[:end]`."""
    return chain(messages, end, PREFIX_VERSION)


def still_valid(batches: Sequence[Batch], messages: Sequence[Mapping[str, Any]]) -> list[Batch]:
    """Earlier turns' batches whose preceding messages are unchanged (a retried or edited
    turn's batch is not)."""
    current = last_user(messages)
    return [
        b for b in batches if b.position < current and b.prefix == prefix_of(messages, b.position)
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


def new_batch(messages: Sequence[Mapping[str, Any]], text: str) -> Batch:
    """The batch for this turn: before the client's last user message."""
    position = min(last_user(messages), len(messages))
    message = {"role": "user", "content": text}
    return Batch(position=position, prefix=prefix_of(messages, position), message=message)


def insert_before_last_user(messages: Sequence[Any], message: Message) -> list[Any]:
    """The messages with `message` inserted just before the last user message."""
    index = last_user(messages)
    return [*messages[:index], message, *messages[index:]]
