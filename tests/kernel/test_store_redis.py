"""Tests for kernel.store_redis against a real redis-server on a free loopback port."""

from __future__ import annotations

import asyncio
import logging
import secrets
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from types import SimpleNamespace
from typing import Any, cast

import pytest
import redis.asyncio as redis
from pydantic import SecretStr

from kernel.config import StoreSettings
from kernel.store import StoreError
from kernel.store_redis import RedisHistoryStore, open_redis_store, redact
from tests.kernel.store_contract import CONTRACT, Check, contract_id, make_batches, make_entry
from tests.ports import free_port

LONG_TTL = 3600.0
SHORT_SECONDS = 0.2
POLL_LIMIT_SECONDS = 5.0


StoreFactory = Callable[..., RedisHistoryStore]


@pytest.fixture
async def make_store(redis_url: str) -> AsyncIterator[StoreFactory]:
    """Build stores ("replicas") sharing one fresh key prefix; all closed afterwards."""
    prefix = f"test-{secrets.token_hex(4)}:"
    opened: list[RedisHistoryStore] = []

    def build(**options: Any) -> RedisHistoryStore:
        options.setdefault("key_prefix", prefix)
        options.setdefault("ttl_seconds", LONG_TTL)
        store = RedisHistoryStore(options.pop("url", redis_url), **options)
        opened.append(store)
        return store

    yield build
    for store in opened:
        await store.aclose()


@pytest.fixture
async def store(make_store: StoreFactory) -> RedisHistoryStore:
    """One replica's store under a fresh key prefix."""
    return make_store()


@pytest.fixture
async def raw(redis_url: str) -> AsyncIterator[redis.Redis]:
    """A plain client on the same server, to look at and damage keys."""
    client = redis.Redis.from_url(redis_url)
    yield client
    await client.aclose()


async def eventually(condition: Callable[[], Awaitable[bool]]) -> None:
    """Poll `condition` (no fixed sleep) until it holds; fail after POLL_LIMIT_SECONDS."""
    deadline = time.monotonic() + POLL_LIMIT_SECONDS
    while not await condition():
        assert time.monotonic() < deadline, "condition not met in time"


def closed_port_url(password: str = "s3cret") -> str:
    """A URL with credentials to a loopback port nobody listens on."""
    return f"redis://user:{password}@127.0.0.1:{free_port()}/0"


# --- the shared contract -------------------------------------------------------------------


@pytest.mark.parametrize("check", CONTRACT, ids=contract_id)
async def test_contract(store: RedisHistoryStore, check: Check) -> None:
    """The Redis store keeps every promise of the HistoryStore contract."""
    await check(store)


# --- keys and records ----------------------------------------------------------------------


async def test_keys_are_prefixed_and_tenant_namespaced(
    make_store: StoreFactory, raw: redis.Redis
) -> None:
    """The value is the entry's JSON under `{prefix}h:<len>:<tenant>:<id>`, with a TTL."""
    store = make_store(key_prefix="ns1:")
    await store.put(make_entry(tenant="a:b", conversation_id="c"))
    assert await raw.get("ns1:h:3:a:b:c") == make_entry(tenant="a:b", conversation_id="c").to_json()
    assert 0 < await raw.pttl("ns1:h:3:a:b:c") <= LONG_TTL * 1000
    assert await raw.zrange("ns1:index", 0, -1) == [b"ns1:h:3:a:b:c"]
    await store.clear()


async def test_other_prefix_sees_nothing(make_store: StoreFactory) -> None:
    """Two deployments with different key prefixes on one Redis do not share entries."""
    first, second = make_store(key_prefix="one:"), make_store(key_prefix="two:")
    await first.put(make_entry())
    assert await second.get("acme", "conv-1") is None
    assert await second.entries() == []
    assert await first.clear() == 1


async def test_corrupt_record_is_a_logged_miss_and_deleted(
    store: RedisHistoryStore, raw: redis.Redis, caplog: pytest.LogCaptureFixture
) -> None:
    """A record that does not decode is logged, deleted (and unindexed), and a miss."""
    await store.put(make_entry())
    key = f"{store.key_prefix}h:4:acme:conv-1"
    await raw.set(key, b'{"v": 1, "tenant": ')
    with caplog.at_level(logging.WARNING, logger="overspill.store"):
        assert await store.get("acme", "conv-1") is None
    assert "corrupt history record" in caplog.text
    assert await raw.exists(key) == 0
    assert await raw.zcard(f"{store.key_prefix}index") == 0


