"""Behaviour every HistoryStore backend shares, as checks to parametrise a backend's tests with.

Use: ``@pytest.mark.parametrize("check", CONTRACT, ids=contract_id)`` on a test that awaits
``check(store)`` with a fresh, empty store whose TTL is long enough not to expire during a test.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from kernel.spending import Tally
from kernel.store import (
    CALIBRATION_SAMPLES,
    DocumentBatches,
    HistoryEntry,
    HistoryStore,
    StoredBatch,
    StoredResponse,
    StoreError,
)

Check = Callable[[HistoryStore], Awaitable[None]]


def make_entry(**changes: Any) -> HistoryEntry:
    """A valid entry with some fields changed."""
    fields: dict[str, Any] = {
        "tenant": "acme",
        "conversation_id": "conv-1",
        "model_id": "gpt-4o",
        "historical_end_index": 8,
        "message_count": 12,
        "extraction": "The user is planning a trip to Lisbon.",
        "chain": "ab" * 32,
        "prompt_version": "extract-v1",
        "tokens_before": 9000,
        "tokens_after": 1200,
        "created_at": 1_700_000_000.0,
    }
    fields.update(changes)
    return HistoryEntry(**fields)


async def put_then_get(store: HistoryStore) -> None:
    """A written entry is read back equal; a later put replaces it."""
    await store.put(make_entry(extraction="naïve — 🚀"))
    assert await store.get("acme", "conv-1") == make_entry(extraction="naïve — 🚀")
    await store.put(make_entry(historical_end_index=10))
    found = await store.get("acme", "conv-1")
    assert found is not None
    assert found.historical_end_index == 10


async def missing_entry_is_none(store: HistoryStore) -> None:
    """An unknown conversation is a miss."""
    assert await store.get("acme", "nope") is None


async def other_tenant_cannot_read_entry(store: HistoryStore) -> None:
    """get with another tenant returns None, even when tenant and id share a colon."""
    await store.put(make_entry(tenant="a:b", conversation_id="c"))
    assert await store.get("other", "c") is None
    assert await store.get("a", "b:c") is None
    assert await store.get("a:b", "c") is not None
    assert await store.entries("a") == []


async def glob_characters_are_literal(store: HistoryStore) -> None:
    """Tenants with pattern characters (`*`, `?`, `[`) list and clear only their own entries."""
    for tenant in ["t*", "t?", "t[x]", "tx", "t\\"]:
        await store.put(make_entry(tenant=tenant))
    assert [e.tenant for e in await store.entries("t*")] == ["t*"]
    assert [e.tenant for e in await store.entries("t[x]")] == ["t[x]"]
    assert await store.clear("t?") == 1
    assert await store.clear("t\\") == 1
    assert sorted(e.tenant for e in await store.entries()) == ["t*", "t[x]", "tx"]


async def failed_serialisation_keeps_previous_entry(store: HistoryStore) -> None:
    """An entry that cannot be serialised raises StoreError and leaves the old one."""
    await store.put(make_entry())
    with pytest.raises(StoreError, match="cannot serialise"):
        await store.put(make_entry(extraction="lone surrogate \ud800"))
    assert await store.get("acme", "conv-1") == make_entry()


async def delete_reports_whether_entry_existed(store: HistoryStore) -> None:
    """delete removes the entry and says True; a second delete says False."""
    await store.put(make_entry())
    assert await store.delete("acme", "conv-1") is True
    assert await store.get("acme", "conv-1") is None
    assert await store.delete("acme", "conv-1") is False


async def clear_and_entries_by_tenant(store: HistoryStore) -> None:
    """clear(tenant) removes only that tenant's entries; entries() lists them sorted."""
    for tenant, conv in [("acme", "b"), ("acme", "a"), ("acme2", "a"), ("zeta", "x")]:
        await store.put(make_entry(tenant=tenant, conversation_id=conv))
    listed = [(e.tenant, e.conversation_id) for e in await store.entries("acme")]
    assert listed == [("acme", "a"), ("acme", "b")]
    assert len(await store.entries()) == 4
    assert await store.clear("acme") == 2
    assert [e.tenant for e in await store.entries()] == ["acme2", "zeta"]
    assert await store.clear() == 2
    assert await store.entries() == []


