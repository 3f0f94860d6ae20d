"""The Redis store on a Redis Cluster (3 primaries, 3 replicas) and behind Sentinels (1 primary,
1 replica, 3 Sentinels): real servers from Debian's redis-server, started by the tests."""

from __future__ import annotations

import asyncio
import logging
import secrets
import signal
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import contextmanager
from types import SimpleNamespace
from typing import Any, cast

import pytest

from kernel.config import StoreSettings
from kernel.records import DOCUMENTS, EXTRACTIONS, StoreError
from kernel.redis_keys import CLUSTER_BUCKETS
from kernel.store_redis import RedisHistoryStore, open_redis_store
from tests.kernel.store_contract import CONTRACT, Check, contract_id, make_batches, make_entry
from tests.redis_ha import ClusterSet, Deployment

LONG_TTL = 3600.0
SHORT_TTL = 0.3
CALL_SECONDS = 10.0
"""The stores' call timeout: far above a call's time on a busy machine (a cluster client's
first call learns the cluster's layout: ~0.1-0.3 s on a 2-core box under load)."""
POLL_LIMIT_SECONDS = 30.0
"""The outer bound on waiting for a real deployment (a failover takes a few seconds)."""

StoreFactory = Callable[..., RedisHistoryStore]


@pytest.fixture(params=["cluster", "sentinel"])
def deployment(request: pytest.FixtureRequest) -> Deployment:
    """The session's cluster or Sentinel set."""
    found: Deployment = request.getfixturevalue(f"redis_{request.param}")
    return found


@pytest.fixture
async def opened() -> AsyncIterator[list[RedisHistoryStore]]:
    """Stores the test opens, all closed at its end."""
    stores: list[RedisHistoryStore] = []
    yield stores
    for store in stores:
        await store.aclose()


def factory(opened: list[RedisHistoryStore], url: str) -> StoreFactory:
    """Build stores ("replicas") on one deployment under one fresh key prefix."""
    prefix = f"test-{secrets.token_hex(4)}:"

    def build(**options: Any) -> RedisHistoryStore:
        options.setdefault("key_prefix", prefix)
        options.setdefault("ttl_seconds", LONG_TTL)
        options.setdefault("timeout_seconds", CALL_SECONDS)
        store = RedisHistoryStore(url, **options)
        opened.append(store)
        return store

    return build


@pytest.fixture
def make_store(deployment: Deployment, opened: list[RedisHistoryStore]) -> StoreFactory:
    """Stores on the session's cluster or Sentinel set."""
    return factory(opened, deployment.url)


async def eventually(condition: Callable[[], Awaitable[bool]]) -> float:
    """Poll `condition` until it holds (fail after POLL_LIMIT_SECONDS); the seconds it took."""
    started = time.monotonic()
    while not await condition():
        assert time.monotonic() - started < POLL_LIMIT_SECONDS, "condition not met in time"
        await asyncio.sleep(0.02)  # polling real servers, not a test sleep
    return time.monotonic() - started


@contextmanager
def stopped(deployment: Deployment, ports: list[int]) -> Iterator[None]:
    """The given nodes SIGSTOPped for the block (a replica that acknowledges nothing)."""
    for port in ports:
        deployment.process(port).send_signal(signal.SIGSTOP)
    try:
        yield
    finally:
        for port in ports:
            deployment.process(port).send_signal(signal.SIGCONT)


# --- the shared contract -------------------------------------------------------------------


@pytest.mark.parametrize("check", CONTRACT, ids=contract_id)
async def test_contract(make_store: StoreFactory, check: Check) -> None:
    """The store keeps every promise of the HistoryStore contract on a cluster and behind
    Sentinels."""
    await check(make_store())


# --- keys, listing, retention in a cluster -------------------------------------------------


