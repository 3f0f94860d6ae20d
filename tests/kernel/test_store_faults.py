"""The store under faults: a stalled or dead Redis, a lock held past its TTL, a lost lock,
and writers killed with SIGKILL mid-write (diskcache and Redis)."""

from __future__ import annotations

import asyncio
import logging
import os
import random
import secrets
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager
from pathlib import Path

import pytest
import redis.asyncio as redis

from kernel.store import DiskHistoryStore, HistoryStore, StoreError
from kernel.store_redis import RedisHistoryStore
from tests.crash_writer import expected, is_whole
from tests.kernel.store_contract import make_entry
from tests.redis_server import port_of, redis_process
from tests.reliability import examples

ROOT = Path(__file__).resolve().parents[2]
DEADLINE_SECONDS = 10.0
"""The outer bound of every wait on a real process: far above any bound under test."""
STALL_TIMEOUT = 0.2
SHORT_TTL = 0.3

store_mark = pytest.mark.reliability("store")
crash_mark = pytest.mark.reliability("crash")


@pytest.fixture
async def stores() -> AsyncIterator[list[RedisHistoryStore]]:
    """Stores the test opens, all closed at its end."""
    opened: list[RedisHistoryStore] = []
    yield opened
    for store in opened:
        await store.aclose()


def open_store(opened: list[RedisHistoryStore], url: str, **options: float) -> RedisHistoryStore:
    store = RedisHistoryStore(url, key_prefix=f"t-{secrets.token_hex(4)}:", **options)  # type: ignore[arg-type]
    opened.append(store)
    return store


# --- bounded time: a stalled or dead Redis -------------------------------------------------


@store_mark
async def test_a_stalled_redis_fails_a_call_within_the_timeout_then_at_once(
    own_redis: tuple[subprocess.Popen[str], str], stores: list[RedisHistoryStore]
) -> None:
    """SIGSTOPped Redis: the first call fails after timeout_seconds, the next ones at once."""
    process, url = own_redis
    store = open_store(stores, url, timeout_seconds=STALL_TIMEOUT, retry_after=3600)
    await store.put(make_entry())
    process.send_signal(signal.SIGSTOP)
    try:
        async with asyncio.timeout(DEADLINE_SECONDS):
            with pytest.raises(StoreError, match=r"no answer within 0\.2 s"):
                await store.get("acme", "conv-1")
            for call in (store.get("acme", "conv-1"), store.put(make_entry()), store.ping()):
                with pytest.raises(StoreError, match="is unavailable"):
                    await call
    finally:
        process.send_signal(signal.SIGCONT)


@store_mark
async def test_redis_is_used_again_once_it_answers(
    own_redis: tuple[subprocess.Popen[str], str],
    stores: list[RedisHistoryStore],
    caplog: pytest.LogCaptureFixture,
) -> None:
    """After a stall ends, the next call past retry_after reaches Redis again (logged)."""
    process, url = own_redis
    store = open_store(stores, url, timeout_seconds=STALL_TIMEOUT, retry_after=0)
    await store.put(make_entry())
    process.send_signal(signal.SIGSTOP)
    with caplog.at_level(logging.INFO, logger="overspill.store"):
        try:
            with pytest.raises(StoreError):
                await store.get("acme", "conv-1")
        finally:
            process.send_signal(signal.SIGCONT)
        assert await store.get("acme", "conv-1") == make_entry()
    assert "history store unavailable" in caplog.text
    assert "history store reachable again" in caplog.text


@store_mark
async def test_a_killed_redis_is_a_store_error_at_once(
    own_redis: tuple[subprocess.Popen[str], str], stores: list[RedisHistoryStore]
) -> None:
    """Redis killed: reads, writes and the lock fail fast; the flight proceeds without Redis."""
    process, url = own_redis
    store = open_store(stores, url, timeout_seconds=STALL_TIMEOUT, retry_after=3600)
    await store.put(make_entry())
    process.kill()
    process.wait(timeout=DEADLINE_SECONDS)
    async with asyncio.timeout(DEADLINE_SECONDS):
        with pytest.raises(StoreError):
            await store.get("acme", "conv-1")
        async with store.single_flight("acme", "conv-1"):
            with pytest.raises(StoreError, match="is unavailable"):
                await store.put(make_entry())