async def test_corrupt_batches_are_a_miss_and_deleted(
    store: RedisHistoryStore, raw: redis.Redis
) -> None:
    """Batches that do not validate (an unknown field) are a miss, deleted and unindexed."""
    await store.put_batches(make_batches())
    key = f"{store.key_prefix}d:4:acme:conv-1"
    await raw.set(key, make_batches().to_json().replace(b'"v":1', b'"v":1,"x":2'))
    assert await store.get_batches("acme", "conv-1") is None
    assert await raw.exists(key) == 0
    assert await raw.zcard(f"{store.key_prefix}index") == 0


async def test_batches_are_indexed_and_calibration_expires(
    store: RedisHistoryStore, raw: redis.Redis
) -> None:
    """Batches count against the record bound (indexed); samples carry the TTL."""
    await store.put_batches(make_batches())
    await store.add_calibration("local", 1.1)
    index = await raw.zrange(f"{store.key_prefix}index", 0, -1)
    assert index == [f"{store.key_prefix}d:4:acme:conv-1".encode()]
    assert await raw.pttl(f"{store.key_prefix}c:local") > 0


async def test_record_under_wrong_key_is_a_miss(store: RedisHistoryStore, raw: redis.Redis) -> None:
    """A record whose tenant/id differ from its key is never returned, nor listed."""
    await store.put(make_entry())
    await raw.set(f"{store.key_prefix}h:4:acme:conv-1", make_entry(tenant="evil").to_json())
    assert await store.entries() == []
    assert await store.get("acme", "conv-1") is None


# --- expiry and size -----------------------------------------------------------------------


async def test_entry_expires_after_ttl(make_store: StoreFactory, raw: redis.Redis) -> None:
    """An entry is written with PX ttl; once Redis expires it, get and entries miss it."""
    store = make_store(ttl_seconds=SHORT_SECONDS)
    await store.put(make_entry())
    assert 0 < await raw.pttl(f"{store.key_prefix}h:4:acme:conv-1") <= SHORT_SECONDS * 1000

    async def expired() -> bool:
        return await store.get("acme", "conv-1") is None

    await eventually(expired)
    assert await store.entries() == []


async def test_a_put_drops_index_members_of_expired_records(
    make_store: StoreFactory, raw: redis.Redis
) -> None:
    """entries() lists only live entries; the next put removes the index members whose
    record has expired, so they no longer count against the bound."""
    short, long = make_store(ttl_seconds=SHORT_SECONDS), make_store()
    await short.put(make_entry(conversation_id="gone"))
    await long.put(make_entry(conversation_id="kept"))
    index = f"{long.key_prefix}index"

    async def gone() -> bool:
        return await raw.exists(f"{long.key_prefix}h:4:acme:gone") == 0

    await eventually(gone)
    assert await raw.zcard(index) == 2
    assert [e.conversation_id for e in await long.entries()] == ["kept"]
    await long.put(make_entry(conversation_id="new"))
    members = {f"{long.key_prefix}h:4:acme:{name}".encode() for name in ("kept", "new")}
    assert set(await raw.zrange(index, 0, -1)) == members


async def test_oldest_stored_entries_are_evicted_beyond_max_entries(
    make_store: StoreFactory, raw: redis.Redis
) -> None:
    """Past max_entries, the least recently stored entries go (value and index member)."""
    store = make_store(max_entries=5)
    names = [f"c{9 - index}" for index in range(8)]  # stored in reverse name order
    for name in names[:7]:
        await store.put(make_entry(conversation_id=name))
    await store.put(make_entry(conversation_id=names[2]))  # rewriting makes it the newest
    await store.put(make_entry(conversation_id=names[7]))
    kept = {entry.conversation_id for entry in await store.entries()}
    assert kept == {names[2], *names[4:]}
    assert await raw.zcard(f"{store.key_prefix}index") == 5
    assert await raw.exists(f"{store.key_prefix}h:4:acme:{names[0]}") == 0


async def test_eviction_drops_expired_members_before_live_entries(
    make_store: StoreFactory, raw: redis.Redis
) -> None:
    """An expired entry's index member is the oldest, so eviction takes it, not a live entry."""
    short, bounded = make_store(ttl_seconds=SHORT_SECONDS), make_store(max_entries=2)
    await short.put(make_entry(conversation_id="gone"))
    await bounded.put(make_entry(conversation_id="a"))

    async def gone() -> bool:
        return await raw.exists(f"{bounded.key_prefix}h:4:acme:gone") == 0

    await eventually(gone)
    await bounded.put(make_entry(conversation_id="b"))
    assert [e.conversation_id for e in await bounded.entries()] == ["a", "b"]
    assert await raw.zcard(f"{bounded.key_prefix}index") == 2


