"""What the splice remembers per conversation: the last prefix, the condensed turns' passages
for one extraction, the quote for the turns through one user's message."""

from __future__ import annotations

import time

from kernel.store import HistoryEntry
from kernel.types import Message
from middleware.layers.splice_memory import PREFIXES_KEPT, Quote, SpliceMemory

TURNS: list[Message] = [
    {"role": "user", "content": "The ferry to the island leaves from pier three."},
    {"role": "assistant", "content": "Pier three, noted."},
    {"role": "user", "content": "When does the ferry leave?"},
]
KEY = ("tenant", "conversation")


def entry(chain: str, end: int = 2) -> HistoryEntry:
    tenant, conversation_id = KEY
    return HistoryEntry(
        tenant=tenant, conversation_id=conversation_id, model_id="m", historical_end_index=end,
        message_count=end, extraction="x", chain=chain, prompt_version="p", tokens_before=1,
        tokens_after=1, created_at=time.time(),
    )  # fmt: skip


def test_the_last_prefix_is_told_and_replaced_and_few_are_kept() -> None:
    """Each turn learns the prefix the last one sent; past PREFIXES_KEPT the oldest is gone."""
    memory = SpliceMemory()
    assert memory.last_prefix(KEY, (2, 3)) is None
    assert memory.last_prefix(KEY, (4, 5)) == (2, 3)
    for n in range(PREFIXES_KEPT):
        memory.last_prefix(("tenant", str(n)), (1, 1))
    assert memory.last_prefix(KEY, (4, 5)) is None


def test_the_condensed_turns_are_read_once_per_extraction() -> None:
    """The same chain reuses what was read; a new chain, or no entry, reads the turns again."""
    memory = SpliceMemory()
    first = memory.condensed(KEY, entry("a"), TURNS, 2)
    assert memory.condensed(KEY, entry("a"), TURNS, 2) is first
    assert [p.text for p in first.found] == [m["content"] for m in TURNS[:2]]
    assert memory.condensed(KEY, entry("b"), TURNS, 2) is not first
    assert memory.condensed(KEY, None, TURNS, 2).chain == ""


def test_a_quote_is_sent_again_only_for_the_same_turns_through_the_question() -> None:
    """A kept quote comes back for the same stand-in, question and turns; any change drops it."""
    memory = SpliceMemory()
    memory.keep_quote(KEY, (2, 2), TURNS, 2, Quote("quoted", 3, 1))
    kept = memory.quote(KEY, (2, 2), TURNS, 2)
    assert kept is not None
    assert (kept.block, kept.asked) == ("quoted", 2)
    edited = [*TURNS[:2], {"role": "user", "content": "Where does the ferry leave from?"}]
    assert memory.quote(KEY, (2, 2), edited, 2) is None
    assert memory.quote(KEY, (3, 3), TURNS, 2) is None
    memory.keep_quote(KEY, (2, 2), TURNS, None, Quote("other", 3, 1))
    assert memory.quote(KEY, (2, 2), TURNS, 2) is None