# --- the single-flight lock: renewed while held, fenced writes ------------------------------


@store_mark
async def test_the_lock_is_renewed_while_an_extraction_runs_past_its_ttl(
    redis_url: str, stores: list[RedisHistoryStore]
) -> None:
    """Held three TTLs long, the lock never lapses; it is gone once released."""
    store = open_store(stores, redis_url, lock_ttl=SHORT_TTL)
    raw = redis.Redis.from_url(redis_url)
    lock = f"{store.key_prefix}lock:4:acme:c"
    try:
        async with store.single_flight("acme", "c"):
            token = await raw.get(lock)
            assert token is not None
            held_until = time.monotonic() + 3 * SHORT_TTL
            while time.monotonic() < held_until:  # polls the real server, no sleep
                assert await raw.get(lock) == token
        assert await raw.exists(lock) == 0
    finally:
        await raw.aclose()


@store_mark
async def test_a_holder_that_lost_its_lock_does_not_overwrite_the_newer_result(
    redis_url: str, stores: list[RedisHistoryStore], caplog: pytest.LogCaptureFixture
) -> None:
    """Lock lost (deleted) and taken by another replica: the old holder's put is dropped."""
    first = open_store(stores, redis_url)
    second = RedisHistoryStore(redis_url, key_prefix=first.key_prefix)
    stores.append(second)
    raw = redis.Redis.from_url(redis_url)
    lock = f"{first.key_prefix}lock:4:acme:conv-1"
    try:
        held: AbstractAsyncContextManager[None] = first.single_flight("acme", "conv-1")
        await held.__aenter__()
        await raw.delete(lock)
        async with second.single_flight("acme", "conv-1"):
            await second.put(make_entry(extraction="newer"))
        with caplog.at_level(logging.WARNING, logger="overspill.store"):
            await first.put(make_entry(extraction="older, from a lost lock"))
            await held.__aexit__(None, None, None)
        assert (await first.get("acme", "conv-1")) == make_entry(extraction="newer")
        assert "this result is not stored" in caplog.text
    finally:
        await raw.aclose()


@store_mark
async def test_the_watchdog_notices_a_lock_taken_over(
    redis_url: str, stores: list[RedisHistoryStore], caplog: pytest.LogCaptureFixture
) -> None:
    """A renewal that finds another token marks the lock lost; the holder writes nothing."""
    store = open_store(stores, redis_url, lock_ttl=SHORT_TTL)
    raw = redis.Redis.from_url(redis_url)
    lock = f"{store.key_prefix}lock:4:acme:conv-1"
    deadline = time.monotonic() + DEADLINE_SECONDS
    try:
        with caplog.at_level(logging.WARNING, logger="overspill.store"):
            async with store.single_flight("acme", "conv-1"):
                await raw.set(lock, b"someone-else", px=60_000)
                while "single-flight lock lost" not in caplog.text:  # the real server's answer
                    assert time.monotonic() < deadline, "the renewal never noticed"
                    await raw.ping()
                await store.put(make_entry())
        assert await store.get("acme", "conv-1") is None
        assert await raw.get(lock) == b"someone-else"
    finally:
        await raw.aclose()


@store_mark
async def test_writes_outside_a_flight_are_not_fenced(
    redis_url: str, stores: list[RedisHistoryStore]
) -> None:
    """A put for another conversation inside a flight, or with no flight, is written."""
    store = open_store(stores, redis_url)
    async with store.single_flight("acme", "conv-1"):
        await store.put(make_entry(conversation_id="conv-2"))
    await store.put(make_entry())
    assert await store.get("acme", "conv-2") is not None
    assert await store.get("acme", "conv-1") is not None


