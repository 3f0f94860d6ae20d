"""The Redis history store: conversation state shared by several replicas, and a distributed lock.

    RedisHistoryStore    a HistoryStore in Redis (redis.asyncio), for replicas on several hosts
    open_redis_store     build one from `general_settings.store` (backend: redis)

Keys live under `key_prefix` (default `overspill:`), tenant-namespaced as in the disk store:

    {prefix}h:<len(tenant)>:<tenant>:<id>     the entry, `HistoryEntry.to_json()`, `SET ... PX ttl`
    {prefix}d:<len(tenant)>:<tenant>:<id>     the earlier document batches, `DocumentBatches`
    {prefix}c:<model>                         calibration samples, a list, newest first (LPUSH)
    {prefix}index                             sorted set: member = record key, score = write time
    {prefix}lock:<len(tenant)>:<tenant>:<id>  single-flight lock: a random token, `NX PX lock_ttl`

Size bound: Redis has no per-namespace byte cap, so the store bounds the NUMBER of records
(entries and batches share the index; calibration lists are a handful per model, unindexed).
A put is one Lua script (atomic): it writes the value, indexes it at Redis's own `TIME` in µs
(one clock for every replica, so "oldest" means least recently stored, as in diskcache), then
pops the oldest members beyond `max_entries` and deletes their keys. With one TTL the members
whose key has expired are the oldest, so eviction drops them first, lazily; `entries()` drops
the expired members it meets. The index carries the entry TTL too, so an idle deployment
leaves nothing behind. Use a `maxmemory-policy` of `noeviction` or `volatile-*`: an
`allkeys-*` policy may evict the index itself.

Errors: a connection, timeout or server error raises `StoreError` naming
`general_settings.store.url` with the password redacted. A corrupt record is logged, deleted
(only if unchanged) and treated as a miss, as in the disk store.

Bounded time: every call (connect, send, answer, redis-py's one retry) ends within
`timeout_seconds` (default 1 s); a stalled Redis is a StoreError then, never a hung request.
After a call fails for want of a connection or an answer, the store is down: for
`retry_after_seconds` (default 5 s) every call fails at once without touching Redis, then the
next call tries again (one log line when it goes down, one when it is back). A request
therefore waits on a dead or stalled Redis at most once per `retry_after_seconds` window, about
`timeout_seconds`. Listing and clearing (admin) bound each command, not the whole scan.

Single flight: the in-process `SingleFlight` first (one replica's waiters do not poll Redis),
then `SET lock token NX PX lock_ttl`, polled with a 20-200 ms backoff. While held, a watchdog
renews the lock every `lock_ttl / 3` (only while it still holds this holder's token), so an
extraction that runs past `lock_ttl` keeps it. The lock is released by a compare-and-delete
script, so a holder whose lock expired never removes a successor's. A holder's `put` of the
conversation it holds is fenced: one script writes it only while the lock still holds the
holder's token, so a holder that lost its lock (renewal failed, Redis restarted) never writes
over a newer holder's result; its result is dropped and logged. A crashed holder blocks the
others for at most `lock_ttl`. A waiter still without the lock `wait_deadline` after it
arrived (queueing in this process included) proceeds without it, and so does a holder that
cannot reach Redis; both are logged, and their writes are not fenced. The lock never fails a
request: at worst two replicas extract the same conversation.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import re
import secrets
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass
from typing import Any, TypeVar

import redis.asyncio as redis
from pydantic import SecretStr
from redis.asyncio.retry import Retry
from redis.backoff import ExponentialBackoff
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import RedisError
from redis.exceptions import TimeoutError as RedisTimeoutError

from kernel.config import StoreSettings
from kernel.records import (
    CALIBRATION_SAMPLES,
    DocumentBatches,
    HistoryEntry,
    Record,
    StoredResponse,
    StoreError,
    decode,
)
from kernel.store import (
    BATCHES,
    CALIBRATION,
    DEFAULT_SIZE_LIMIT_BYTES,
    DEFAULT_TTL_SECONDS,
    HISTORY,
    RESPONSES,
    TENANT_KINDS,
    SingleFlight,
    key_of,
    prefix_of,
)

__all__ = ["RedisHistoryStore", "open_redis_store"]

log = logging.getLogger("overspill.store")

DEFAULT_KEY_PREFIX = "overspill:"
TYPICAL_ENTRY_BYTES = 32 * 1024
DEFAULT_MAX_ENTRIES = DEFAULT_SIZE_LIMIT_BYTES // TYPICAL_ENTRY_BYTES
DEFAULT_LOCK_TTL_SECONDS = 120.0
DEFAULT_WAIT_DEADLINE_SECONDS = 60.0
DEFAULT_TIMEOUT_SECONDS = 1.0
DEFAULT_RETRY_AFTER_SECONDS = 5.0
_POLL_FIRST_SECONDS = 0.02
_POLL_MAX_SECONDS = 0.2
_BATCH = 500
_URL_KEY = "general_settings.store.url"
_TIMEOUT_KEY = "general_settings.store.timeout_seconds"
_T = TypeVar("_T")
_R = TypeVar("_R", bound=Record)

# KEYS: entry, index[, lock]. ARGV: record, ttl ms, max entries[, token]. Returns how many
# entries it evicted; -1 (nothing written) when a lock is given and no longer holds the token.
_PUT = """
if KEYS[3] and redis.call('GET', KEYS[3]) ~= ARGV[4] then return -1 end
local now = redis.call('TIME')
local ttl = tonumber(ARGV[2])
redis.call('SET', KEYS[1], ARGV[1], 'PX', ttl)
redis.call('ZADD', KEYS[2], tonumber(now[1]) * 1000000 + tonumber(now[2]), KEYS[1])
redis.call('PEXPIRE', KEYS[2], ttl)
local excess = redis.call('ZCARD', KEYS[2]) - tonumber(ARGV[3])
local evicted = 0
if excess > 0 then
  local oldest = redis.call('ZPOPMIN', KEYS[2], excess)
  for i = 1, #oldest, 2 do evicted = evicted + redis.call('DEL', oldest[i]) end