# --- the distributed lock ------------------------------------------------------------------


class PollClock:
    """A monotonic clock that reports how often a waiter has looked at it."""

    def __init__(self) -> None:
        self.calls = 0
        self.polled = asyncio.Event()

    def __call__(self) -> float:
        self.calls += 1
        if self.calls >= 2:  # the deadline, then one failed attempt
            self.polled.set()
        return time.monotonic()


async def test_lock_excludes_another_replica(make_store: StoreFactory, raw: redis.Redis) -> None:
    """A second replica enters the same key only after the first leaves (one extraction)."""
    clock = PollClock()
    first, second = make_store(), make_store(monotonic=clock)
    order: list[str] = []

    async def other_replica() -> None:
        async with second.single_flight("acme", "c"):
            order.append("second in")

    async with first.single_flight("acme", "c"):
        order.append("first in")
        assert await raw.exists(f"{first.key_prefix}lock:4:acme:c") == 1
        task = asyncio.create_task(other_replica())
        await clock.polled.wait()
        order.append("first out")
    await asyncio.wait_for(task, POLL_LIMIT_SECONDS)
    assert order == ["first in", "first out", "second in"]
    assert await raw.exists(f"{first.key_prefix}lock:4:acme:c") == 0


async def test_a_holder_that_lost_its_lock_leaves_the_successors_alone(
    make_store: StoreFactory, raw: redis.Redis, caplog: pytest.LogCaptureFixture
) -> None:
    """A holder whose lock vanished (expired, flushed) never removes its successor's lock."""
    lost = make_store(lock_ttl=LONG_TTL)
    survivor = make_store(wait_deadline=POLL_LIMIT_SECONDS)
    lock = f"{lost.key_prefix}lock:4:acme:c"
    held: AbstractAsyncContextManager[None] = lost.single_flight("acme", "c")
    await held.__aenter__()
    assert await raw.delete(lock) == 1  # the lock is gone behind the holder's back
    async with survivor.single_flight("acme", "c"):
        token = await raw.get(lock)
        assert token is not None
        with caplog.at_level(logging.WARNING, logger="overspill.store"):
            await held.__aexit__(None, None, None)  # the first holder comes back late
        assert "expired before release" in caplog.text
        assert await raw.get(lock) == token  # the survivor's lock was not removed
    assert await raw.exists(lock) == 0


async def test_waiter_proceeds_without_lock_after_deadline(
    make_store: StoreFactory, raw: redis.Redis, caplog: pytest.LogCaptureFixture
) -> None:
    """A replica waiting past wait_deadline enters without the lock and logs it."""
    holder = make_store(lock_ttl=LONG_TTL)
    waiter = make_store(wait_deadline=SHORT_SECONDS)
    lock = f"{holder.key_prefix}lock:4:acme:c"
    async with holder.single_flight("acme", "c"):
        token = await raw.get(lock)
        with caplog.at_level(logging.WARNING, logger="overspill.store"):
            async with asyncio.timeout(POLL_LIMIT_SECONDS), waiter.single_flight("acme", "c"):
                assert "proceeding without it" in caplog.text
        assert await raw.get(lock) == token  # the waiter did not release the holder's lock
    assert await raw.exists(lock) == 0


async def test_unreachable_redis_does_not_block_the_flight(
    make_store: StoreFactory, caplog: pytest.LogCaptureFixture
) -> None:
    """When Redis is down the holder proceeds on the in-process lock alone (logged)."""
    store = make_store(url=closed_port_url())
    with caplog.at_level(logging.ERROR, logger="overspill.store"):
        async with asyncio.timeout(POLL_LIMIT_SECONDS), store.single_flight("acme", "c"):
            assert len(store.flights.local) == 1
    assert "lock unavailable" in caplog.text
    assert "s3cret" not in caplog.text


# --- health, errors, configuration ---------------------------------------------------------


async def test_ping_succeeds_on_a_working_server(store: RedisHistoryStore) -> None:
    """ping returns quietly when Redis can be written and read."""
    await store.ping()


async def test_ping_on_closed_port_names_url_without_password(make_store: StoreFactory) -> None:
    """ping raises StoreError naming general_settings.store.url, with the password redacted."""
    store = make_store(url=closed_port_url())
    with pytest.raises(StoreError, match=r"general_settings\.store\.url") as caught:
        await store.ping()
    assert "s3cret" not in str(caught.value)
    assert "user:***@127.0.0.1" in str(caught.value)