async def clear_all_keeps_readiness_working(store: HistoryStore) -> None:
    """clear() counts only history entries, not the readiness key."""
    await store.ping()
    await store.put(make_entry())
    assert await store.clear() == 1
    await store.ping()


async def same_key_holders_serialise(store: HistoryStore) -> None:
    """A second holder of the same key enters only after the first leaves."""
    order: list[str] = []
    second_waiting = asyncio.Event()

    async def second() -> None:
        second_waiting.set()
        async with store.single_flight("acme", "c"):
            order.append("second in")

    async with store.single_flight("acme", "c"):
        order.append("first in")
        task = asyncio.create_task(second())
        await second_waiting.wait()
        order.append("first out")
    await task
    assert order == ["first in", "first out", "second in"]


async def different_keys_do_not_block(store: HistoryStore) -> None:
    """Holders of different keys (or tenants) run at the same time."""
    inside = asyncio.Event()

    async def other(tenant: str, conv: str) -> None:
        async with store.single_flight(tenant, conv):
            inside.set()

    async with asyncio.timeout(5), store.single_flight("acme", "c"):
        for tenant, conv in [("acme", "d"), ("beta", "c"), ("acme:c", ""), ("", "acme:c")]:
            inside.clear()
            task = asyncio.create_task(other(tenant, conv))
            await inside.wait()
            await task


async def holder_errors_and_cancelled_waiters_leave_no_lock(store: HistoryStore) -> None:
    """A holder that raises or a waiter that is cancelled leaves the key free for the next."""
    waiting = asyncio.Event()

    async def waiter() -> None:
        waiting.set()
        async with store.single_flight("acme", "c"):
            pytest.fail("a cancelled waiter must not enter")

    async def hold_then_fail() -> None:
        async with store.single_flight("acme", "c"):
            task = asyncio.create_task(waiter())
            await waiting.wait()
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            raise RuntimeError("boom")

    with pytest.raises(RuntimeError, match="boom"):
        await hold_then_fail()
    async with asyncio.timeout(5), store.single_flight("acme", "c"):
        pass


async def flight_busy_while_held(store: HistoryStore) -> None:
    """flight_busy is true exactly while the key's flight is held, and only for that key."""
    assert not await store.flight_busy("acme", "c")
    async with store.single_flight("acme", "c"):
        assert await store.flight_busy("acme", "c")
        assert not await store.flight_busy("acme", "d")
        assert not await store.flight_busy("beta", "c")
    assert not await store.flight_busy("acme", "c")


def make_batches(
    tenant: str = "acme", conversation_id: str = "conv-1", n: int = 2
) -> DocumentBatches:
    """Valid document batches for a conversation."""
    batches = tuple(
        StoredBatch(
            position=2 * i + 1,
            prefix=f"{i:064x}",
            message={"role": "user", "content": f"<<<New content\n--- DOCUMENT ---\nid: d{i}"},
            condensed=i == 0,
        )
        for i in range(n)
    )
    return DocumentBatches(
        tenant=tenant, conversation_id=conversation_id, batches=batches, created_at=1.5
    )


async def batches_round_trip(store: HistoryStore) -> None:
    """Written batches are read back equal, beside the entry of the same conversation."""
    await store.put(make_entry())
    await store.put_batches(make_batches())
    assert await store.get_batches("acme", "conv-1") == make_batches()
    assert await store.get("acme", "conv-1") == make_entry()
    await store.put_batches(make_batches(n=3))
    found = await store.get_batches("acme", "conv-1")
    assert found is not None
    assert len(found.batches) == 3


async def batches_belong_to_their_tenant(store: HistoryStore) -> None:
    """Another tenant (even one sharing a colon) never reads a conversation's batches."""
    await store.put_batches(make_batches(tenant="a:b", conversation_id="c"))
    assert await store.get_batches("a", "b:c") is None
    assert await store.get_batches("other", "c") is None
    assert await store.get_batches("a:b", "c") is not None
    assert await store.get_batches("a:b", "nope") is None


