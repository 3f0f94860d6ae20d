"""What the history_splice layer remembers between a conversation's requests, in this process.

Three things, each kept per conversation (tenant, conversation id) and bounded over all of
them, least recently used out (`kernel/bounded.py`):

- the spliced prefix the conversation's last turn sent, to say whether this turn's is the same
  (`last_prefix`);
- the passages read from the turns an extraction condensed (`Condensed`), read once per
  extraction: the client resends those turns with every request;
- the block quoted before the user's latest message (`Quote`), sent again on the rounds of an
  agent's loop that follow the message.

Forgetting any of them costs work, never correctness: a prefix forgotten reads as changed, the
passages are read again, the quote is picked anew.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, replace

import orjson

from kernel.bounded import Bounded
from kernel.store import HistoryEntry
from kernel.types import Message
from middleware.condensing.relevance import Passage, in_force, passages

PREFIXES_KEPT = 4096
"""Conversations whose last spliced prefix this process remembers."""
PASSAGES_KEPT = 32768
"""Condensed passages this process remembers, over all conversations (`Condensed`): about 16
conversations of 2,000 turns of chat, some 20 MB with their text, or hundreds of shorter ones.
A conversation that is out reads its turns again."""
QUOTES_KEPT_CHARS = 16 * 1024 * 1024
"""Characters of quoted blocks this process remembers, over all conversations (`Quote`)."""

Key = tuple[str, str]
"""A conversation: its tenant and id."""


@dataclass(frozen=True, slots=True)
class Quote:
    """The block quoted before a user's message, kept for the rounds of an agent's loop that
    follow it (tool calls and their results after the same message): sent again as it was,
    the message stays the bytes the upstream cached, and so does the tool traffic after it.
    It is kept even when a later round has more room (a masking batch freed some): a longer
    quote would cost the upstream the message and everything after it again."""

    block: str
    added: int
    """Its tokens, counted as the request counts them."""
    turns: int
    """How many passages it quotes."""
    prefix: tuple[int, int] = (0, 0)
    """The stand-in it was quoted beside (the splice's `Fit.prefix`; set when it is kept)."""
    asked: int = -1
    """Where the user's message is among the client's messages (set when it is kept)."""
    said: bytes = b""
    """The sha256 of the client's messages from the condensed end through the user's (set
    when it is kept)."""


@dataclass(frozen=True, slots=True)
class Condensed:
    """A conversation's condensed turns as the quote reads them, for one extraction: what its
    chain (`HistoryEntry.chain`, the hash of those turns the request was checked against)
    stands for is the same turns, so the passages read from them are the same."""

    chain: str
    end: int
    found: tuple[Passage, ...]
    stamp: str
    """The stamp in force after them (`relevance.in_force`)."""


class SpliceMemory:
    """The splice's memory of its conversations in this process (bounded)."""

    def __init__(self) -> None:
        self._prefixes: Bounded[Key, tuple[int, int]] = Bounded(PREFIXES_KEPT, lambda _: 1)
        self._condensed: Bounded[Key, Condensed] = Bounded(
            PASSAGES_KEPT, lambda read: len(read.found)
        )
        self._quotes: Bounded[Key, Quote] = Bounded(
            QUOTES_KEPT_CHARS, lambda quote: len(quote.block)
        )

    def last_prefix(self, key: Key, prefix: tuple[int, int]) -> tuple[int, int] | None:
        """The prefix the conversation's last turn sent (None: not remembered); `prefix` is
        remembered in its place."""
        last = self._prefixes.pop(key)
        self._prefixes.put(key, prefix)
        return last

    def condensed(
        self, key: Key, cached: HistoryEntry | None, messages: Sequence[Message], end: int
    ) -> Condensed:
        """The passages of `messages[:end]`, the turns `cached` condensed: read once per
        extraction and remembered with its chain, since the client resends them with every
        turn and reading them again cost ~4 ms a turn at 2,000 messages. Read afresh, not
        remembered, when no entry vouches for them."""
        if cached is None or cached.historical_end_index != end:
            found = tuple(passages(messages, range(end)))
            return Condensed("", end, found, in_force(found))
        held = self._condensed.get(key)
        if held is not None and held.chain == cached.chain and held.end == end:
            return held
        found = tuple(passages(messages, range(end)))
        return self._condensed.put(key, Condensed(cached.chain, end, found, in_force(found)))

    def quote(
        self, key: Key, prefix: tuple[int, int], client: Sequence[Message], asked: int | None
    ) -> Quote | None:
        """The block quoted before the same user's message on an earlier round, when the
        stand-in and every message from it through that user's message are the same (None:
        pick the quote anew)."""
        held = self._quotes.get(key)
        if held is None or asked is None or held.prefix != prefix or held.asked != asked:
            return None
        return held if said(client, prefix[0], asked) == held.said else None

    def keep_quote(
        self,
        key: Key,
        prefix: tuple[int, int],
        client: Sequence[Message],
        asked: int | None,
        quote: Quote,
    ) -> None:
        """Remember `quote`, picked beside `prefix`, for the rounds that follow the user's
        message at `asked` (a quote before no user's message is forgotten)."""
        self._quotes.pop(key)
        found = None if asked is None else said(client, prefix[0], asked)
        if asked is not None and found is not None:
            self._quotes.put(key, replace(quote, prefix=prefix, asked=asked, said=found))


def said(messages: Sequence[Message], start: int, end: int) -> bytes | None:
    """The sha256 of `messages[start:end + 1]` as JSON (None when they cannot be written)."""
    try:
        return hashlib.sha256(orjson.dumps(list(messages[start : end + 1]))).digest()
    except (orjson.JSONEncodeError, TypeError):
        return None
