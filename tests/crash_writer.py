"""A process that writes history entries in a loop until it is killed (for the crash tests).

    python -m tests.crash_writer disk <directory>
    python -m tests.crash_writer redis <url> <key prefix>

Before each write it prints `writing <n>`, after it `wrote <n>` (flushed), so the test knows
which entries must be whole and which one may be absent. Entry n is `expected(n)`: its size
varies from a few bytes to over a MiB (diskcache keeps those in side files), and its text
carries its own length, so a half-written record can never pass for a whole one.
"""

from __future__ import annotations

import asyncio
import sys

from kernel.store import DiskHistoryStore, HistoryEntry, HistoryStore
from kernel.store_redis import RedisHistoryStore

SIZES = (16, 40_000, 700_000, 1_300_000, 3_000)


def expected(n: int) -> HistoryEntry:
    """Entry number n, exactly as the writer writes it."""
    size = SIZES[n % len(SIZES)]
    body = f"{n}:{size}:" + "x" * size
    return HistoryEntry(
        tenant="crash",
        conversation_id=f"c{n % 7}-{n}",
        model_id="m",
        historical_end_index=n,
        message_count=n + 1,
        extraction=body + f":end{n}",
        chain="ab" * 32,
        prompt_version="v",
        tokens_before=n,
        tokens_after=size,
        created_at=float(n),
    )


def is_whole(entry: HistoryEntry, n: int) -> bool:
    """Whether a read entry is entry n, every byte of it."""
    return entry == expected(n)


async def write_forever(store: HistoryStore) -> None:
    n = 0
    while True:
        print(f"writing {n}", flush=True)
        await store.put(expected(n))
        print(f"wrote {n}", flush=True)
        n += 1


def main(argv: list[str]) -> None:
    if argv[0] == "disk":
        store: HistoryStore = DiskHistoryStore(argv[1])
    else:
        store = RedisHistoryStore(argv[1], key_prefix=argv[2], timeout_seconds=10)
    asyncio.run(write_forever(store))


if __name__ == "__main__":
    main(sys.argv[1:])