end
return evicted
"""
# KEYS: index, then entry keys. Drops the members whose key has expired; returns how many.
_PURGE = """
local dropped = 0
for i = 2, #KEYS do
  if redis.call('EXISTS', KEYS[i]) == 0 then
    dropped = dropped + redis.call('ZREM', KEYS[1], KEYS[i])
  end
end
return dropped
"""
# KEYS: key, index. ARGV: expected value. Deletes the key only if it still holds the value.
_DELETE_IF = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('ZREM', KEYS[2], KEYS[1])
  return redis.call('DEL', KEYS[1])
end
return 0
"""
# KEYS: lock. ARGV: token. Releases the lock only if this holder still owns it.
_RELEASE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"""
# KEYS: lock. ARGV: token, ttl ms. Renews the lock only if this holder still owns it.
_RENEW = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('PEXPIRE', KEYS[1], ARGV[2]) end
return 0
"""


@dataclass(eq=False)
class _Hold:
    """A held single-flight lock: its key, this holder's token, whether it was lost."""

    tenant: str
    conversation_id: str
    lock: str
    token: str
    lost: bool = False


_HELD: contextvars.ContextVar[_Hold | None] = contextvars.ContextVar("overspill_lock", default=None)
"""The lock the current task holds (set inside `single_flight`), for fenced writes."""