async def test_a_conversations_keys_share_one_slot(
    redis_cluster: ClusterSet, opened: list[RedisHistoryStore]
) -> None:
    """Both kinds of record, the lock and the bucket's index of one conversation (braces in
    its id included) hash to one slot, so one script can fence a write and evict."""
    store = factory(opened, redis_cluster.url)()
    tenant, conversation = "a:b", "c{x}y}"
    await store.put(make_entry(tenant=tenant, conversation_id=conversation))
    await store.put_batches(make_batches(tenant=tenant, conversation_id=conversation))
    layout = store.layout
    keys = [
        layout.record(EXTRACTIONS, tenant, conversation),
        layout.record(DOCUMENTS, tenant, conversation),
        layout.lock(tenant, conversation),
        layout.index(layout.bucket(tenant, conversation)),
    ]
    with redis_cluster.client() as raw:
        assert len({raw.keyslot(key) for key in keys}) == 1
        async with store.single_flight(tenant, conversation):
            assert all(raw.exists(key) for key in keys)
    assert await store.get(tenant, conversation) is not None


async def test_listing_and_clearing_reach_every_primary(
    redis_cluster: ClusterSet, opened: list[RedisHistoryStore]
) -> None:
    """Conversations spread over all three primaries; entries() lists every one, clear(tenant)
    removes that tenant's on every primary and no other's."""
    store = factory(opened, redis_cluster.url)()
    names = [(tenant, f"conv-{i}") for tenant in ("t1", "t2") for i in range(60)]
    await asyncio.gather(*(store.put(make_entry(tenant=t, conversation_id=c)) for t, c in names))
    await store.put_batches(make_batches(tenant="t1", conversation_id="conv-0"))
    primaries = {redis_cluster.primary_of(store.layout.record(EXTRACTIONS, *n)) for n in names}
    assert primaries == set(redis_cluster.primaries())
    listed = [(entry.tenant, entry.conversation_id) for entry in await store.entries()]
    assert listed == sorted(names)
    assert len(await store.entries("t1")) == 60
    assert await store.clear("t1") == 61
    assert {entry.tenant for entry in await store.entries()} == {"t2"}
    assert await store.get_batches("t1", "conv-0") is None


async def test_the_size_bound_holds_in_a_cluster(
    redis_cluster: ClusterSet, opened: list[RedisHistoryStore]
) -> None:
    """With max_entries at its cluster minimum (one record per bucket), 2,500 writes leave at
    most that many records, and each bucket keeps the one written last."""
    store = factory(opened, redis_cluster.url)(max_entries=CLUSTER_BUCKETS)
    last: dict[int, str] = {}
    names = [f"c{i}" for i in range(2500)]
    for start in range(0, len(names), 100):
        chunk = names[start : start + 100]
        await asyncio.gather(*(store.put(make_entry(conversation_id=name)) for name in chunk))
        for name in chunk:
            last[store.layout.bucket("acme", name)] = name
    kept = {entry.conversation_id for entry in await store.entries()}
    assert len(kept) <= CLUSTER_BUCKETS
    assert kept == set(last.values())


def test_a_cluster_bound_below_its_buckets_is_refused() -> None:
    """max_entries (or size_limit_bytes) that cannot give every bucket a record is refused at
    startup, naming the setting."""
    settings = SimpleNamespace(backend="redis", url="redis+cluster://127.0.0.1:1", max_entries=100)
    with pytest.raises(StoreError, match=r"general_settings\.store: max_entries must be at least"):
        open_redis_store(cast(StoreSettings, settings))


async def test_each_kind_keeps_its_own_ttl(make_store: StoreFactory) -> None:
    """Document batches and calibration expire after their own TTL; the extraction stays."""
    store = make_store(ttl_by_kind={"documents": SHORT_TTL, "calibration": SHORT_TTL})
    await store.put(make_entry())
    await store.put_batches(make_batches())
    await store.add_calibration("local", 1.2)

    async def expired() -> bool:
        gone = await store.get_batches("acme", "conv-1") is None
        return gone and await store.calibration("local") == ()

    await eventually(expired)
    assert await store.get("acme", "conv-1") == make_entry()


# --- the lock waits for a replica ----------------------------------------------------------


async def test_a_lock_is_held_once_a_replica_has_it(
    deployment: Deployment, make_store: StoreFactory, caplog: pytest.LogCaptureFixture
) -> None:
    """With its replica up the lock is taken quietly; with the replica stopped, the holder waits
    for it at most 100 ms, logs that only the primary holds the lock, and holds it."""
    holder, other = make_store(), make_store()
    with caplog.at_level(logging.WARNING, logger="overspill.store"):
        async with holder.single_flight("acme", "c"):
            assert await other.flight_busy("acme", "c")
        assert "held on the primary only" not in caplog.text
        replicas = deployment.replicas_of(holder.layout.lock("acme", "c"))
        with stopped(deployment, replicas):
            async with asyncio.timeout(POLL_LIMIT_SECONDS), holder.single_flight("acme", "c"):
                assert await other.flight_busy("acme", "c")
    assert "held on the primary only: 0 of 1 replicas acknowledged it within 100 ms" in caplog.text


