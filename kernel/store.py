"""The store: all conversation state, shared by replicas and kept across restarts.

    HistoryStore           the interface the layers use (kernel/store_redis.py implements it too)
    └── DiskHistoryStore   diskcache.Cache (sqlite) in a directory

Four kinds of state (kernel/records.py): cached extractions (`HistoryEntry`, keys `h:`) and
the document batches of earlier turns (`DocumentBatches`, keys `d:`), both per tenant and
conversation (`CONVERSATION_KINDS`); the Responses API's stored responses (`StoredResponse`,
keys `r:`, per tenant and response id); each model's token-calibration samples (keys
`c:<model>`, shared by every tenant, newest first, at most `CALIBRATION_SAMPLES`); and what
overspill's own calls spent, per tenant and UTC day (keys `u:<len(tenant)>:<tenant>:<YYYY-MM-DD>`,
one JSON object of `model: [calls, failed, prompt tokens, completion tokens]`, kept
`keep_seconds`: the usage summary and the tenants' budgets, kernel/usage.py). `delete` removes
a conversation's records, `clear` a tenant's of every kind; calibration and usage stay.

Errors: `StoreError` when the store cannot be used (cannot open, read or write); the message
says what failed and where. A stored record that cannot be decoded is logged, deleted and
treated as a miss, never raised. Callers decide whether a StoreError fails the request.

Validity is the caller's job: an entry is returned by key alone, and the layer checks
`kernel.conversation.chain_matches(messages, entry.historical_end_index,
entry.prompt_version, entry.chain)` and `entry.model_id` before using it.

Single flight: `single_flight(tenant, conversation)` serialises the holders of one key in this
process (an `asyncio.Lock` per key, reference counted so locks do not pile up) and across the
processes sharing the directory (`--workers N`: a record lock on one byte of `flights.lock`,
kernel/flight_file.py, dropped by the kernel when a holder dies). The first
holder may have written the entry while a later one waited, so a caller re-reads the store
after acquiring. A Redis lock with an expiry implements the same interface across hosts.
`flight_busy` tells, without waiting, whether a key is held now (a background growth running),
so a caller can skip starting a second one or choose to wait for it.

Keys are `h:<len(tenant)>:<tenant>:<conversation id>` (and `d:...`), so one tenant can never
name another's entry (the length prefix keeps `a:b`+`c` apart from `a`+`b:c`); a decoded record
must also carry the tenant and id of its key. Every write is one sqlite transaction
(diskcache's `set`), so a failure or a crash leaves the previous record; records up to 1 MiB
are stored inside sqlite rather than as side files. Records expire their kind's TTL after they
were written (`ttl_seconds`, or `ttl_by_kind[kind]`; diskcache's `expire=`, also checked
against the injected clock on reads) and the least-recently-stored ones are evicted, ten at a
time (diskcache's cull), when the directory outgrows `size_limit_bytes`; a limit that holds ten
entries or fewer can evict the one just written, so keep it in megabytes.

Measured (bench/micro/test_store.py, 4-40 KB records, the 2-core development box): a diskcache
`set` ~200-300 µs median (p90 up to ~650 µs, and a WAL checkpoint takes milliseconds), a `get`
~20-40 µs, an `asyncio.to_thread` hop ~140-220 µs. So reads run on the event loop (a hop would
cost more than the read) and writes, deletes, clearing and listing run on one worker thread the
store owns: a checkpoint or a lock wait never stalls the loop, and one writer thread means no
in-process contention for sqlite's single write lock. `put` costs ~400-550 µs of wall time.
"""

from __future__ import annotations

import asyncio
import logging
import os
import sqlite3
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, TypeVar

import diskcache
import orjson

from kernel.flight_file import FlightFile
from kernel.json_values import is_int, is_number
from kernel.records import (
    CALIBRATION,
    CALIBRATION_SAMPLES,
    CONVERSATION_KINDS,
    DEFAULT_TTLS,
    DOCUMENTS,
    EXTRACTIONS,
    RESPONSES,
    TENANT_KINDS,
    DocumentBatches,
    HistoryEntry,
    Kind,
    Record,
    StoredBatch,
    StoredResponse,
    StoreError,
    decode,
)
from kernel.spending import Tally, UsageRow

