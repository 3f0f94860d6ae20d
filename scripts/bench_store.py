"""Time the history cache's hot paths: the hash chain, conversation identity, store get/put.

Usage: ``python scripts/bench_store.py [--dir PATH] [--runs 200] [--redis URL]``

Histories are synthetic (~500 characters a message, alternating user/assistant after a system
prompt). Figures are microseconds: the median and 90th percentile of ``--runs`` runs (store
calls are dominated by sqlite and the disk, so one best run would flatter them). The store runs
in a temporary directory unless ``--dir`` names one (use it to measure another disk). With
``--redis URL`` the same store figures follow for RedisHistoryStore (under a throwaway key
prefix, cleared afterwards), and both backends time a single-flight acquire and release.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable
from functools import partial
from typing import Any

import diskcache

from kernel.conversation import chain, derived_id, given_id
from kernel.store import DiskHistoryStore, HistoryEntry, HistoryStore
from kernel.store_redis import RedisHistoryStore

Message = dict[str, Any]
_SENTENCE = "The quick brown fox jumps over the lazy dog while the cache keeps the history. "


def history(size: int) -> list[Message]:
    """A system prompt plus ``size - 1`` distinct turns of about 500 characters each."""
    body = (_SENTENCE * 7)[:490]
    turns = [
        {"role": "user" if i % 2 else "assistant", "content": f"{i:06d}: {body}"}
        for i in range(1, size)
    ]
    return [{"role": "system", "content": "You are a helpful assistant."}, *turns]


def summarise(timings_ns: list[int]) -> str:
    """Median and p90 in microseconds."""
    ordered = sorted(timings_ns)
    p90 = ordered[int(len(ordered) * 0.9) - 1] if len(ordered) >= 10 else ordered[-1]
    return f"median {statistics.median(ordered) / 1000:9.1f} µs   p90 {p90 / 1000:9.1f} µs"


def time_sync(run: Callable[[], object], runs: int) -> list[int]:
    """Run ``run`` ``runs`` times; return each duration in ns."""
    timings = []
    for _ in range(runs):
        start = time.perf_counter_ns()
        run()
        timings.append(time.perf_counter_ns() - start)
    return timings


def time_sync_indexed(run: Callable[[int], object], runs: int) -> list[int]:
    """Run ``run(i)`` for i in range(runs); return each duration in ns."""
    timings = []
    for index in range(runs):
        start = time.perf_counter_ns()
        run(index)
        timings.append(time.perf_counter_ns() - start)
    return timings


async def time_async(run: Callable[[int], Awaitable[object]], runs: int) -> list[int]:
    """Await ``run(i)`` for i in range(runs); return each duration in ns."""
    timings = []
    for index in range(runs):
        start = time.perf_counter_ns()
        await run(index)
        timings.append(time.perf_counter_ns() - start)
    return timings


def entry(index: int, extraction_chars: int) -> HistoryEntry:
    """A realistic entry for conversation ``c<index>``."""
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


async def _put(store: HistoryStore, entries: list[HistoryEntry], index: int) -> None:
    await store.put(entries[index])


async def bench_history(store: HistoryStore, runs: int, size: int, name: str) -> list[HistoryEntry]:
    """Time put, get and a miss through any HistoryStore; return the entries written."""
    label = f"{size // 1000} KB extraction"
    entries = [entry(index, size) for index in range(runs)]
    puts = await time_async(partial(_put, store, entries), runs)
    gets = await time_async(lambda i: store.get("bench", f"c{i}"), runs)
    misses = await time_async(lambda i: store.get("bench", f"missing{i}"), runs)
    print(f"{name} put  ({label}):   {summarise(puts)}")
    print(f"{name} get  ({label}):   {summarise(gets)}")
    print(f"{name} miss ({label}):   {summarise(misses)}")
    await store.clear()
    return entries


async def bench_lock(store: HistoryStore, runs: int, name: str) -> None:
    """Time entering and leaving an uncontended single flight, separately."""
    acquires, releases = [], []
    for index in range(runs):
        flight = store.single_flight("bench", f"c{index}")
        start = time.perf_counter_ns()
        await flight.__aenter__()
        middle = time.perf_counter_ns()
        await flight.__aexit__(None, None, None)
        releases.append(time.perf_counter_ns() - middle)
        acquires.append(middle - start)
    print(f"{name} lock acquire:          {summarise(acquires)}")
    print(f"{name} lock release:          {summarise(releases)}")


async def bench_redis(url: str, runs: int) -> None:
    """Time RedisHistoryStore's put/get/miss and its distributed lock."""
    prefix = f"overspill-bench-{time.time_ns()}:"
    store = RedisHistoryStore(url, key_prefix=prefix, ttl_seconds=600)
    await store.ping()
    try:
        for size in (4_000, 40_000):
            await bench_history(store, runs, size, "redis")
        await bench_lock(store, runs, "redis")
    finally:
        await store.clear()
        await store.aclose()


async def bench_store(directory: str, runs: int) -> None:
    """Time put/get through DiskHistoryStore, and raw diskcache calls and a thread hop."""
    store = DiskHistoryStore(directory)
    try:
        for size in (4_000, 40_000):
            entries = await bench_history(store, runs, size, "store")
            label = f"{size // 1000} KB extraction"
            await bench_raw(f"{directory}/raw-{size}", [item.to_json() for item in entries], label)
        await bench_lock(store, runs, "store")
    finally:
        await store.aclose()


async def bench_raw(directory: str, records: list[bytes], label: str) -> None:
    """Time diskcache itself on the loop's thread, and one thread hop, for comparison."""
    raw = diskcache.Cache(directory, disk_min_file_size=1 << 20)
    try:
        runs = len(records)
        sets = time_sync_indexed(lambda i: raw.set(f"c{i}", records[i], expire=60), runs)
        reads = time_sync_indexed(lambda i: raw.get(f"c{i}", expire_time=True), runs)
        hops = await time_async(lambda i: asyncio.to_thread(int, i), runs)
    finally:
        raw.close()
    print(f"raw diskcache set ({label}): {summarise(sets)}")
    print(f"raw diskcache get ({label}): {summarise(reads)}")
    print(f"asyncio.to_thread hop alone:        {summarise(hops)}")


def main() -> None:
    """Print the figures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", help="store directory (default: a temporary one)")
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--redis", metavar="URL", help="also time the Redis store at URL")
    args = parser.parse_args()

    for size in (20, 200, 2_000):
        messages = history(size)
        timings = time_sync(partial(chain, messages, len(messages), "extract-v1"), args.runs)
        print(f"chain over {size:5d} messages:      {summarise(timings)}")
    messages = history(200)
    identify: dict[str, Callable[[], object]] = {
        "derived": partial(derived_id, "bench", messages),
        "header ": partial(given_id, "conv-123", None),
    }
    for label, how in identify.items():
        print(f"{label} conversation id:        {summarise(time_sync(how, args.runs))}")

    if args.dir:
        asyncio.run(bench_store(args.dir, args.runs))
    else:
        with tempfile.TemporaryDirectory() as directory:
            asyncio.run(bench_store(directory, args.runs))
    if args.redis:
        asyncio.run(bench_redis(args.redis, args.runs))


if __name__ == "__main__":
    main()