# --- failover ------------------------------------------------------------------------------


async def hold_until(
    store: RedisHistoryStore, conversation: str, entered: asyncio.Event, leave: asyncio.Event
) -> str | None:
    """Hold a conversation's flight until `leave`; the lock's token (None: held without it)."""
    async with store.single_flight("acme", conversation):
        hold = store.flights.fence("acme", conversation)
        entered.set()
        await leave.wait()
    return None if hold is None else hold.token


def on_one_primary(deployment: Deployment, store: RedisHistoryStore, count: int) -> list[str]:
    """`count` conversation ids whose keys the same primary serves."""
    first = deployment.primary_of(store.layout.lock("acme", "conv-0"))
    found = [f"conv-{i}" for i in range(1000)]
    return [c for c in found if deployment.primary_of(store.layout.lock("acme", c)) == first][
        :count
    ]


@pytest.mark.parametrize("kind", ["cluster", "sentinel"])
async def test_a_failover_keeps_the_records_and_the_flights(
    kind: str,
    request: pytest.FixtureRequest,
    opened: list[RedisHistoryStore],
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The primary of a conversation killed while its lock is held: the records written before
    are whole on the new primary, the lock still holds its holder's token, a holder that left
    during the outage has its release retried until it sticks, a flight entered during the
    outage waits for the new primary and holds its lock there, and the store is used again
    (the time is printed)."""
    deployment: Deployment = request.getfixturevalue(f"own_{kind}")
    build = factory(opened, deployment.url)
    options = {"timeout_seconds": 2.0, "retry_after": 0.2, "lock_ttl": LONG_TTL}
    holder, waiter = build(**options), build(**options)
    kept, left, late = on_one_primary(deployment, holder, 3)
    locks = {name: holder.layout.lock("acme", name) for name in (kept, left, late)}
    await holder.put(make_entry(conversation_id=kept))
    await holder.put_batches(make_batches(conversation_id=kept))
    events = {name: (asyncio.Event(), asyncio.Event()) for name in (kept, left, late)}
    tasks = {
        name: asyncio.create_task(hold_until(holder, name, *events[name])) for name in (kept, left)
    }
    for name in (kept, left):
        await events[name][0].wait()
    with deployment.client() as raw:  # acknowledged and on a replica: a failover keeps them
        record = holder.layout.record(EXTRACTIONS, "acme", kept)
        assert raw.exists(record, locks[kept], locks[left]) == 3
    with caplog.at_level(logging.INFO, logger="overspill.store"):
        deployment.kill(deployment.primary_of(locks[kept]))
        killed = time.monotonic()
        events[left][1].set()  # this holder leaves while the primary is gone
        tasks[late] = asyncio.create_task(hold_until(waiter, late, *events[late]))

        async def answers() -> bool:
            try:
                return await holder.get("acme", kept) == make_entry(conversation_id=kept)
            except StoreError:
                return False

        await eventually(answers)
        used_again = time.monotonic() - killed
        await events[late][0].wait()
        with deployment.client() as raw:
            token_after = raw.get(locks[kept])
            assert raw.exists(locks[late]) == 1

            async def released() -> bool:
                return int(raw.exists(locks[left])) == 0

            await eventually(released)  # long before its lock_ttl (an hour) would expire it
        assert await holder.get_batches("acme", kept) == make_batches(conversation_id=kept)
        for name in (kept, late):
            events[name][1].set()
        tokens = {name: await task for name, task in tasks.items()}
    assert all(tokens.values()), f"a flight went on without its lock: {tokens}"
    assert token_after == (tokens[kept] or "").encode()
    assert "proceeding without it" not in caplog.text
    assert "single-flight lock lost" not in caplog.text
    print(f"\n{kind}: the store was used again {used_again:.1f} s after its primary was killed")