__all__ = [
    "CALIBRATION_SAMPLES",
    "DiskHistoryStore",
    "DocumentBatches",
    "HistoryEntry",
    "HistoryStore",
    "SingleFlight",
    "StoreError",
    "StoredBatch",
    "StoredResponse",
]

log = logging.getLogger("overspill.store")

DEFAULT_TTL_SECONDS = 7 * 24 * 3600.0
DEFAULT_SIZE_LIMIT_BYTES = 1 << 30
SAMPLES = "c:"
"""How the keys of calibration samples start (`c:<model>`)."""
USAGE = "u:"
"""How the keys of own-call usage start (`u:<len(tenant)>:<tenant>:<day>`)."""
_PING_KEY = "ping"
_INLINE_MAX_BYTES = 1 << 20
_SQLITE_TIMEOUT_SECONDS = 10.0
SQLITE_CACHE_PAGES = 1024
"""SQLite's page cache per connection (4 KiB pages: 4 MiB). diskcache's default, 8,192
pages, is 32 MiB per connection (the event loop's and the writer's), which a store that
keeps filling with conversations reached over minutes of load as resident memory; reads
go through diskcache's memory map of the file anyway."""
FLIGHT_FILE = "flights.lock"
"""The file in the store's directory whose record locks are the cross-process flights."""
_T = TypeVar("_T")
_R = TypeVar("_R", bound=Record)


class HistoryStore(Protocol):
    """Where conversation state lives; every backend keys it by tenant + conversation."""

    async def get(self, tenant: str, conversation_id: str) -> HistoryEntry | None:
        """The tenant's entry for the conversation, or None (missing, expired or corrupt)."""
        ...

    async def put(self, entry: HistoryEntry) -> None:
        """Write the entry atomically, replacing any previous one for its key."""
        ...

    async def get_batches(self, tenant: str, conversation_id: str) -> DocumentBatches | None:
        """The conversation's earlier document batches, or None."""
        ...

    async def put_batches(self, record: DocumentBatches) -> None:
        """Write the batches atomically, replacing the previous ones of the conversation."""
        ...

    async def get_response(self, tenant: str, response_id: str) -> StoredResponse | None:
        """The tenant's stored Responses API response, or None (missing, expired, corrupt,
        or another tenant's)."""
        ...

    async def get_responses(
        self, tenant: str, response_ids: Sequence[str]
    ) -> list[StoredResponse | None]:
        """The tenant's stored responses with these ids, in their order (None for a miss), read
        in one round trip where the backend allows."""
        ...

    async def put_response(self, record: StoredResponse) -> None:
        """Write a response record atomically; it expires after the store's responses TTL."""
        ...

    async def delete_response(self, tenant: str, response_id: str) -> bool:
        """Remove the tenant's response record; whether there was one."""
        ...

    async def calibration(self, model: str) -> tuple[float, ...]:
        """A model's calibration samples, newest first."""
        ...

    async def add_calibration(self, model: str, ratio: float) -> None:
        """Record one calibration sample atomically (the oldest beyond the cap go)."""
        ...

    async def add_usage(
        self, tenant: str, day: str, model: str, tally: Tally, keep_seconds: float
    ) -> None:
        """Add one model's own-call counts to the tenant's usage of a UTC day (atomically)."""
        ...

    async def usage(self, tenant: str | None, days: Sequence[str]) -> list[UsageRow]:
        """The usage rows of a tenant (of every tenant when None) on the given days."""
        ...

    async def delete(self, tenant: str, conversation_id: str) -> bool:
        """Remove a conversation's records (both kinds); whether there were any."""
        ...

    async def clear(self, tenant: str | None = None) -> int:
        """Remove the tenant's records (every tenant's when None); how many were removed."""
        ...

    async def entries(self, tenant: str | None = None) -> list[HistoryEntry]:
        """The live entries of a tenant (or of all), ordered by tenant and conversation id."""
        ...

    async def ping(self) -> None:
        """Raise StoreError unless the store can be read and written (readiness probe)."""
        ...

    def single_flight(self, tenant: str, conversation_id: str) -> AbstractAsyncContextManager[None]:
        """Hold the key's flight; re-read the store after entering (another may have written)."""
        ...

    async def flight_busy(self, tenant: str, conversation_id: str) -> bool:
        """Whether someone holds the key's flight now (never raises: unknown counts as free)."""
        ...

    async def aclose(self) -> None:
        """Release the backend's connections and threads."""
        ...