async def test_reads_and_writes_on_closed_port_raise_store_error(make_store: StoreFactory) -> None:
    """Every operation maps a connection failure to StoreError."""
    store = make_store(url=closed_port_url())
    calls: list[Callable[[], Awaitable[object]]] = [
        lambda: store.get("acme", "c"),
        lambda: store.put(make_entry()),
        lambda: store.delete("acme", "c"),
        lambda: store.clear(),
        lambda: store.entries("acme"),
    ]
    for call in calls:
        with pytest.raises(StoreError, match="Connection"):
            await call()


def test_bad_url_raises_store_error_without_password() -> None:
    """A URL that is not redis://, rediss:// or unix:// is a StoreError naming the setting."""
    with pytest.raises(StoreError, match=r"general_settings\.store\.url") as caught:
        RedisHistoryStore("http://user:s3cret@example.invalid/")
    assert "s3cret" not in str(caught.value)


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("redis://127.0.0.1:6379/0", "redis://127.0.0.1:6379/0"),
        ("redis://user:pw@host:6379/1", "redis://user:***@host:6379/1"),
        ("rediss://:p%40ss@host", "rediss://:***@host"),
        ("redis://user@host", "redis://user@host"),
        ("unix:///run/redis.sock?db=0&password=pw", "unix:///run/redis.sock?db=0&password=***"),
        ("redis://u:p@ss#w?rd@host/0", "redis://u:***@host/0"),
    ],
)
def test_redact_hides_passwords(url: str, shown: str) -> None:
    """Userinfo and `password=` query passwords are replaced by ***; the rest is kept."""
    assert redact(url) == shown


def test_rejects_non_positive_limits(redis_url: str) -> None:
    """A zero TTL, bound, lock TTL or timeout, or a negative deadline or retry pause, is a
    programming error."""
    for option in ["ttl_seconds", "max_entries", "lock_ttl", "timeout_seconds"]:
        zero: dict[str, Any] = {option: 0}
        with pytest.raises(ValueError, match=option):
            RedisHistoryStore(redis_url, **zero)
    for option in ["wait_deadline", "retry_after"]:
        negative: dict[str, Any] = {option: -1}
        with pytest.raises(ValueError, match=option):
            RedisHistoryStore(redis_url, **negative)


def store_settings(**fields: Any) -> StoreSettings:
    """Settings as the proposed StoreSettings would hold them (backend: redis)."""
    return cast(StoreSettings, SimpleNamespace(backend="redis", **fields))


async def test_open_redis_store_reads_settings(redis_url: str) -> None:
    """open_redis_store takes url, prefix, TTL, bound and lock timings from the settings."""
    settings = store_settings(
        url=SecretStr(redis_url),
        key_prefix="x:",
        ttl_seconds=60.0,
        max_entries=7,
        lock_ttl_seconds=30.0,
        lock_wait_seconds=10.0,
        timeout_seconds=0.5,
        retry_after_seconds=2.0,
    )
    store = open_redis_store(settings)
    try:
        assert (store.key_prefix, store.ttl_seconds, store.max_entries) == ("x:", 60.0, 7)
        assert (store.lock_ttl, store.wait_deadline) == (30.0, 10.0)
        assert (store.timeout_seconds, store.retry_after) == (0.5, 2.0)
        await store.ping()
    finally:
        await store.aclose()


async def test_open_redis_store_derives_bound_from_size_limit(redis_url: str) -> None:
    """Without max_entries, the bound is size_limit_bytes over a typical 32 KiB entry."""
    store = open_redis_store(store_settings(url=redis_url, size_limit_bytes=64 << 20))
    try:
        assert store.max_entries == 2048
        assert store.key_prefix == "overspill:"
    finally:
        await store.aclose()


def test_open_redis_store_requires_url() -> None:
    """A redis backend without url is a StoreError naming general_settings.store.url."""
    with pytest.raises(StoreError, match=r"general_settings\.store\.url is required"):
        open_redis_store(store_settings(url=None))
    with pytest.raises(StoreError, match=r"general_settings\.store: ttl_seconds"):
        open_redis_store(store_settings(url="redis://h", ttl_seconds=0))


async def test_aclose_twice_is_harmless(store: RedisHistoryStore) -> None:
    """Closing an already closed store does nothing."""
    await store.ping()
    await store.aclose()
    await store.aclose()
