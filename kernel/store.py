"""The history store: cached extractions per (tenant, conversation), and in-process single flight.

    HistoryStore           the interface the layers use (a Redis backend will implement it too)
    └── DiskHistoryStore   diskcache.Cache (sqlite) in a directory

Errors: `StoreError` when the store cannot be used (cannot open, read or write); the message
says what failed and where. A stored record that cannot be decoded is logged, deleted and
treated as a miss, never raised. Callers decide whether a StoreError fails the request.

Validity is the caller's job: an entry is returned by key alone, and the layer checks
`kernel.conversation.chain_matches(messages, entry.historical_end_index,
entry.prompt_version, entry.chain)` and `entry.model_id` before using it.

Single flight: `single_flight(tenant, conversation)` serialises the holders of one key in this
process (an `asyncio.Lock` per key, reference counted so locks do not pile up). The first
holder may have written the entry while a later one waited, so a caller re-reads the store
after acquiring. A Redis lock with an expiry will implement the same interface across processes.

Keys are `h:<len(tenant)>:<tenant>:<conversation id>`, so one tenant can never name another's
entry (the length prefix keeps `a:b`+`c` apart from `a`+`b:c`); a decoded record must also
carry the tenant and id of its key. Every write is one sqlite transaction (diskcache's
`set`), so a failure or a crash leaves the previous record; records up to 1 MiB are stored
inside sqlite rather than as side files. Entries expire `ttl_seconds` after they were written
(diskcache's `expire=`, also checked against the injected clock on reads) and the
least-recently-stored ones are evicted, ten at a time (diskcache's cull), when the directory
outgrows `size_limit_bytes`; a limit that holds ten entries or fewer can evict the one just
written, so keep it in megabytes.

Measured (scripts/bench_store.py, 4-40 KB records, the 2-core development box): a diskcache
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
from collections.abc import AsyncIterator, Callable
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Protocol, TypeVar

import diskcache
import orjson

__all__ = [
    "DiskHistoryStore",
    "HistoryEntry",
    "HistoryStore",
    "SingleFlight",
    "StoreError",
]

log = logging.getLogger("overspill.store")

DEFAULT_TTL_SECONDS = 7 * 24 * 3600.0
DEFAULT_SIZE_LIMIT_BYTES = 1 << 30
RECORD_VERSION = 1
_KEY_PREFIX = "h:"
_PING_KEY = "ping"
_INLINE_MAX_BYTES = 1 << 20
_SQLITE_TIMEOUT_SECONDS = 10.0
_FIELD_TYPES: dict[str, type] = {
    "tenant": str,
    "conversation_id": str,
    "model_id": str,
    "historical_end_index": int,
    "message_count": int,
    "extraction": str,
    "chain": str,
    "prompt_version": str,
    "tokens_before": int,
    "tokens_after": int,
    "created_at": float,
}
_T = TypeVar("_T")


class StoreError(Exception):
    """The history store cannot be used; the message says what failed and where."""


@dataclass(frozen=True, slots=True)
class HistoryEntry:
    """One cached extraction: `messages[:historical_end_index]` condensed into `extraction`."""

    tenant: str
    conversation_id: str
    model_id: str
    historical_end_index: int
    message_count: int
    extraction: str
    chain: str
    prompt_version: str
    tokens_before: int
    tokens_after: int
    created_at: float

    def __post_init__(self) -> None:
        if not 0 <= self.historical_end_index <= self.message_count:
            raise ValueError(
                f"historical_end_index {self.historical_end_index} is outside "
                f"0..message_count ({self.message_count})"
            )
        if self.tokens_before < 0 or self.tokens_after < 0:
            raise ValueError("token counts cannot be negative")

    def to_json(self) -> bytes:
        """The record as stored (JSON with a format version)."""
        return orjson.dumps({"v": RECORD_VERSION, **asdict(self)})

    @classmethod
    def from_json(cls, raw: bytes) -> HistoryEntry:
        """Decode a stored record; raises StoreError saying what is wrong with it."""
        try:
            data = orjson.loads(raw)
        except orjson.JSONDecodeError as exc:
            raise StoreError(f"history record is not JSON ({exc})") from None
        if not isinstance(data, dict) or data.get("v") != RECORD_VERSION:
            raise StoreError(f"history record is not a version {RECORD_VERSION} object")
        values: dict[str, Any] = {}
        for name, kind in _FIELD_TYPES.items():
            value = data.get(name)
            if kind is float and type(value) is int:
                value = float(value)
            if type(value) is not kind:
                raise StoreError(f"history record field {name!r} is not a {kind.__name__}")
            values[name] = value
        try:
            return cls(**values)
        except ValueError as exc:
            raise StoreError(f"history record is inconsistent ({exc})") from None


class HistoryStore(Protocol):
    """Where cached extractions live; every backend keys entries by tenant + conversation."""

    async def get(self, tenant: str, conversation_id: str) -> HistoryEntry | None:
        """The tenant's entry for the conversation, or None (missing, expired or corrupt)."""
        ...

    async def put(self, entry: HistoryEntry) -> None:
        """Write the entry atomically, replacing any previous one for its key."""
        ...

    async def delete(self, tenant: str, conversation_id: str) -> bool:
        """Remove one entry; whether there was one."""
        ...

    async def clear(self, tenant: str | None = None) -> int:
        """Remove the tenant's entries (every tenant's when None); how many were removed."""
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
        size_limit_bytes: int = DEFAULT_SIZE_LIMIT_BYTES,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if ttl_seconds <= 0:
            raise ValueError(f"ttl_seconds must be positive, got {ttl_seconds}")
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
            )
        except (OSError, sqlite3.Error, diskcache.Timeout) as exc:
            raise StoreError(f"cannot open the history store at {self.path}: {exc}") from exc
        self._writer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="overspill-store")
        self._closed = False

    async def get(self, tenant: str, conversation_id: str) -> HistoryEntry | None:
        """The tenant's entry for the conversation, or None (missing, expired or corrupt)."""
        return await self._get_key(_key(tenant, conversation_id))

    async def put(self, entry: HistoryEntry) -> None:
        """Write the entry atomically, replacing any previous one for its key."""
        key = _key(entry.tenant, entry.conversation_id)
        try:
            record = entry.to_json()
        except orjson.JSONEncodeError as exc:
            raise StoreError(f"cannot serialise the entry for {key!r}: {exc}") from None
        await self._offload(f"write {key!r}", self._cache.set, key, record, expire=self.ttl_seconds)

    async def delete(self, tenant: str, conversation_id: str) -> bool:
        """Remove one entry; whether there was one."""
        key = _key(tenant, conversation_id)
        return bool(await self._offload(f"delete {key!r}", self._cache.delete, key))

    async def clear(self, tenant: str | None = None) -> int:
        """Remove the tenant's entries (every tenant's when None); how many were removed."""
        return await self._offload(f"clear {_prefix(tenant)!r}*", self._clear, _prefix(tenant))

    async def entries(self, tenant: str | None = None) -> list[HistoryEntry]:
        """The live entries of a tenant (or of all), ordered by tenant and conversation id."""
        keys = await self._offload(f"list {_prefix(tenant)!r}*", self._keys, _prefix(tenant))
        found = [entry for key in keys if (entry := await self._get_key(key)) is not None]
        return sorted(found, key=lambda entry: (entry.tenant, entry.conversation_id))

    async def ping(self) -> None:
        """Raise StoreError unless the store can be read and written (readiness probe)."""
        await self._offload("write the readiness key", self._cache.set, _PING_KEY, 1, expire=60)
        self._call("read the readiness key", self._cache.get, _PING_KEY)

    def single_flight(self, tenant: str, conversation_id: str) -> AbstractAsyncContextManager[None]:
        """Hold the key's flight in this process; re-read the store after entering."""
        return self.flights.hold(tenant, conversation_id)

    async def aclose(self) -> None:
        """Close the sqlite connections (the writer thread's and the loop's) and the thread."""
        if self._closed:
            return
        self._closed = True
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(self._writer, self._cache.close)
        self._writer.shutdown(wait=True)
        self._cache.close()

    async def _get_key(self, key: str) -> HistoryEntry | None:
        found = self._call(f"read {key!r}", self._cache.get, key, expire_time=True)
        return await self._decode(key, *found)

    async def _decode(
        self, key: str, raw: object, expire_time: float | None
    ) -> HistoryEntry | None:
        if raw is None or (expire_time is not None and expire_time <= self._clock()):
            return None
        try:
            if not isinstance(raw, bytes):
                raise StoreError(f"history record is a {type(raw).__name__}, not bytes")
            entry = HistoryEntry.from_json(raw)
            if key != _key(entry.tenant, entry.conversation_id):
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

    def _delete_if(self, key: str, raw: object) -> None:
        """Delete the record only if it is still `raw` (a writer may have replaced it)."""
        with self._cache.transact():
            if self._cache.get(key) == raw:
                self._cache.delete(key)

    def _clear(self, prefix: str) -> int:
        with self._cache.transact():
            return sum(bool(self._cache.delete(key)) for key in self._keys(prefix))

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


def _key(tenant: str, conversation_id: str) -> str:
    return f"{_prefix(tenant)}{conversation_id}"


def _prefix(tenant: str | None) -> str:
    return _KEY_PREFIX if tenant is None else f"{_KEY_PREFIX}{len(tenant)}:{tenant}:"