async def delete_removes_both_kinds(store: HistoryStore) -> None:
    """Forgetting a conversation forgets its extraction and its document batches."""
    await store.put(make_entry())
    await store.put_batches(make_batches())
    assert await store.delete("acme", "conv-1") is True
    assert await store.get("acme", "conv-1") is None
    assert await store.get_batches("acme", "conv-1") is None
    await store.put_batches(make_batches())
    assert await store.delete("acme", "conv-1") is True
    assert await store.delete("acme", "conv-1") is False


async def clear_counts_both_kinds_per_tenant(store: HistoryStore) -> None:
    """clear(tenant) removes that tenant's entries and batches, and counts every record."""
    await store.put(make_entry())
    await store.put_batches(make_batches())
    await store.put_batches(make_batches(conversation_id="conv-2"))
    await store.put_batches(make_batches(tenant="zeta"))
    assert await store.clear("acme") == 3
    assert await store.get_batches("acme", "conv-2") is None
    assert await store.get_batches("zeta", "conv-1") is not None
    assert await store.clear() == 1


async def calibration_is_newest_first_and_capped(store: HistoryStore) -> None:
    """Samples come back newest first, at most CALIBRATION_SAMPLES, per model."""
    assert await store.calibration("local") == ()
    for index in range(CALIBRATION_SAMPLES + 4):
        await store.add_calibration("local", 1.0 + index / 100)
    found = await store.calibration("local")
    assert len(found) == CALIBRATION_SAMPLES
    assert found[0] == 1.0 + (CALIBRATION_SAMPLES + 3) / 100
    assert list(found) == sorted(found, reverse=True)
    assert await store.calibration("other") == ()


async def concurrent_calibration_samples_all_land(store: HistoryStore) -> None:
    """Samples recorded at once from many tasks are all kept (up to the cap)."""
    ratios = [1.0 + i / 1000 for i in range(CALIBRATION_SAMPLES)]
    await asyncio.gather(*(store.add_calibration("m", ratio) for ratio in ratios))
    assert sorted(await store.calibration("m")) == ratios


async def calibration_survives_clearing_conversations(store: HistoryStore) -> None:
    """Forgetting conversations does not forget what was learned about a model."""
    await store.add_calibration("local", 1.2)
    await store.put(make_entry())
    await store.clear()
    assert await store.calibration("local") == (1.2,)


async def identical_openings_keep_their_own_extraction(store: HistoryStore) -> None:
    """Two conversations with one system prompt and first message, both compacted, each keep
    their own extraction over several turns: no cross-use, no eviction ping-pong."""
    from tests.kernel.slot_conversations import two_conversations_in_one_bucket

    await two_conversations_in_one_bucket(store)


async def usage_adds_up_per_tenant_day_and_model(store: HistoryStore) -> None:
    """Own-call counts add up per (tenant, day, model), concurrent adds included, and a
    tenant's usage is read back for the days asked only."""
    one = Tally(calls=1, failed=0, prompt_tokens=100, completion_tokens=10)
    await asyncio.gather(*(store.add_usage("acme", "2026-01-02", "m", one, 3600) for _ in range(8)))
    await store.add_usage("acme", "2026-01-02", "other:model", Tally(1, 1, 50, 0), 3600)
    await store.add_usage("acme", "2026-01-03", "m", one, 3600)
    rows = await store.usage("acme", ["2026-01-02"])
    found = {(row.day, row.model): row.tally for row in rows}
    assert found == {
        ("2026-01-02", "m"): Tally(8, 0, 800, 80),
        ("2026-01-02", "other:model"): Tally(1, 1, 50, 0),
    }
    assert {row.day for row in await store.usage("acme", ["2026-01-02", "2026-01-03"])} == {
        "2026-01-02",
        "2026-01-03",
    }