class RedisHistoryStore:
    """A HistoryStore in Redis, shared by replicas; single flight holds a Redis lock too."""

    def __init__(
        self,
        url: str,
        *,
        key_prefix: str = DEFAULT_KEY_PREFIX,
        ttl_seconds: float = DEFAULT_TTL_SECONDS,
        max_entries: int = DEFAULT_MAX_ENTRIES,
        lock_ttl: float = DEFAULT_LOCK_TTL_SECONDS,
        wait_deadline: float = DEFAULT_WAIT_DEADLINE_SECONDS,
        timeout_seconds: float = DEFAULT_TIMEOUT_SECONDS,
        retry_after: float = DEFAULT_RETRY_AFTER_SECONDS,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        for name, value in [
            ("ttl_seconds", ttl_seconds),
            ("max_entries", max_entries),
            ("lock_ttl", lock_ttl),
            ("timeout_seconds", timeout_seconds),
        ]:
            if value <= 0:
                raise ValueError(f"{name} must be positive, got {value}")
        for name, value in [("wait_deadline", wait_deadline), ("retry_after", retry_after)]:
            if value < 0:
                raise ValueError(f"{name} cannot be negative, got {value}")
        self.url = redact(url)
        self.key_prefix = key_prefix
        self.ttl_seconds = ttl_seconds
        self.max_entries = max_entries
        self.lock_ttl = lock_ttl
        self.wait_deadline = wait_deadline
        self.timeout_seconds = timeout_seconds
        self.retry_after = retry_after
        self.flights = SingleFlight()
        self._monotonic = monotonic
        self._down_until = 0.0
        """Until when (time.monotonic) calls fail at once: Redis failed to connect or answer."""
        self._down_reason = ""
        self._index = f"{key_prefix}index"
        try:
            self._redis: redis.Redis = redis.Redis.from_url(
                url,
                socket_timeout=timeout_seconds,
                socket_connect_timeout=timeout_seconds,
                retry=Retry(ExponentialBackoff(cap=0.1, base=0.01), retries=1),
            )
        except ValueError as exc:
            raise StoreError(f"{_URL_KEY} ({self.url}) is not a Redis URL: {exc}") from None
        self._put = self._redis.register_script(_PUT)
        self._purge = self._redis.register_script(_PURGE)
        self._delete_if = self._redis.register_script(_DELETE_IF)
        self._release = self._redis.register_script(_RELEASE)
        self._renew = self._redis.register_script(_RENEW)

    async def get(self, tenant: str, conversation_id: str) -> HistoryEntry | None:
        """The tenant's entry for the conversation, or None (missing, expired or corrupt)."""
        return await self._get(self._key(HISTORY, tenant, conversation_id), HistoryEntry)

    async def put(self, entry: HistoryEntry) -> None:
        """Write the entry atomically (value, index, eviction), replacing any previous one;
        inside the entry's own single flight, only while the lock is still this holder's."""
        key = self._key(HISTORY, entry.tenant, entry.conversation_id)
        hold = _HELD.get()
        if hold is None or (hold.tenant, hold.conversation_id) != (
            entry.tenant,
            entry.conversation_id,
        ):
            await self._write(key, entry)
            return
        if hold.lost or await self._write(key, entry, fence=hold) < 0:
            hold.lost = True
            log.warning(
                "single-flight lock passed to another holder; this result is not stored",
                extra={"lock": hold.lock, "url": self.url},
            )

    async def get_batches(self, tenant: str, conversation_id: str) -> DocumentBatches | None:
        """The conversation's earlier document batches, or None."""
        return await self._get(self._key(BATCHES, tenant, conversation_id), DocumentBatches)

    async def put_batches(self, record: DocumentBatches) -> None:
        """Write the batches atomically (value, index, eviction), replacing the previous ones."""
        await self._write(self._key(BATCHES, record.tenant, record.conversation_id), record)

    async def get_response(self, tenant: str, response_id: str) -> StoredResponse | None:
        """The tenant's stored response, or None."""
        return await self._get(self._key(RESPONSES, tenant, response_id), StoredResponse)

    async def get_responses(
        self, tenant: str, response_ids: Sequence[str]
    ) -> list[StoredResponse | None]:
        """The tenant's stored responses with these ids, in order, in one MGET per batch."""
        keys = [self._key(RESPONSES, tenant, response_id) for response_id in response_ids]
        found: list[StoredResponse | None] = []
        for start in range(0, len(keys), _BATCH):
            batch = keys[start : start + _BATCH]
            values = await self._call(f"read {len(batch)} responses", self._redis.mget(batch))
            for key, raw in zip(batch, values, strict=True):
                found.append(await self._decode(key, raw, StoredResponse))
        return found

    async def put_response(self, record: StoredResponse, ttl_seconds: float) -> None:
        """Write a response record atomically (value, index, eviction), expiring after
        `ttl_seconds`."""
        await self._write(self._key(RESPONSES, record.tenant, record.id), record, ttl=ttl_seconds)

    async def delete_response(self, tenant: str, response_id: str) -> bool:
        """Remove the tenant's response record; whether there was one."""
        key = self._key(RESPONSES, tenant, response_id)
        async with self._redis.pipeline(transaction=True) as pipe:
            pipe.delete(key)
            pipe.zrem(self._index, key)
            deleted, _ = await self._call(f"delete {key!r}", pipe.execute())
        return bool(deleted)

    async def calibration(self, model: str) -> tuple[float, ...]:
        """A model's calibration samples, newest first."""
        key = f"{self.key_prefix}{CALIBRATION}{model}"
        found = await self._call("read calibration", self._redis.lrange(key, 0, -1))
        return tuple(float(value) for value in found)

    async def add_calibration(self, model: str, ratio: float) -> None:
        """Record one calibration sample atomically (the oldest beyond the cap go)."""
        key = f"{self.key_prefix}{CALIBRATION}{model}"
        async with self._redis.pipeline(transaction=True) as pipe:
            pipe.lpush(key, repr(float(ratio)))
            pipe.ltrim(key, 0, CALIBRATION_SAMPLES - 1)
            pipe.pexpire(key, _ms(self.ttl_seconds))
            await self._call("write calibration", pipe.execute())

    async def delete(self, tenant: str, conversation_id: str) -> bool:
        """Remove a conversation's records (both kinds); whether there were any."""
        keys = [self._key(kind, tenant, conversation_id) for kind in (HISTORY, BATCHES)]
        async with self._redis.pipeline(transaction=True) as pipe:
            pipe.delete(*keys)
            pipe.zrem(self._index, *keys)
            deleted, _ = await self._call(f"delete {keys[0]!r}", pipe.execute())
        return bool(deleted)

    async def clear(self, tenant: str | None = None) -> int:
        """Remove the tenant's records (every tenant's when None); how many were removed."""
        keys: set[str] = set()
        for kind in TENANT_KINDS:
            prefix = self._prefix(kind, tenant)
            pattern = _glob_escape(prefix) + "*"
            found = self._redis.scan_iter(match=pattern, count=_BATCH)
            keys |= set(await self._scan(prefix, found))
            keys |= set(await self._indexed(prefix))
        prefix = self._prefix(HISTORY, tenant)
        removed = 0
        ordered = sorted(keys)
        for start in range(0, len(ordered), _BATCH):
            batch = ordered[start : start + _BATCH]
            async with self._redis.pipeline(transaction=True) as pipe:
                pipe.delete(*batch)
                pipe.zrem(self._index, *batch)
                deleted, _ = await self._call(f"clear {prefix!r}*", pipe.execute())
            removed += int(deleted)
        return removed

    async def entries(self, tenant: str | None = None) -> list[HistoryEntry]:
        """The live entries of a tenant (or of all), ordered by tenant and conversation id."""
        prefix = self._prefix(HISTORY, tenant)
        keys = await self._indexed(prefix)
        found: list[HistoryEntry] = []
        for start in range(0, len(keys), _BATCH):
            batch = keys[start : start + _BATCH]
            values = await self._call(f"list {prefix!r}*", self._redis.mget(batch))
            gone = [key for key, raw in zip(batch, values, strict=True) if raw is None]
            if gone:
                await self._call(
                    "drop expired index members", self._purge(keys=[self._index, *gone])
                )
            for key, raw in zip(batch, values, strict=True):
                if (entry := await self._decode(key, raw, HistoryEntry)) is not None:
                    found.append(entry)
        return sorted(found, key=lambda entry: (entry.tenant, entry.conversation_id))

    async def ping(self) -> None:
        """Raise StoreError unless Redis can be written and read (readiness probe)."""
        key = f"{self.key_prefix}ping"
        await self._call("write the readiness key", self._redis.set(key, b"1", px=60_000))
        if await self._call("read the readiness key", self._redis.get(key)) is None:
            raise StoreError(f"the readiness key vanished in Redis at {self.url} ({_URL_KEY})")

    def single_flight(self, tenant: str, conversation_id: str) -> AbstractAsyncContextManager[None]:
        """Hold the key's flight in this process and in Redis; re-read the store after entering."""
        return self._flight(tenant, conversation_id)

    async def flight_busy(self, tenant: str, conversation_id: str) -> bool:
        """Whether the key's flight is held here or its Redis lock by any replica (a Redis
        error counts as free: the lock itself still serialises the holders)."""
        if self.flights.held(tenant, conversation_id):
            return True
        lock = f"{self.key_prefix}lock:{len(tenant)}:{tenant}:{conversation_id}"
        try:
            return bool(await self._redis.exists(lock))
        except (RedisError, OSError) as exc:
            log.warning("single-flight lock not readable", extra={"lock": lock, "error": str(exc)})
            return False

    async def aclose(self) -> None:
        """Close the connection pool (idempotent)."""
        await self._redis.aclose()

    @asynccontextmanager
    async def _flight(self, tenant: str, conversation_id: str) -> AsyncIterator[None]:
        deadline = self._monotonic() + self.wait_deadline  # counted from arrival, not from turn
        async with self.flights.hold(tenant, conversation_id):
            lock = f"{self.key_prefix}lock:{len(tenant)}:{tenant}:{conversation_id}"
            token = await self._acquire(lock, deadline)
            if token is None:
                yield
                return
            hold = _Hold(tenant, conversation_id, lock, token)
            watchdog = asyncio.get_running_loop().create_task(self._watch(hold))
            held = _HELD.set(hold)
            try:
                yield
            finally:
                _HELD.reset(held)
                watchdog.cancel()
                await asyncio.gather(watchdog, return_exceptions=True)
                await self._unlock(lock, token)

    async def _watch(self, hold: _Hold) -> None:
        """Renew the lock every lock_ttl / 3 while it is held; stop once it is lost."""
        while True:
            await asyncio.sleep(self.lock_ttl / 3)
            try:
                renew = self._renew(keys=[hold.lock], args=[hold.token, _ms(self.lock_ttl)])
                renewed = await self._call("renew the single-flight lock", renew)
            except StoreError as exc:
                log.warning(
                    "single-flight lock not renewed; trying again",
                    extra={"lock": hold.lock, "url": self.url, "error": str(exc)},
                )
                continue
            if not renewed:
                hold.lost = True
                log.warning(
                    "single-flight lock lost (expired or taken over); this holder's result "
                    "will not be stored",
                    extra={"lock": hold.lock, "url": self.url},
                )
                return

    async def _acquire(self, lock: str, deadline: float) -> str | None:
        """The lock's token once held; None when proceeding without it (deadline or error)."""
        token = secrets.token_hex(16)
        pause = _POLL_FIRST_SECONDS
        while True:
            try:
                taken = self._redis.set(lock, token, nx=True, px=_ms(self.lock_ttl))
                if await self._call("take the single-flight lock", taken):
                    return token
            except StoreError as exc:
                log.error(
                    "single-flight lock unavailable; proceeding without it",
                    extra={"lock": lock, "url": self.url, "error": str(exc)},
                )
                return None
            left = deadline - self._monotonic()
            if left <= 0:
                log.warning(
                    "single-flight lock still held after %.1f s; proceeding without it",
                    self.wait_deadline,
                    extra={"lock": lock, "url": self.url},
                )
                return None
            await asyncio.sleep(min(pause, left))
            pause = min(pause * 2, _POLL_MAX_SECONDS)

    async def _unlock(self, lock: str, token: str) -> None:
        """Release the lock if still ours; a lost lock or a Redis error is only logged."""
        try:
            released = await self._call(
                "release the single-flight lock", self._release(keys=[lock], args=[token])
            )
        except StoreError as exc:
            log.warning(
                "single-flight lock not released; it expires by itself",
                extra={"lock": lock, "url": self.url, "error": str(exc)},
            )
            return
        if not released:
            log.warning(
                "single-flight lock expired before release (not renewed within lock_ttl "
                "%.1f s, or removed); a successor's lock is left alone",
                self.lock_ttl,
                extra={"lock": lock, "url": self.url},
            )

    async def _get(self, key: str, kind: type[_R]) -> _R | None:
        raw = await self._call(f"read {key!r}", self._redis.get(key))
        return await self._decode(key, raw, kind)

    async def _write(
        self, key: str, record: Record, fence: _Hold | None = None, ttl: float | None = None
    ) -> int:
        """Write a record (expiring after `ttl`, default the store's); with `fence`, only while
        its lock holds its token (-1: not written)."""
        keys = [key, self._index]
        expire = _ms(self.ttl_seconds if ttl is None else ttl)
        args: list[bytes | int | str] = [record.to_json(), expire, self.max_entries]
        if fence is not None:
            keys.append(fence.lock)
            args.append(fence.token)
        return int(await self._call(f"write {key!r}", self._put(keys=keys, args=args)))

    async def _decode(self, key: str, found: bytes | str | None, kind: type[_R]) -> _R | None:
        if found is None:
            return None
        raw = found.encode() if isinstance(found, str) else found
        try:
            entry = decode(kind, raw)
            kind_prefix = key[len(self.key_prefix) : len(self.key_prefix) + 2]
            if key != self._key(kind_prefix, entry.tenant, entry.key_id):
                raise StoreError("history record belongs to another key")
        except StoreError as exc:
            log.warning(
                "corrupt history record deleted: %s", exc, extra={"key": key, "url": self.url}
            )
            delete = self._delete_if(keys=[key, self._index], args=[raw])
            await self._call(f"delete corrupt {key!r}", delete)
            return None
        return entry

    async def _indexed(self, prefix: str) -> list[str]:
        """The indexed entry keys under `prefix` (live or expired), in no particular order."""
        pattern = _glob_escape(prefix) + "*"
        members = self._redis.zscan_iter(self._index, match=pattern, count=_BATCH)
        return await self._scan(prefix, (member async for member, _ in members))

    async def _scan(self, prefix: str, found: AsyncIterator[Any]) -> list[str]:
        async def collect() -> list[str]:
            return [key.decode() async for key in found]

        # a scan is many commands: each is bounded by the socket timeout, not the whole
        return await self._call(f"list {prefix!r}*", collect(), bounded=False)

    async def _call(self, what: str, pending: Awaitable[_T], *, bounded: bool = True) -> _T:
        """Await one Redis call within timeout_seconds; a failure is a StoreError, and a
        failure to connect or answer marks Redis down for retry_after (calls fail at once)."""
        left = self._down_until - time.monotonic()
        if left > 0:
            if isinstance(pending, Coroutine):
                pending.close()  # never started: no "never awaited" warning
            raise StoreError(
                f"cannot {what}: Redis at {self.url} ({_URL_KEY}) is unavailable "
                f"({self._down_reason}); the next try is in {left:.1f} s"
            )
        try:
            if bounded:
                async with asyncio.timeout(self.timeout_seconds):
                    found = await pending
            else:
                found = await pending
        except TimeoutError as exc:  # the whole call, retry included, took too long
            reason = f"no answer within {self.timeout_seconds:g} s ({_TIMEOUT_KEY})"
            self._went_down(reason)
            raise StoreError(f"cannot {what} in Redis at {self.url}: {reason}") from exc
        except (RedisError, OSError) as exc:
            reason = f"{type(exc).__name__}: {exc}"
            if isinstance(exc, RedisConnectionError | RedisTimeoutError | OSError):
                self._went_down(reason)
            raise StoreError(
                f"cannot {what} in Redis at {self.url} ({_URL_KEY}): {reason}"
            ) from exc
        if self._down_reason:
            self._down_reason = ""
            log.info("history store reachable again", extra={"url": self.url})
        return found

    def _went_down(self, reason: str) -> None:
        """Redis did not connect or answer: calls fail at once for retry_after (logged once)."""
        if not self._down_reason:
            log.error(
                "history store unavailable; requests go on without it",
                extra={"url": self.url, "error": reason, "retry_after_seconds": self.retry_after},
            )
        self._down_reason = reason
        self._down_until = time.monotonic() + self.retry_after

    def _key(self, kind: str, tenant: str, conversation_id: str) -> str:
        return self.key_prefix + key_of(kind, tenant, conversation_id)

    def _prefix(self, kind: str, tenant: str | None) -> str:
        return self.key_prefix + prefix_of(kind, tenant)


def open_redis_store(settings: StoreSettings) -> RedisHistoryStore:
    """Build the Redis backend from `general_settings.store` (url required)."""
    url = getattr(settings, "url", None)
    secret = url.get_secret_value() if isinstance(url, SecretStr) else url
    if not secret:
        raise StoreError(f"{_URL_KEY} is required when general_settings.store.backend is redis")
    size_limit = getattr(settings, "size_limit_bytes", DEFAULT_SIZE_LIMIT_BYTES)
    max_entries = getattr(settings, "max_entries", None)
    try:
        return RedisHistoryStore(
            str(secret),
            key_prefix=getattr(settings, "key_prefix", DEFAULT_KEY_PREFIX),
            ttl_seconds=getattr(settings, "ttl_seconds", DEFAULT_TTL_SECONDS),
            max_entries=max_entries or max(1, size_limit // TYPICAL_ENTRY_BYTES),
            lock_ttl=getattr(settings, "lock_ttl_seconds", DEFAULT_LOCK_TTL_SECONDS),
            wait_deadline=getattr(settings, "lock_wait_seconds", DEFAULT_WAIT_DEADLINE_SECONDS),
            timeout_seconds=getattr(settings, "timeout_seconds", DEFAULT_TIMEOUT_SECONDS),
            retry_after=getattr(settings, "retry_after_seconds", DEFAULT_RETRY_AFTER_SECONDS),
        )
    except ValueError as exc:
        raise StoreError(f"general_settings.store: {exc}") from exc


def redact(url: str) -> str:
    """The URL with any password (userinfo or `password=` parameter) replaced by `***`."""
    scheme, sep, rest = url.partition("://")
    if sep and "@" in rest:
        userinfo, _, where = rest.rpartition("@")  # a raw "@" in a password stays hidden
        name, colon, _ = userinfo.partition(":")
        rest = f"{name}:***@{where}" if colon else rest
    return scheme + sep + re.sub(r"(?i)([?&]password=)[^&#]*", r"\1***", rest)


def _glob_escape(text: str) -> str:
    """`text` as a literal in a Redis MATCH pattern."""
    return re.sub(r"([\\*?\[\]])", r"\\\1", text)


def _ms(seconds: float) -> int:
    return max(1, round(seconds * 1000))