@dataclass(slots=True)
class _Flight:
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    holders: int = 0


class SingleFlight:
    """Per-key asyncio locks for one process, dropped when their last holder or waiter leaves."""

    def __init__(self) -> None:
        self._flights: dict[tuple[str, str], _Flight] = {}

    def __len__(self) -> int:
        """How many keys are held or waited for."""
        return len(self._flights)

    def held(self, tenant: str, conversation_id: str) -> bool:
        """Whether the key is held or waited for in this process."""
        return (tenant, conversation_id) in self._flights

    @asynccontextmanager
    async def hold(self, tenant: str, conversation_id: str) -> AsyncIterator[None]:
        """Wait for the key, hold it for the block, then pass it to the next waiter."""
        key = (tenant, conversation_id)
        flight = self._flights.setdefault(key, _Flight())
        flight.holders += 1
        try:
            async with flight.lock:
                yield
        finally:
            flight.holders -= 1
            if flight.holders == 0:
                del self._flights[key]


class DiskHistoryStore:
    """A HistoryStore in a diskcache directory (sqlite), for one host."""

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        ttl_seconds: float = DEFAULT_TTL_SECONDS,
        ttl_by_kind: Mapping[str, float] | None = None,
        size_limit_bytes: int = DEFAULT_SIZE_LIMIT_BYTES,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.ttls = dict(ttl_by_kind or {})
        for name, ttl in [("ttl_seconds", ttl_seconds), *self.ttls.items()]:
            if ttl <= 0:
                raise ValueError(f"{name} must be positive, got {ttl}")
        if size_limit_bytes <= 0:
            raise ValueError(f"size_limit_bytes must be positive, got {size_limit_bytes}")
        self.path = Path(path)
        self.ttl_seconds = ttl_seconds
        self.flights = SingleFlight()
        self._clock = clock
        try:
            self._cache = diskcache.Cache(
                str(self.path),
                timeout=_SQLITE_TIMEOUT_SECONDS,
                eviction_policy="least-recently-stored",
                size_limit=size_limit_bytes,
                disk_min_file_size=_INLINE_MAX_BYTES,
                sqlite_cache_size=SQLITE_CACHE_PAGES,
            )
        except (OSError, sqlite3.Error, diskcache.Timeout) as exc:
            raise StoreError(f"cannot open the history store at {self.path}: {exc}") from exc
        try:
            self._flight_file = FlightFile(self.path / FLIGHT_FILE)
        except OSError as exc:
            self._cache.close()
            raise StoreError(f"cannot open the history store at {self.path}: {exc}") from exc
        self._writer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="overspill-store")
        self._grouped = GroupCommit(self._write_group, self._offload)
        self._closed = False

    async def get(self, tenant: str, conversation_id: str) -> HistoryEntry | None:
        """The tenant's entry for the conversation, or None (missing, expired or corrupt)."""
        return await self._read(EXTRACTIONS, HistoryEntry, tenant, conversation_id)

    async def put(self, entry: HistoryEntry) -> None:
        """Write the entry atomically, replacing any previous one for its key."""
        await self._put(EXTRACTIONS, entry)

    async def get_batches(self, tenant: str, conversation_id: str) -> DocumentBatches | None:
        """The conversation's earlier document batches, or None."""
        return await self._read(DOCUMENTS, DocumentBatches, tenant, conversation_id)

    async def put_batches(self, record: DocumentBatches) -> None:
        """Write the batches atomically, replacing the previous ones of the conversation."""
        await self._put(DOCUMENTS, record)

    async def get_response(self, tenant: str, response_id: str) -> StoredResponse | None:
        """The tenant's stored response, or None."""
        return await self._read(RESPONSES, StoredResponse, tenant, response_id)

    async def get_responses(
        self, tenant: str, response_ids: Sequence[str]
    ) -> list[StoredResponse | None]:
        """The tenant's stored responses with these ids, in order (reads are local: one by one)."""
        return [await self.get_response(tenant, response_id) for response_id in response_ids]

    async def put_response(self, record: StoredResponse) -> None:
        """Write a response record atomically (it expires after the responses TTL). Responses
        are written on every Responses API turn: the writes of one event-loop iteration share
        one trip to the writer thread and one sqlite transaction (a group commit)."""
        key = key_of(RESPONSES.key, record.tenant, record.key_id)
        await self._grouped.put(key, record.to_json(), self.ttl_of(RESPONSES.name))

    async def delete_response(self, tenant: str, response_id: str) -> bool:
        """Remove the tenant's response record; whether there was one."""
        key = key_of(RESPONSES.key, tenant, response_id)
        return bool(await self._offload(f"delete {key!r}", self._delete_all, [key]))

    async def calibration(self, model: str) -> tuple[float, ...]:
        """A model's calibration samples, newest first."""
        raw = self._call("read calibration", self._cache.get, SAMPLES + model)
        return _samples(raw)

    async def add_calibration(self, model: str, ratio: float) -> None:
        """Record one calibration sample atomically (the oldest beyond the cap go)."""
        await self._offload("write calibration", self._add_sample, SAMPLES + model, ratio)

    async def add_usage(
        self, tenant: str, day: str, model: str, tally: Tally, keep_seconds: float
    ) -> None:
        """Add one model's own-call counts to the tenant's usage of a UTC day (atomically)."""
        key = key_of(USAGE, tenant, day)
        await self._offload(
            f"count usage {key!r}", self._add_usage, key, model, tally, keep_seconds
        )

    async def usage(self, tenant: str | None, days: Sequence[str]) -> list[UsageRow]:
        """The usage rows of a tenant (of every tenant when None) on the given days."""
        if tenant is not None:
            keys = [key_of(USAGE, tenant, day) for day in days]
        else:
            wanted = set(days)
            listed = await self._offload("list usage", self._keys, USAGE)
            keys = [key for key in listed if key.rsplit(":", 1)[-1] in wanted]
        rows: list[UsageRow] = []
        for key in keys:
            raw = self._call(f"read {key!r}", self._cache.get, key)
            owner, day = usage_key_parts(key)
            rows += [UsageRow(owner, day, model, tally) for model, tally in usage_counts(raw)]
        return rows

    async def delete(self, tenant: str, conversation_id: str) -> bool:
        """Remove a conversation's records (every kind); whether there were any."""
        keys = [key_of(kind.key, tenant, conversation_id) for kind in CONVERSATION_KINDS]
        return bool(await self._offload(f"delete {keys[0]!r}", self._delete_all, keys))

    async def clear(self, tenant: str | None = None) -> int:
        """Remove the tenant's records (every tenant's when None); how many were removed."""
        prefixes = [prefix_of(kind.key, tenant) for kind in TENANT_KINDS]
        return await self._offload(f"clear {prefixes[0]!r}*", self._clear, prefixes)

    async def entries(self, tenant: str | None = None) -> list[HistoryEntry]:
        """The live entries of a tenant (or of all), ordered by tenant and conversation id."""
        prefix = prefix_of(EXTRACTIONS.key, tenant)
        keys = await self._offload(f"list {prefix!r}*", self._keys, prefix)
        found = [
            entry
            for key in keys
            if (entry := await self._get_key(key, EXTRACTIONS, HistoryEntry)) is not None
        ]
        return sorted(found, key=lambda entry: (entry.tenant, entry.conversation_id))

    def ttl_of(self, kind: str) -> float:
        """A kind's TTL in seconds: `ttl_by_kind`'s, else the kind's default, else
        `ttl_seconds`."""
        return self.ttls.get(kind, DEFAULT_TTLS.get(kind, self.ttl_seconds))

    async def ping(self) -> None:
        """Raise StoreError unless the store can be read and written (readiness probe)."""
        await self._offload("write the readiness key", self._cache.set, _PING_KEY, 1, expire=60)
        self._call("read the readiness key", self._cache.get, _PING_KEY)

    def single_flight(self, tenant: str, conversation_id: str) -> AbstractAsyncContextManager[None]:
        """Hold the key's flight in this process and against the other processes on this
        directory; re-read the store after entering."""
        return self._hold(tenant, conversation_id)

    @asynccontextmanager
    async def _hold(self, tenant: str, conversation_id: str) -> AsyncIterator[None]:
        async with (
            self.flights.hold(tenant, conversation_id),
            self._flight_file.hold(tenant, conversation_id),
        ):
            yield

    async def flight_busy(self, tenant: str, conversation_id: str) -> bool:
        """Whether the key's flight is held, here or by another process on this directory."""
        if self.flights.held(tenant, conversation_id):
            return True
        return self._flight_file.busy(tenant, conversation_id)

    async def aclose(self) -> None:
        """Close the sqlite connections (the writer thread's and the loop's) and the thread."""
        if self._closed:
            return
        self._closed = True
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(self._writer, self._cache.close)
        self._writer.shutdown(wait=True)
        self._cache.close()
        self._flight_file.close()

    async def _put(self, kind: Kind, record: Record) -> None:
        key = key_of(kind.key, record.tenant, record.key_id)
        expire = self.ttl_of(kind.name)
        await self._offload(f"write {key!r}", self._cache.set, key, record.to_json(), expire=expire)

    async def _read(self, kind: Kind, model: type[_R], tenant: str, owner: str) -> _R | None:
        return await self._get_key(key_of(kind.key, tenant, owner), kind, model)

    async def _get_key(self, key: str, kind: Kind, model: type[_R]) -> _R | None:
        found = self._call(f"read {key!r}", self._cache.get, key, expire_time=True)
        return await self._decode(key, kind, model, *found)

    async def _decode(
        self, key: str, kind: Kind, model: type[_R], raw: object, expire_time: float | None
    ) -> _R | None:
        if raw is None or (expire_time is not None and expire_time <= self._clock()):
            return None
        try:
            if not isinstance(raw, bytes):
                raise StoreError(f"history record is a {type(raw).__name__}, not bytes")
            entry = decode(model, raw)
            if key != key_of(kind.key, entry.tenant, entry.key_id):
                raise StoreError("history record belongs to another key")
        except StoreError as exc:
            log.warning(
                "corrupt history record deleted: %s",
                exc,
                extra={"key": key, "path": str(self.path)},
            )
            await self._offload(f"delete corrupt {key!r}", self._delete_if, key, raw)
            return None
        return entry

    def _write_group(self, writes: list[tuple[str, bytes, float]]) -> None:
        """Several records in one transaction (the writer thread's)."""
        with self._cache.transact():
            for key, raw, expire in writes:
                self._cache.set(key, raw, expire=expire)

    def _delete_if(self, key: str, raw: object) -> None:
        """Delete the record only if it is still `raw` (a writer may have replaced it)."""
        with self._cache.transact():
            if self._cache.get(key) == raw:
                self._cache.delete(key)

    def _delete_all(self, keys: list[str]) -> int:
        with self._cache.transact():
            return sum(bool(self._cache.delete(key)) for key in keys)

    def _clear(self, prefixes: list[str]) -> int:
        with self._cache.transact():
            return self._delete_all([key for prefix in prefixes for key in self._keys(prefix)])

    def _add_sample(self, key: str, ratio: float) -> None:
        with self._cache.transact():
            samples = (ratio, *_samples(self._cache.get(key)))[:CALIBRATION_SAMPLES]
            self._cache.set(key, orjson.dumps(samples), expire=self.ttl_of(CALIBRATION))

    def _add_usage(self, key: str, model: str, tally: Tally, keep_seconds: float) -> None:
        with self._cache.transact():
            counts = dict(usage_counts(self._cache.get(key)))
            counts.setdefault(model, Tally()).add(tally)
            written = {
                name: [t.calls, t.failed, t.prompt_tokens, t.completion_tokens]
                for name, t in counts.items()
            }
            self._cache.set(key, orjson.dumps(written), expire=keep_seconds)

    def _keys(self, prefix: str) -> list[str]:
        return [
            key for key in self._cache.iterkeys() if isinstance(key, str) and key.startswith(prefix)
        ]

    def _call(self, what: str, func: Callable[..., _T], *args: Any, **kwargs: Any) -> _T:
        try:
            return func(*args, **kwargs)
        except (OSError, sqlite3.Error, diskcache.Timeout) as exc:
            raise StoreError(f"cannot {what} in the history store at {self.path}: {exc}") from exc

    async def _offload(self, what: str, func: Callable[..., _T], *args: Any, **kwargs: Any) -> _T:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(
            self._writer, lambda: self._call(what, func, *args, **kwargs)
        )