# --- SIGKILL mid-write ----------------------------------------------------------------------


def killed_writer(
    args: list[str], seed: int, kill: Callable[[subprocess.Popen[str]], None] | None = None
) -> int:
    """Run a crash_writer and SIGKILL it (or, with `kill`, what `kill` kills) at a random
    point while a put is under way; the number of the last entry it finished."""
    kill_at = random.Random(seed).randrange(3, 25)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    command = [sys.executable, "-m", "tests.crash_writer", *args]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, text=True, env=env, cwd=ROOT)
    assert process.stdout is not None
    finished = -1
    try:
        for line in process.stdout:
            verb, n = line.split()
            if verb == "wrote":
                finished = int(n)
            elif int(n) == kill_at:  # it is inside put() now
                (kill or subprocess.Popen.kill)(process)
                break
    finally:
        process.kill()
        process.wait(timeout=DEADLINE_SECONDS)
        process.stdout.close()
    assert finished == kill_at - 1, f"the writer stopped early (seed {seed})"
    return finished


async def assert_whole_or_absent(store: HistoryStore, finished: int, seed: int) -> None:
    """Every finished entry reads back whole; the one in flight is whole or absent."""
    for n in range(finished + 2):
        entry = expected(n)
        found = await store.get(entry.tenant, entry.conversation_id)
        if n <= finished:
            assert found is not None, f"entry {n} lost (seed {seed})"
            assert is_whole(found, n), f"entry {n} (seed {seed})"
        else:
            assert found is None or is_whole(found, n), f"half entry {n} (seed {seed})"


async def assert_read_back_cleanly(
    store: HistoryStore, finished: int, seed: int, caplog: pytest.LogCaptureFixture
) -> None:
    """Every entry whole or absent, none logged as corrupt; the store closed after."""
    try:
        with caplog.at_level(logging.WARNING, logger="overspill.store"):
            await assert_whole_or_absent(store, finished, seed)
        assert "corrupt" not in caplog.text
    finally:
        await store.aclose()


@crash_mark
@pytest.mark.parametrize("seed", range(examples(2, 12)))
async def test_kill_9_during_diskcache_writes_leaves_every_entry_whole(
    tmp_path: Path, seed: int, caplog: pytest.LogCaptureFixture
) -> None:
    """A writer killed mid-put leaves sqlite whole: each entry is complete or absent."""
    finished = killed_writer(["disk", str(tmp_path / "store")], seed)
    await assert_read_back_cleanly(DiskHistoryStore(tmp_path / "store"), finished, seed, caplog)


@crash_mark
@pytest.mark.parametrize("seed", range(examples(2, 12)))
async def test_kill_9_during_redis_writes_leaves_every_entry_whole(
    redis_url: str, seed: int, caplog: pytest.LogCaptureFixture
) -> None:
    """A writer killed mid-put leaves Redis whole: each entry is complete or absent."""
    prefix = f"crash-{secrets.token_hex(4)}:"
    finished = killed_writer(["redis", redis_url, prefix], seed)
    store = RedisHistoryStore(redis_url, key_prefix=prefix)
    await assert_read_back_cleanly(store, finished, seed, caplog)


@crash_mark
async def test_kill_9_of_redis_itself_leaves_every_entry_whole(tmp_path: Path) -> None:
    """Redis (append-only file, fsync always) killed under writes: after restart, each entry
    the server confirmed is whole and the one in flight is whole or absent."""
    options = ("--appendonly", "yes", "--appendfsync", "always")
    prefix = "crash:"
    with redis_process(tmp_path, *options) as (server, url):
        port = port_of(url)
        finished = killed_writer(["redis", url, prefix], 7, kill=lambda _: server.kill())
        server.wait(timeout=DEADLINE_SECONDS)
    with redis_process(tmp_path, *options, port=port) as (_, url):
        store = RedisHistoryStore(url, key_prefix=prefix)
        try:
            await assert_whole_or_absent(store, finished, seed=7)
        finally:
            await store.aclose()
