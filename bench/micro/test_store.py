"""The history cache's hot paths: the hash chain, conversation identity, store get/put.

Histories are synthetic (~500 characters a message). The store runs in a temporary folder
(diskcache over SQLite; set `TMPDIR` to measure another disk), beside raw diskcache calls and
one thread hop for comparison; `redis` rows run against a private redis-server when one is on
PATH (make redis). A round of store calls is 20 calls, each on another conversation.
"""

from __future__ import annotations

import asyncio
import itertools
import shutil
import time
from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import Any

import diskcache
import pytest
from pytest_benchmark.fixture import BenchmarkFixture

from bench.micro.conftest import Timed
from kernel.conversation import chain, derived_id, given_id
from kernel.store import DiskHistoryStore, HistoryEntry, HistoryStore
from kernel.store_redis import RedisHistoryStore

Message = dict[str, Any]
_SENTENCE = "The quick brown fox jumps over the lazy dog while the cache keeps the history. "
SIZES = (4_000, 40_000)


def history(size: int) -> list[Message]:
    """A system prompt plus `size - 1` distinct turns of about 500 characters each."""
    body = (_SENTENCE * 7)[:490]
    turns = [
        {"role": "user" if i % 2 else "assistant", "content": f"{i:06d}: {body}"}
        for i in range(1, size)
    ]
    return [{"role": "system", "content": "You are a helpful assistant."}, *turns]


def entry(index: int, extraction_chars: int) -> HistoryEntry:
    """A realistic entry for conversation `c<index>`."""
    return HistoryEntry(
        tenant="bench",
        conversation_id=f"c{index}",
        model_id="gpt-4o",
        historical_end_index=150,
        message_count=200,
        extraction=(_SENTENCE * (extraction_chars // len(_SENTENCE) + 1))[:extraction_chars],
        chain="ab" * 32,
        prompt_version="extract-v1",
        tokens_before=50_000,
        tokens_after=4_000,
        created_at=time.time(),
    )


@pytest.mark.parametrize("size", [20, 200, 2000])
def test_chain(benchmark: BenchmarkFixture, size: int) -> None:
    """The hash chain over a history."""
    benchmark.group = "store: hash chain"
    messages = history(size)
    benchmark(chain, messages, len(messages), "extract-v1")


@pytest.mark.parametrize("how", ["derived", "header"])
def test_conversation_id(benchmark: BenchmarkFixture, how: str) -> None:
    """A conversation's identity: derived from 200 messages, or given in a header."""
    benchmark.group = "store: conversation id"
    call = (
        partial(derived_id, "bench", history(200))
        if how == "derived"
        else partial(given_id, "conv-123", None)
    )
    benchmark(call)


@pytest.fixture(scope="module", params=["diskcache", "redis"])
def history_store(
    request: pytest.FixtureRequest, loop: asyncio.AbstractEventLoop, store: DiskHistoryStore
) -> Iterator[HistoryStore]:
    """The diskcache store, or a Redis store on a private redis-server."""
    if request.param == "diskcache":
        yield store
        return
    if shutil.which("redis-server") is None:
        pytest.skip("no redis-server on PATH (make redis)")
    url = request.getfixturevalue("redis_url")
    made = RedisHistoryStore(url, key_prefix=f"bench-{time.time_ns()}:", ttl_seconds=600)
    yield made
    loop.run_until_complete(made.clear())
    loop.run_until_complete(made.aclose())


@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize("call", ["put", "get", "miss"])
def test_store(timed: Timed, history_store: HistoryStore, call: str, size: int) -> None:
    """One store call, on 20 conversations in turn."""
    name = type(history_store).__name__
    entries = [entry(index, size) for index in range(20)]
    for item in entries:
        timed.loop.run_until_complete(history_store.put(item))
    index = itertools.cycle(range(20))
    calls = {
        "put": lambda: history_store.put(entries[next(index)]),
        "get": lambda: history_store.get("bench", f"c{next(index)}"),
        "miss": lambda: history_store.get("bench", f"missing{next(index)}"),
    }
    timed(f"store: {name} {size // 1000} KB extraction", calls[call], times=20)


def test_single_flight(timed: Timed, history_store: HistoryStore) -> None:
    """Entering and leaving an uncontended single flight."""
    index = itertools.count()

    async def flight() -> None:
        async with history_store.single_flight("bench", f"c{next(index)}"):
            pass

    timed("store: single flight", flight, times=20)


@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize("call", ["set", "get"])
def test_raw_diskcache(benchmark: BenchmarkFixture, tmp_path: Path, call: str, size: int) -> None:
    """diskcache itself on the loop's thread, what the store adds a thread hop to."""
    raw = diskcache.Cache(str(tmp_path / "raw"), disk_min_file_size=1 << 20)
    records = [entry(index, size).to_json() for index in range(20)]
    for index, record in enumerate(records):
        raw.set(f"c{index}", record, expire=60)
    turn = itertools.cycle(range(20))
    benchmark.group = f"store: raw diskcache {size // 1000} KB"
    if call == "set":
        benchmark(lambda: raw.set(f"c{(i := next(turn))}", records[i], expire=60))
    else:
        benchmark(lambda: raw.get(f"c{next(turn)}", expire_time=True))
    raw.close()


def test_thread_hop(timed: Timed) -> None:
    """One asyncio.to_thread round trip alone, for scale."""
    timed("store: thread hop", lambda: asyncio.to_thread(int, 1), times=20)