async def usage_belongs_to_its_tenant(store: HistoryStore) -> None:
    """A tenant reads only its own usage; every tenant's is listed with its name; clearing
    conversations keeps usage (it is accounting)."""
    await store.add_usage("a:b", "2026-01-02", "m", Tally(1, 0, 10, 1), 3600)
    await store.add_usage("a", "2026-01-02", "m", Tally(2, 0, 20, 2), 3600)
    assert [row.tally.calls for row in await store.usage("a", ["2026-01-02"])] == [2]
    every = await store.usage(None, ["2026-01-02"])
    assert sorted((row.tenant, row.tally.calls) for row in every) == [("a", 2), ("a:b", 1)]
    await store.clear()
    assert len(await store.usage(None, ["2026-01-02"])) == 2
    assert await store.usage("nobody", ["2026-01-02"]) == []


def make_response(**changes: Any) -> StoredResponse:
    """A valid Responses API record with some fields changed."""
    fields: dict[str, Any] = {
        "tenant": "acme",
        "conversation_id": "resp_root",
        "id": "resp_1",
        "previous_response_id": None,
        "created_at": 1_700_000_000.0,
        "input": ({"type": "message", "role": "user", "content": "Where is Lisbon?"},),
        "response": {"id": "resp_1", "object": "response", "output": []},
    }
    fields.update(changes)
    return StoredResponse(**fields)


async def responses_round_trip_per_tenant(store: HistoryStore) -> None:
    """A response record is read back equal by its tenant only, and deleted once."""
    await store.put_response(make_response(tenant="a:b", id="c"))
    assert await store.get_response("a:b", "c") == make_response(tenant="a:b", id="c")
    assert await store.get_response("a", "b:c") is None
    assert await store.get_response("other", "c") is None
    assert await store.delete_response("other", "c") is False
    assert await store.delete_response("a:b", "c") is True
    assert await store.get_response("a:b", "c") is None


async def responses_read_in_one_batch_in_order(store: HistoryStore) -> None:
    """Several responses are read in the order asked, a miss or another tenant's as None."""
    for name in ("r1", "r2", "r3"):
        await store.put_response(make_response(id=name, ancestors=("r0",)))
    await store.put_response(make_response(tenant="beta", id="r4"))
    found = await store.get_responses("acme", ["r3", "nope", "r1", "r4"])
    assert [r.id if r else None for r in found] == ["r3", None, "r1", None]
    assert found[0] is not None
    assert found[0].ancestors == ("r0",)


async def clear_removes_a_tenants_responses(store: HistoryStore) -> None:
    """Clearing a tenant removes its response records too, and no other tenant's."""
    await store.put_response(make_response(tenant="acme", id="r1"))
    await store.put_response(make_response(tenant="beta", id="r1"))
    assert await store.clear("acme") == 1
    assert await store.get_response("acme", "r1") is None
    assert await store.get_response("beta", "r1") is not None


CONTRACT: list[Check] = [
    usage_adds_up_per_tenant_day_and_model,
    usage_belongs_to_its_tenant,
    responses_round_trip_per_tenant,
    responses_read_in_one_batch_in_order,
    clear_removes_a_tenants_responses,
    identical_openings_keep_their_own_extraction,
    flight_busy_while_held,
    batches_round_trip,
    batches_belong_to_their_tenant,
    delete_removes_both_kinds,
    clear_counts_both_kinds_per_tenant,
    calibration_is_newest_first_and_capped,
    concurrent_calibration_samples_all_land,
    calibration_survives_clearing_conversations,
    put_then_get,
    missing_entry_is_none,
    other_tenant_cannot_read_entry,
    glob_characters_are_literal,
    failed_serialisation_keeps_previous_entry,
    delete_reports_whether_entry_existed,
    clear_and_entries_by_tenant,
    clear_all_keeps_readiness_working,
    same_key_holders_serialise,
    different_keys_do_not_block,
    holder_errors_and_cancelled_waiters_leave_no_lock,
]


def contract_id(check: Check) -> str:
    """The check's name, as a test id."""
    return getattr(check, "__name__", repr(check))
