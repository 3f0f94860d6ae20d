"""Slots of a derived conversation id: which entry a request uses, where an extraction goes."""

from __future__ import annotations

from typing import Any

import pytest

from kernel.conversation import chain, chain_matches
from kernel.store import DiskHistoryStore, HistoryEntry, StoreError
from kernel.types import RequestContext
from middleware.condensing.slots import SLOTS, look_up, slot_id

pytestmark = pytest.mark.reliability("tenants")

VERSION = "v-test"


def talk(topic: str, turns: int = 6) -> list[dict[str, Any]]:
    """A conversation opening like every other, then about its own topic."""
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Hello"},
    ]
    for turn in range(turns):
        messages += [
            {"role": "assistant", "content": f"reply {turn}"},
            {"role": "user", "content": f"{topic} {turn}"},
        ]
    return messages


def ctx_of(messages: list[dict[str, Any]], hint: str | None = None) -> RequestContext:
    return RequestContext("rid", "acme", opening=messages, conversation_hint=hint)


def entry_of(
    messages: list[dict[str, Any]], slot: str, end: int, created_at: float
) -> HistoryEntry:
    return HistoryEntry(
        tenant="acme", conversation_id=slot, model_id="local", historical_end_index=end,
        message_count=len(messages), extraction=f"notes of {messages[-1]['content']}",
        chain=chain(messages, end, VERSION), prompt_version=VERSION, tokens_before=100,
        tokens_after=10, created_at=created_at,
    )  # fmt: skip


def continues(messages: list[dict[str, Any]]) -> Any:
    return lambda e: chain_matches(messages, e.historical_end_index, VERSION, e.chain)


async def test_a_full_bucket_evicts_the_entry_written_longest_ago(
    store: DiskHistoryStore,
) -> None:
    """A new conversation in a full bucket replaces the least recently written entry only."""
    bucket = ctx_of(talk("t0")).conversation_id
    for index in range(SLOTS):
        messages = talk(f"t{index}")
        age = 10.0 if index == 2 else 100.0 + index
        await store.put(entry_of(messages, slot_id(bucket, index), 8, created_at=age))
    newcomer = talk("new")
    found = await look_up(store, ctx_of(newcomer), continues(newcomer))
    assert found.entry is None
    assert found.slot == slot_id(bucket, 2)
    for index in range(SLOTS):  # each earlier conversation still finds its own slot
        mine = talk(f"t{index}")
        own = await look_up(store, ctx_of(mine), continues(mine))
        assert own.entry is not None
        assert (own.slot, own.entry.extraction) == (slot_id(bucket, index), f"notes of t{index} 5")


async def test_a_request_continuing_two_entries_uses_the_longer(store: DiskHistoryStore) -> None:
    """A branch that went further than the entry it grew from is the one used and rewritten."""
    messages = talk("trip", turns=8)
    bucket = ctx_of(messages).conversation_id
    await store.put(entry_of(messages, bucket, 6, created_at=1.0))
    await store.put(entry_of(messages, slot_id(bucket, 1), 12, created_at=2.0))
    found = await look_up(store, ctx_of(messages), continues(messages))
    assert found.entry is not None
    assert (found.entry.historical_end_index, found.slot) == (12, slot_id(bucket, 1))


async def test_an_empty_first_slot_is_one_read_and_the_next_write_goes_there(
    store: DiskHistoryStore,
) -> None:
    """Nothing cached: one read, and the extraction is stored under the id itself."""
    messages = talk("trip")
    ctx = ctx_of(messages)
    found = await look_up(store, ctx, continues(messages))
    assert (found.entry, found.first, found.slot) == (None, None, ctx.conversation_id)


async def test_a_client_given_id_is_one_entry(store: DiskHistoryStore) -> None:
    """With X-Conversation-Id the client says it is one conversation: no slots are read."""
    ours, theirs = talk("ours"), talk("theirs")
    await store.put(entry_of(ours, "conv-1", 8, created_at=1.0))
    await store.put(entry_of(theirs, "conv-1.1", 8, created_at=1.0))
    found = await look_up(store, ctx_of(theirs, hint="conv-1"), continues(theirs))
    assert found.entry is None
    assert found.first is not None
    assert found.slot == "conv-1"


class FailingStore(DiskHistoryStore):
    async def get(self, tenant: str, conversation_id: str) -> HistoryEntry | None:
        raise StoreError("disk gone")


async def test_a_failing_store_is_a_logged_miss(
    tmp_path: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """A store that cannot be read counts as empty; the request goes on without the cache."""
    store = FailingStore(tmp_path / "s")
    messages = talk("trip")
    try:
        found = await look_up(store, ctx_of(messages), continues(messages))
    finally:
        await store.aclose()
    assert found.entry is None
    assert "history store read failed" in caplog.text
