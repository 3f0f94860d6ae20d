"""What a process remembers of each conversation's last requests, so a turn pays for what it adds.

A conversation is resent whole on every turn. Checking a cached extraction's prefix chain
(kernel/conversation.py) and counting each message's tokens (kernel/tokens.py) cost a few µs
a message in Python, so a 2,000-message conversation paid ~10 ms a turn to derive again what
the previous turn already knew. `Recall` keeps, per (tenant, conversation id), what was
derived from the last requests seen: each one's fingerprint, the prefix chains computed for
it, and its per-message token counts per tokenizer.

A new request reuses them only for the part of its messages whose fingerprint equals a
remembered request's. The fingerprint is sha256 over the messages as orjson writes them (the
opening bracket and the comma-separated messages; no closing bracket, so a longer request's
fingerprint extends a shorter one's), one C call each: ~0.1 ms per MB to write, ~0.6 ms per MB
to hash, against ~2 ms per MB for the chain. Any difference in a remembered message (an edit,
a reordering, an insertion, a branch, even a key order the canonical form ignores) gives
another fingerprint, and then everything is derived again from the messages: a miss costs what
the turn cost before, never a wrong answer. Chains and counts are pure functions of the
messages, so what one conversation remembers cannot change what another is told; they are
kept per tenant and conversation anyway.

Bounded: at most `max_conversations` conversations (least recently used first out), each with
at most `per_conversation` requests (conversations that share a derived id and so one key:
middleware/condensing/slots.py), each holding a 32-byte digest, 4 bytes per message per
tokenizer, and at most `CHAINS` chains. With the defaults (256 x 4) that is at most ~8 MB even
if every conversation had 2,000 messages. Each replica and worker keeps its own: a request
that lands elsewhere, or after a restart, only misses and recomputes.

Not thread-safe beyond the GIL's guarantees: one event loop uses it (layers never await in it).
"""

from __future__ import annotations

import hashlib
from array import array
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson

from kernel.conversation import chain
from kernel.tokens import TokenCounter
from kernel.types import Message

__all__ = ["CHAINS", "History", "Recall"]

CHAINS = 8
"""Chains kept per remembered request: the prefixes its conversation's entries cover (up to
four slots of a derived id, and the end a growth is writing)."""


@dataclass(slots=True)
class Seen:
    """One request remembered: its messages' fingerprint and what was derived from them."""

    length: int
    size: int
    """Bytes the fingerprint hashed (the messages' JSON without its closing bracket)."""
    digest: bytes
    chains: dict[tuple[int, str], str] = field(default_factory=dict)
    counts: dict[str, array[int]] = field(default_factory=dict)
    """Per tokenizer model, each message's token count."""


class History:
    """One request's messages, with what its conversation's earlier turns already derived."""

    def __init__(self, messages: Sequence[Message], known: Seen | None, seen: Seen | None):
        self.messages = messages
        self.known = known
        """The remembered request this one continues (its messages are a prefix of these)."""
        self.seen = seen
        """This request, remembered (None: its messages cannot be fingerprinted)."""
        self._counts: dict[str, tuple[int, ...]] = {}

    def chain(self, end: int, version: str) -> str:
        """`kernel.conversation.chain(messages, end, version)`, remembered."""
        if self.seen is None:
            return chain(self.messages, end, version)
        found = self.seen.chains.get((end, version))
        if found is None:
            found = chain(self.messages, end, version)
            chains = self.seen.chains
            chains[(end, version)] = found
            while len(chains) > CHAINS:
                del chains[next(iter(chains))]
        return found

    def chain_matches(self, end: int, version: str, expected: str) -> bool:
        """Whether the first `end` messages still have the chain `expected`."""
        if not 0 <= end <= len(self.messages):
            return False
        return self.chain(end, version) == expected

    def counts(self, counter: TokenCounter) -> tuple[int, ...]:
        """Each message's raw token count with `counter`; only messages the remembered
        request did not have are counted."""
        done = self._counts.get(counter.model)
        if done is not None:
            return done
        own = self.seen.counts.get(counter.model) if self.seen is not None else None
        if own is None:
            earlier = self.known.counts.get(counter.model) if self.known is not None else None
            start = len(earlier) if earlier is not None else 0
            own = array("I", earlier) if earlier is not None else array("I")
            own.extend(counter.count_message(m) for m in self.messages[start:])
            if self.seen is not None:
                self.seen.counts[counter.model] = own
        done = self._counts[counter.model] = tuple(own)
        return done


class Recall:
    """Per (tenant, conversation): the last requests seen and what was derived from them."""

    def __init__(self, max_conversations: int = 256, per_conversation: int = 4) -> None:
        if max_conversations < 1 or per_conversation < 1:
            raise ValueError("Recall keeps at least one conversation and one request of each")
        self.max_conversations = max_conversations
        self.per_conversation = per_conversation
        self._seen: OrderedDict[tuple[str, str], list[Seen]] = OrderedDict()

    def __len__(self) -> int:
        """How many conversations are remembered."""
        return len(self._seen)

    def requests(self) -> int:
        """How many requests are remembered, over every conversation."""
        return sum(len(items) for items in self._seen.values())

    def history(self, tenant: str, conversation_id: str, messages: Sequence[Message]) -> History:
        """These messages, with what the conversation's earlier requests derived; this request
        is remembered in turn (a layer keeps the History for the rest of the request)."""
        return self._remember((tenant, conversation_id), messages)

    def _remember(self, key: tuple[str, str], messages: Sequence[Message]) -> History:
        items = self._seen.get(key, [])
        try:
            known, digest, length = _continued(items, messages)
            rest = _written(messages[length:])
        except (orjson.JSONEncodeError, TypeError):
            return History(messages, None, None)  # not JSON-writable: derived each time
        if known is not None and known.length == len(messages):
            self._keep(key, items, known)
            return History(messages, known, known)
        size = known.size if known is not None else 0
        body = memoryview(rest)[1:-1] if length else memoryview(rest)[:-1]
        if length and len(body):
            digest.update(b",")
            size += 1
        digest.update(body)
        size += len(body)
        seen = Seen(len(messages), size, digest.digest())
        if known is not None:
            seen.chains.update(known.chains)
            items = [item for item in items if item is not known]  # extended: superseded
        self._keep(key, items, seen)
        return History(messages, known, seen)

    def _keep(self, key: tuple[str, str], items: list[Seen], seen: Seen) -> None:
        """Make `seen` the conversation's newest request; drop the oldest beyond the bounds."""
        kept = [item for item in items if item is not seen][-(self.per_conversation - 1) :]
        if self.per_conversation == 1:
            kept = []
        self._seen[key] = [*kept, seen]
        self._seen.move_to_end(key)
        while len(self._seen) > self.max_conversations:
            self._seen.popitem(last=False)


def _written(messages: Sequence[Message]) -> bytes:
    """The messages as one JSON array (orjson's compact form)."""
    return orjson.dumps(messages if isinstance(messages, list | tuple) else list(messages))


def _continued(items: list[Seen], messages: Sequence[Message]) -> tuple[Seen | None, Any, int]:
    """The longest remembered request these messages continue, the fingerprint's hash over
    its part, and its length (None, an empty hash and 0 when none)."""
    for item in sorted(items, key=lambda seen: seen.length, reverse=True):
        if item.length > len(messages) or item.length == 0:
            continue
        written = _written(messages[: item.length])
        if len(written) - 1 != item.size:
            continue
        digest = hashlib.sha256(memoryview(written)[:-1])
        if digest.digest() == item.digest:
            return item, digest, item.length
    return None, hashlib.sha256(), 0