Offload = Callable[..., Awaitable[Any]]
"""How a store runs a blocking call off the event loop: `offload(what, func, *args)`."""


class GroupCommit:
    """Writes asked for in one event-loop iteration, written together: one call of `write`
    with all of them, through `offload`; every writer awaits that call's outcome."""

    def __init__(self, write: Callable[[list[tuple[str, bytes, float]]], None], offload: Offload):
        self._write = write
        self._offload = offload
        self._pending: list[tuple[str, bytes, float]] = []
        self._done: asyncio.Future[None] | None = None

    async def put(self, key: str, raw: bytes, expire: float) -> None:
        """Write one record with the others of this loop iteration; raises what the group's
        write raised (a StoreError)."""
        if self._done is None:
            self._done = asyncio.get_running_loop().create_future()
            asyncio.get_running_loop().call_soon(self._flush)
        self._pending.append((key, raw, expire))
        await asyncio.shield(self._done)

    def _flush(self) -> None:
        writes, done = self._pending, self._done
        self._pending, self._done = [], None
        assert done is not None
        task = asyncio.ensure_future(
            self._offload(f"write {len(writes)} records", self._write, writes)
        )
        task.add_done_callback(lambda finished: _settle(done, finished))


def _settle(done: asyncio.Future[None], finished: asyncio.Future[Any]) -> None:
    """Pass a group write's outcome to everyone who waits for it."""
    if done.cancelled():
        return
    error = None if finished.cancelled() else finished.exception()
    if finished.cancelled():
        done.cancel()
    elif error is not None:
        done.set_exception(error)
    else:
        done.set_result(None)


