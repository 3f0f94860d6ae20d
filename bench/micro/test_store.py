"""The history cache's hot paths: the hash chain, conversation identity, store get/put, and
decoding an entry that carries its fact ledger's records.

Histories are synthetic (~500 characters a message). The store runs in a temporary folder
(diskcache over SQLite; set `TMPDIR` to measure another disk), beside raw diskcache calls and
one thread hop for comparison; `redis` rows run against a private redis-server when one is on
PATH (make redis). A round of store calls is 20 calls, each on another conversation.

The entry decoded is a realistic one: the evaluation's conversation of seed 1 with 60 filler
episodes, everything before its tail condensed by the real ledger (a 1,500-token target beside
250 tokens of notes, as `python -m evaluation.ledger` does), decoded as stored now (format 2:
the records kept as text, validated only when a growth reads them) and as stored at
`FORMAT_1` by that revision's own kernel/records.py (read from git): every record an object,
validated on every read. The group's name gives both stored sizes.
"""

from __future__ import annotations

import asyncio
import itertools
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path
from types import ModuleType
from typing import Any

import diskcache
import pytest
from pytest_benchmark.fixture import BenchmarkFixture

from bench.micro.conftest import Timed
from evaluation.conversations import generate
from evaluation.ledger import stand_in_notes, tail_start
from kernel.conversation import chain, derived_id, given_id
from kernel.records import decode
from kernel.store import DiskHistoryStore, HistoryEntry, HistoryStore
from kernel.store_redis import RedisHistoryStore
from middleware.condensing.ledger import Ledger, Previous

Message = dict[str, Any]
_SENTENCE = "The quick brown fox jumps over the lazy dog while the cache keeps the history. "
SIZES = (4_000, 40_000)
ROOT = Path(__file__).resolve().parents[2]
FORMAT_1 = "4095e74"
"""The last revision whose entries kept their records as objects, validated on every read."""


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


@pytest.fixture(scope="module")
def format_1() -> Iterator[ModuleType]:
    """kernel/records.py as it was at FORMAT_1 (from git), to store and read its format."""
    shown = subprocess.run(
        ["git", "show", f"{FORMAT_1}:kernel/records.py"], cwd=ROOT, capture_output=True, text=True
    )
    if shown.returncode != 0:
        pytest.skip(f"no git history holding {FORMAT_1} (a shallow clone?)")
    module = ModuleType("format_1_records")
    sys.modules[module.__name__] = module  # pydantic resolves the annotations through it
    exec(compile(shown.stdout, f"{FORMAT_1}:kernel/records.py", "exec"), module.__dict__)
    yield module
    del sys.modules[module.__name__]


@pytest.fixture(scope="module")
def ledger_entry() -> HistoryEntry:
    """A long conversation's entry, its records made by the real ledger."""
    messages = generate(1, fillers=60).messages
    end = tail_start(messages, 1100)
    made = Ledger.grow(None, (), messages[1:end]).render(stand_in_notes(250), 1500)
    return HistoryEntry(
        tenant="bench", conversation_id="c1", model_id="gpt-4o", historical_end_index=end,
        message_count=len(messages), extraction=made.text, chain="ab" * 32,
        prompt_version="x28", tokens_before=50_000, tokens_after=1_500, created_at=time.time(),
        notes=made.notes, facts=Previous.stored(made.facts),
    )  # fmt: skip


ENTRY_READS = ["format 1", "format 2", "format 2, records", "format 1 now", "no records"]


@pytest.mark.parametrize("read", ENTRY_READS)
def test_entry_decoding(
    benchmark: BenchmarkFixture, format_1: ModuleType, ledger_entry: HistoryEntry, read: str
) -> None:
    """Decoding a stored entry: as a splice-only turn reads it (`format 1` with FORMAT_1's
    code, `format 2` with this one's), as a growth reads it (`format 2, records`), a format 1
    entry read by this code until a growth rewrites it, and the entry without records."""
    records = ledger_entry.records()
    old = format_1.HistoryEntry(
        **ledger_entry.model_dump(exclude={"v", "facts"}),
        facts=tuple(format_1.StoredFact(**record.model_dump()) for record in records),
    )
    stored = {
        "format 1": old.to_json(),
        "format 2": ledger_entry.to_json(),
        "no records": ledger_entry.model_copy(update={"facts": "[]"}).to_json(),
    }
    reads: dict[str, Callable[[], object]] = {
        "format 1": partial(format_1.decode, format_1.HistoryEntry, stored["format 1"]),
        "format 2": partial(decode, HistoryEntry, stored["format 2"]),
        "format 2, records": lambda: decode(HistoryEntry, stored["format 2"]).records(),
        "format 1 now": partial(decode, HistoryEntry, stored["format 1"]),
        "no records": partial(decode, HistoryEntry, stored["no records"]),
    }
    assert decode(HistoryEntry, stored["format 1"]).records() == records
    sizes = ", ".join(f"{name} {len(raw):,} B" for name, raw in stored.items())
    benchmark.group = f"store: an entry of {len(records)} records read back ({sizes})"
    benchmark(reads[read])