def key_of(kind: str, tenant: str, conversation_id: str) -> str:
    """A conversation record's key: the kind, then the tenant length-prefixed, then the id."""
    return f"{prefix_of(kind, tenant)}{conversation_id}"


def prefix_of(kind: str, tenant: str | None) -> str:
    """The key prefix of a kind's records for one tenant (or for every tenant)."""
    return kind if tenant is None else f"{kind}{len(tenant)}:{tenant}:"


def usage_key_parts(key: str) -> tuple[str, str]:
    """(tenant, day) of a usage key `u:<len(tenant)>:<tenant>:<day>` (a store's prefix off)."""
    rest = key.removeprefix(USAGE)
    length, _, rest = rest.partition(":")
    size = int(length)
    return rest[:size], rest[size + 1 :]


def usage_counts(raw: object) -> list[tuple[str, Tally]]:
    """A stored usage record's counts per model; anything unreadable counts as none."""
    if isinstance(raw, str):
        raw = raw.encode()
    if not isinstance(raw, bytes):
        return []
    try:
        found = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return []
    if not isinstance(found, dict):
        return []
    rows = []
    for model, counts in found.items():
        if isinstance(counts, list) and len(counts) == 4 and all(is_int(n) for n in counts):
            rows.append((str(model), Tally(*counts)))
    return rows


def _samples(raw: object) -> tuple[float, ...]:
    """Stored calibration samples; anything unreadable counts as none."""
    if not isinstance(raw, bytes):
        return ()
    try:
        found = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return ()
    if not isinstance(found, list):
        return ()
    return tuple(float(x) for x in found if is_number(x))
