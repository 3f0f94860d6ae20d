"""The Redis history store: conversation state shared by replicas, on one Redis, a Redis Cluster
or a Sentinel-managed primary (kernel/redis_url.py says how the URL names each).

    RedisHistoryStore    a HistoryStore in Redis (redis.asyncio), for replicas on several hosts
    open_redis_store     build one from `general_settings.store` (backend: redis)

Keys (kernel/redis_keys.py) live under `key_prefix` (default `overspill:`), tenant-namespaced
as in the disk store; in a cluster every key of a conversation carries its bucket's hash tag:

    {prefix}h:<len(tenant)>:<tenant>:<id>     the entry, `HistoryEntry.to_json()`, `SET ... PX ttl`
    {prefix}d:<len(tenant)>:<tenant>:<id>     the earlier document batches, `DocumentBatches`
    {prefix}c:<model>                         calibration samples, a list, newest first (LPUSH)
    {prefix}index                             sorted set: member = record key, score = expiry
    {prefix}lock:<len(tenant)>:<tenant>:<id>  single-flight lock (kernel/redis_flight.py)
    {prefix}u:<len(tenant)>:<tenant>:<day>    own-call usage of a UTC day: a hash of
                                              `<model>|calls|failed|in|out` counters (HINCRBY)
    {prefix}u-tenants:<day>                   the tenants with usage that day (a set)

Retention: each kind of record has its TTL (`ttl_seconds`, or `ttl_seconds_by_kind`). Size
bound: Redis has no per-namespace byte cap, so the store bounds the NUMBER of records (every
conversation kind shares the index; calibration lists are a handful per model, unindexed). A
put is one Lua script (atomic, on one slot): it writes the value, drops the index members that
have expired, indexes the record at its expiry (Redis's own `TIME` in µs plus its TTL: one
clock for every replica), then pops the members beyond `max_entries` that expire soonest
(with one TTL: the least recently stored, as in diskcache) and deletes their keys. In a cluster
each bucket keeps its own index and an equal share of `max_entries`. An index carries the
longest TTL of its members, so an idle deployment leaves nothing behind. Use a
`maxmemory-policy` of `noeviction` or `volatile-*`: an `allkeys-*` policy may evict an index.

Listing and clearing (admin, `overspill conversations`) SCAN every primary (each node of a
cluster) and check each key's layout exactly, so a tenant never lists or clears another's.

Errors: a connection, timeout or server error raises `StoreError` naming
`general_settings.store.url` with the password redacted. A corrupt record is logged, deleted
(only if unchanged) and treated as a miss, as in the disk store.

Bounded time (kernel/redis_client.py): every call ends within `timeout_seconds` (default 1 s),
and after a call fails for want of a connection or an answer, every call fails at once for
`retry_after_seconds` (default 5 s). Listing and clearing bound each command, not the whole
scan.

Failover: what a write acknowledged just before the primary failed can lose, and what the lock
does about it, is in kernel/redis_flight.py: records are not waited for (a lost one is a cache
miss, as an evicted one), the lock is (`WAIT` for `lock_replicas`). A record is whole or absent
on the new primary too: a script's writes reach a replica as one transaction.
"""

from __future__ import annotations

import logging
import time
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from typing import TypeVar

from pydantic import SecretStr

from kernel.config import StoreSettings
from kernel.records import (
    CALIBRATION,
    CALIBRATION_SAMPLES,
    CONVERSATION_KINDS,
    DOCUMENTS,
    EXTRACTIONS,
    RESPONSES,
    TENANT_KINDS,
    DocumentBatches,
    HistoryEntry,
    Kind,
    Record,
    StoredResponse,
    StoreError,
    decode,
)
from kernel.redis_client import URL_KEY, RedisClient, connect
from kernel.redis_flight import Hold, RedisFlights
from kernel.redis_keys import CLUSTER_BUCKETS, KeyLayout
from kernel.redis_url import parse_redis_url, redact
from kernel.spending import Tally, UsageRow
from kernel.store import (
    DEFAULT_SIZE_LIMIT_BYTES,
    DEFAULT_TTL_SECONDS,
    USAGE,
    key_of,
    usage_key_parts,
)

__all__ = ["RedisHistoryStore", "open_redis_store", "redact"]

log = logging.getLogger("overspill.store")

DEFAULT_KEY_PREFIX = "overspill:"
TYPICAL_ENTRY_BYTES = 32 * 1024
DEFAULT_MAX_ENTRIES = DEFAULT_SIZE_LIMIT_BYTES // TYPICAL_ENTRY_BYTES
DEFAULT_LOCK_TTL_SECONDS = 120.0
DEFAULT_WAIT_DEADLINE_SECONDS = 60.0
DEFAULT_TIMEOUT_SECONDS = 1.0
DEFAULT_RETRY_AFTER_SECONDS = 5.0
_BATCH = 500
_R = TypeVar("_R", bound=Record)
_USAGE_FIELDS = ("calls", "failed", "in", "out")
_USAGE_ATTRIBUTES = {
    "calls": "calls", "failed": "failed", "in": "prompt_tokens", "out": "completion_tokens"
}  # fmt: skip

# KEYS: record, index[, lock]. ARGV: record, ttl ms, the bucket's bound[, token]. Returns how
# many records it evicted; -1 (nothing written) when a lock is given and no longer holds the token.
_PUT = """
if KEYS[3] and redis.call('GET', KEYS[3]) ~= ARGV[4] then return -1 end
local now = redis.call('TIME')
local now_us = tonumber(now[1]) * 1000000 + tonumber(now[2])
local ttl = tonumber(ARGV[2])
redis.call('SET', KEYS[1], ARGV[1], 'PX', ttl)
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now_us)
redis.call('ZADD', KEYS[2], now_us + ttl * 1000, KEYS[1])
if redis.call('PTTL', KEYS[2]) < ttl then redis.call('PEXPIRE', KEYS[2], ttl) end
local excess = redis.call('ZCARD', KEYS[2]) - tonumber(ARGV[3])
local evicted = 0
if excess > 0 then
  local soonest = redis.call('ZPOPMIN', KEYS[2], excess)
  for i = 1, #soonest, 2 do evicted = evicted + redis.call('DEL', soonest[i]) end
end
return evicted
"""
# KEYS: index, then record keys (one bucket). Deletes and unindexes them; returns how many were.
_DELETE = """
local deleted = 0
for i = 2, #KEYS do
  deleted = deleted + redis.call('DEL', KEYS[i])
  redis.call('ZREM', KEYS[1], KEYS[i])
end
return deleted
"""
# KEYS: key, index. ARGV: expected value. Deletes the key only if it still holds the value.
_DELETE_IF = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('ZREM', KEYS[2], KEYS[1])
  return redis.call('DEL', KEYS[1])
end
return 0
"""
# KEYS: samples. ARGV: sample, cap, ttl ms. Records one calibration sample, newest first.
_ADD_SAMPLE = """
redis.call('LPUSH', KEYS[1], ARGV[1])
redis.call('LTRIM', KEYS[1], 0, tonumber(ARGV[2]) - 1)
return redis.call('PEXPIRE', KEYS[1], ARGV[3])
"""
# KEYS: a usage hash. ARGV: ttl ms, then field, amount pairs. One script: the counts and the
# key's expiry land together (a transaction pipeline would need one slot on a cluster anyway).
_ADD_USAGE = """
for i = 2, #ARGV, 2 do redis.call('HINCRBY', KEYS[1], ARGV[i], ARGV[i + 1]) end
redis.call('PEXPIRE', KEYS[1], ARGV[1])
"""
# KEYS: a set. ARGV: member, ttl ms.
_ADD_MEMBER = """
redis.call('SADD', KEYS[1], ARGV[1])
redis.call('PEXPIRE', KEYS[1], ARGV[2])
"""


class RedisHistoryStore:
    """A HistoryStore in Redis, shared by replicas; single flight holds a Redis lock too."""

    def __init__(
        self,
        url: str,
        *,
        key_prefix: str = DEFAULT_KEY_PREFIX,
        ttl_seconds: float = DEFAULT_TTL_SECONDS,
        ttl_by_kind: Mapping[str, float] | None = None,
        max_entries: int = DEFAULT_MAX_ENTRIES,
        lock_ttl: float = DEFAULT_LOCK_TTL_SECONDS,
        wait_deadline: float = DEFAULT_WAIT_DEADLINE_SECONDS,
        timeout_seconds: float = DEFAULT_TIMEOUT_SECONDS,
        retry_after: float = DEFAULT_RETRY_AFTER_SECONDS,
        lock_replicas: int | None = None,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        ttls = dict(ttl_by_kind or {})
        for name, value in [
            ("ttl_seconds", ttl_seconds),
            *((f"ttl_by_kind[{kind}]", ttl) for kind, ttl in ttls.items()),
            ("max_entries", max_entries),
            ("lock_ttl", lock_ttl),
            ("timeout_seconds", timeout_seconds),
        ]:
            if value <= 0:
                raise ValueError(f"{name} must be positive, got {value}")
        for name, value in [("wait_deadline", wait_deadline), ("retry_after", retry_after)]:
            if value < 0:
                raise ValueError(f"{name} cannot be negative, got {value}")
        if lock_replicas is not None and lock_replicas < 0:
            raise ValueError(f"lock_replicas cannot be negative, got {lock_replicas}")
        shown = redact(url)
        try:
            target = parse_redis_url(url)
        except ValueError as exc:
            raise StoreError(f"{URL_KEY} ({shown}) is not a Redis URL: {exc}") from None
        buckets = CLUSTER_BUCKETS if target.mode == "cluster" else 1
        if max_entries < buckets:
            raise ValueError(
                f"max_entries must be at least {buckets} with a Redis Cluster (each of its "
                f"{buckets} key buckets keeps an equal share; without max_entries it is "
                f"size_limit_bytes / {TYPICAL_ENTRY_BYTES // 1024} KiB), got {max_entries}"
            )
        try:
            self.client: RedisClient = connect(
                target, timeout_seconds=timeout_seconds, retry_after=retry_after
            )
        except ValueError as exc:
            raise StoreError(f"{URL_KEY} ({shown}) is not a Redis URL: {exc}") from None
        self.url = shown
        self.layout = KeyLayout(key_prefix, buckets)
        self.key_prefix = key_prefix
        self.ttl_seconds = ttl_seconds
        self.ttls = ttls
        self.max_entries = max_entries
        self.timeout_seconds = timeout_seconds
        self.retry_after = retry_after
        self.flights = RedisFlights(
            self.client,
            self.layout,
            lock_ttl=lock_ttl,
            wait_deadline=wait_deadline,
            replicas=int(target.follows_failover) if lock_replicas is None else lock_replicas,
            monotonic=monotonic,
        )
        redis = self.client.redis
        self._put = redis.register_script(_PUT)
        self._delete = redis.register_script(_DELETE)
        self._delete_if = redis.register_script(_DELETE_IF)
        self._add_sample = redis.register_script(_ADD_SAMPLE)
        self._add_usage = redis.register_script(_ADD_USAGE)
        self._add_member = redis.register_script(_ADD_MEMBER)

    @property
    def lock_ttl(self) -> float:
        """How long a crashed holder's lock blocks the others."""
        return self.flights.lock_ttl

    @property
    def wait_deadline(self) -> float:
        """How long a waiter waits for the lock before it proceeds without it."""
        return self.flights.wait_deadline

    def ttl_of(self, kind: str) -> float:
        """A kind's TTL in seconds (`ttl_seconds` unless `ttl_by_kind` names it)."""
        return self.ttls.get(kind, self.ttl_seconds)

    async def get(self, tenant: str, conversation_id: str) -> HistoryEntry | None:
        """The tenant's entry for the conversation, or None (missing, expired or corrupt)."""
        return await self._read(EXTRACTIONS, HistoryEntry, tenant, conversation_id)

    async def put(self, entry: HistoryEntry) -> None:
        """Write the entry atomically (value, index, eviction), replacing any previous one;
        inside the entry's own single flight, only while the lock is still this holder's."""
        hold = self.flights.fence(entry.tenant, entry.conversation_id)
        if hold is None:
            await self._write(EXTRACTIONS, entry)
            return
        if hold.lost or await self._write(EXTRACTIONS, entry, fence=hold) < 0:
            hold.lost = True
            log.warning(
                "single-flight lock passed to another holder; this result is not stored",
                extra={"lock": hold.lock, "url": self.url},
            )

    async def get_batches(self, tenant: str, conversation_id: str) -> DocumentBatches | None:
        """The conversation's earlier document batches, or None."""
        return await self._read(DOCUMENTS, DocumentBatches, tenant, conversation_id)

    async def put_batches(self, record: DocumentBatches) -> None:
        """Write the batches atomically (value, index, eviction), replacing the previous ones."""
        await self._write(DOCUMENTS, record)

    async def get_response(self, tenant: str, response_id: str) -> StoredResponse | None:
        """The tenant's stored response, or None."""
        return await self._read(RESPONSES, StoredResponse, tenant, response_id)

    async def get_responses(
        self, tenant: str, response_ids: Sequence[str]
    ) -> list[StoredResponse | None]:
        """The tenant's stored responses with these ids, in order: one MGET per batch (per slot
        on a cluster, pipelined)."""
        keys = [self.layout.record(RESPONSES, tenant, response_id) for response_id in response_ids]
        found: list[StoredResponse | None] = []
        for start in range(0, len(keys), _BATCH):
            batch = keys[start : start + _BATCH]
            values = await self.client.call(f"read {len(batch)} responses", self.client.read(batch))
            for key, raw in zip(batch, values, strict=True):
                found.append(await self._decode(key, raw, RESPONSES, StoredResponse))
        return found

    async def put_response(self, record: StoredResponse) -> None:
        """Write a response record atomically (value, index, eviction), expiring after the
        responses TTL."""
        await self._write(RESPONSES, record)

    async def delete_response(self, tenant: str, response_id: str) -> bool:
        """Remove the tenant's response record; whether there was one."""
        key = self.layout.record(RESPONSES, tenant, response_id)
        index = self.layout.index(self.layout.bucket(tenant, response_id))
        return bool(await self.client.call(f"delete {key!r}", self._delete(keys=[index, key])))

    async def calibration(self, model: str) -> tuple[float, ...]:
        """A model's calibration samples, newest first."""
        key = self.layout.calibration(model)
        found = await self.client.call("read calibration", self.client.redis.lrange(key, 0, -1))
        return tuple(float(value) for value in found)

    async def add_calibration(self, model: str, ratio: float) -> None:
        """Record one calibration sample atomically (the oldest beyond the cap go)."""
        key = self.layout.calibration(model)
        ttl = _ms(self.ttl_of(CALIBRATION))
        adding = self._add_sample(keys=[key], args=[repr(float(ratio)), CALIBRATION_SAMPLES, ttl])
        await self.client.call("write calibration", adding)

    async def add_usage(
        self, tenant: str, day: str, model: str, tally: Tally, keep_seconds: float
    ) -> None:
        """Add one model's own-call counts to the tenant's usage of a UTC day (HINCRBY: atomic
        across replicas), and list the tenant under that day."""
        key = self._usage_key(tenant, day)
        counts = (tally.calls, tally.failed, tally.prompt_tokens, tally.completion_tokens)
        args: list[bytes | int | str] = [_ms(keep_seconds)]
        for name, amount in zip(_USAGE_FIELDS, counts, strict=True):
            if amount:
                args += [f"{model}|{name}", amount]
        adding = self._add_usage(keys=[key], args=args)
        await self.client.call(f"count usage {key!r}", adding)
        tenants = f"{self.key_prefix}u-tenants:{day}"
        listing = self._add_member(keys=[tenants], args=[tenant, _ms(keep_seconds)])
        await self.client.call(f"list usage {tenants!r}", listing)

    async def usage(self, tenant: str | None, days: Sequence[str]) -> list[UsageRow]:
        """The usage rows of a tenant (of every tenant when None) on the given days."""
        keys: list[str] = []
        for day in days:
            if tenant is not None:
                keys.append(self._usage_key(tenant, day))
                continue
            listed = self.client.redis.smembers(f"{self.key_prefix}u-tenants:{day}")
            for name in sorted(await self.client.call("list usage", listed)):
                owner = name.decode() if isinstance(name, bytes) else str(name)
                keys.append(self._usage_key(owner, day))
        rows: list[UsageRow] = []
        for key in keys:
            found = await self.client.call(f"read {key!r}", self.client.redis.hgetall(key))
            owner, day = usage_key_parts(key.removeprefix(self.key_prefix))
            tallies: dict[str, Tally] = {}
            for field, value in found.items():
                text = field.decode() if isinstance(field, bytes) else str(field)
                model, _, name = text.rpartition("|")
                if name in _USAGE_FIELDS and model:
                    tally = tallies.setdefault(model, Tally())
                    setattr(tally, _USAGE_ATTRIBUTES[name], int(value))
            rows += [UsageRow(owner, day, model, tally) for model, tally in tallies.items()]
        return rows

    async def delete(self, tenant: str, conversation_id: str) -> bool:
        """Remove a conversation's records (every kind); whether there were any."""
        keys = [self.layout.record(kind, tenant, conversation_id) for kind in CONVERSATION_KINDS]
        index = self.layout.index(self.layout.bucket(tenant, conversation_id))
        deleting = self._delete(keys=[index, *keys])
        return bool(await self.client.call(f"delete {keys[0]!r}", deleting))

    async def clear(self, tenant: str | None = None) -> int:
        """Remove the tenant's records (every tenant's when None); how many were removed."""
        by_bucket: dict[int, set[str]] = defaultdict(set)
        for kind in TENANT_KINDS:
            for key, _, owner_tenant, owner in await self._listed(kind, tenant):
                by_bucket[self.layout.bucket(owner_tenant, owner)].add(key)
        what = f"clear {self.layout.pattern(EXTRACTIONS, tenant)!r}"
        removed = 0
        for bucket, found in sorted(by_bucket.items()):
            ordered = sorted(found)
            for start in range(0, len(ordered), _BATCH):
                keys = [self.layout.index(bucket), *ordered[start : start + _BATCH]]
                removed += int(await self.client.call(what, self._delete(keys=keys)))
        return removed

    async def entries(self, tenant: str | None = None) -> list[HistoryEntry]:
        """The live entries of a tenant (or of all), ordered by tenant and conversation id."""
        keys = [key for key, *_ in await self._listed(EXTRACTIONS, tenant)]
        found: list[HistoryEntry] = []
        what = f"list {self.layout.pattern(EXTRACTIONS, tenant)!r}"
        for start in range(0, len(keys), _BATCH):
            batch = keys[start : start + _BATCH]
            values = await self.client.call(what, self.client.read(batch))
            for key, raw in zip(batch, values, strict=True):
                if (entry := await self._decode(key, raw, EXTRACTIONS, HistoryEntry)) is not None:
                    found.append(entry)
        return sorted(found, key=lambda entry: (entry.tenant, entry.conversation_id))

    async def ping(self) -> None:
        """Raise StoreError unless Redis can be written and read (readiness probe)."""
        key, redis = self.layout.ping(), self.client.redis
        await self.client.call("write the readiness key", redis.set(key, b"1", px=60_000))
        if await self.client.call("read the readiness key", redis.get(key)) is None:
            raise StoreError(f"the readiness key vanished in Redis at {self.url} ({URL_KEY})")

    def single_flight(self, tenant: str, conversation_id: str) -> AbstractAsyncContextManager[None]:
        """Hold the key's flight in this process and in Redis; re-read the store after entering."""
        return self.flights.hold(tenant, conversation_id)

    async def flight_busy(self, tenant: str, conversation_id: str) -> bool:
        """Whether the key's flight is held here or its Redis lock by any replica (a Redis
        error counts as free: the lock itself still serialises the holders)."""
        return await self.flights.busy(tenant, conversation_id)

    async def aclose(self) -> None:
        """Close the connections (idempotent); pending lock releases are dropped."""
        await self.flights.aclose()
        await self.client.aclose()

    def _usage_key(self, tenant: str, day: str) -> str:
        """A tenant's usage of a day: one key on its own slot (every call touches one key)."""
        return f"{self.key_prefix}{key_of(USAGE, tenant, day)}"

    async def _read(self, kind: Kind, model: type[_R], tenant: str, owner: str) -> _R | None:
        key = self.layout.record(kind, tenant, owner)
        raw = await self.client.call(f"read {key!r}", self.client.redis.get(key))
        return await self._decode(key, raw, kind, model)

    async def _write(self, kind: Kind, record: Record, fence: Hold | None = None) -> int:
        """Write a record; with `fence`, only while its lock holds its token (-1: not written)."""
        tenant, owner = record.tenant, record.key_id
        key, bucket = self.layout.record(kind, tenant, owner), self.layout.bucket(tenant, owner)
        keys = [key, self.layout.index(bucket)]
        args: list[bytes | int | str] = [
            record.to_json(),
            _ms(self.ttl_of(kind.name)),
            self.layout.share(bucket, self.max_entries),
        ]
        if fence is not None:
            keys.append(fence.lock)
            args.append(fence.token)
        return int(await self.client.call(f"write {key!r}", self._put(keys=keys, args=args)))

    async def _decode(
        self, key: str, found: bytes | str | None, kind: Kind, model: type[_R]
    ) -> _R | None:
        if found is None:
            return None
        raw = found.encode() if isinstance(found, str) else found
        try:
            record = decode(model, raw)
            if key != self.layout.record(kind, record.tenant, record.key_id):
                raise StoreError("history record belongs to another key")
        except StoreError as exc:
            log.warning(
                "corrupt history record deleted: %s", exc, extra={"key": key, "url": self.url}
            )
            parsed = self.layout.parse(key)
            bucket = self.layout.bucket(*parsed[1:]) if parsed is not None else 0
            delete = self._delete_if(keys=[key, self.layout.index(bucket)], args=[raw])
            await self.client.call(f"delete corrupt {key!r}", delete)
            return None
        return record

    async def _listed(self, kind: Kind, tenant: str | None) -> list[tuple[str, Kind, str, str]]:
        """The kind's keys of a tenant (of all when None) on every primary: each key with its
        kind, tenant and id, once, in no particular order."""
        pattern = self.layout.pattern(kind, tenant)

        async def collect() -> list[tuple[str, Kind, str, str]]:
            found: dict[str, tuple[str, Kind, str, str]] = {}
            async for raw in self.client.scan(pattern):
                key = raw.decode()
                parsed = self.layout.parse(key)
                if parsed is not None and parsed[0] == kind and tenant in (None, parsed[1]):
                    found[key] = (key, *parsed)
            return list(found.values())

        # a scan is many commands: each is bounded by the socket timeout, not the whole
        return await self.client.call(f"list {pattern!r}", collect(), bounded=False)


def open_redis_store(settings: StoreSettings) -> RedisHistoryStore:
    """Build the Redis backend from `general_settings.store` (url required)."""
    url = getattr(settings, "url", None)
    secret = url.get_secret_value() if isinstance(url, SecretStr) else url
    if not secret:
        raise StoreError(f"{URL_KEY} is required when general_settings.store.backend is redis")
    size_limit = getattr(settings, "size_limit_bytes", DEFAULT_SIZE_LIMIT_BYTES)
    max_entries = getattr(settings, "max_entries", None)
    try:
        return RedisHistoryStore(
            str(secret),
            key_prefix=getattr(settings, "key_prefix", DEFAULT_KEY_PREFIX),
            ttl_seconds=getattr(settings, "ttl_seconds", DEFAULT_TTL_SECONDS),
            ttl_by_kind=getattr(settings, "ttl_seconds_by_kind", None),
            max_entries=max_entries or max(1, size_limit // TYPICAL_ENTRY_BYTES),
            lock_ttl=getattr(settings, "lock_ttl_seconds", DEFAULT_LOCK_TTL_SECONDS),
            wait_deadline=getattr(settings, "lock_wait_seconds", DEFAULT_WAIT_DEADLINE_SECONDS),
            timeout_seconds=getattr(settings, "timeout_seconds", DEFAULT_TIMEOUT_SECONDS),
            retry_after=getattr(settings, "retry_after_seconds", DEFAULT_RETRY_AFTER_SECONDS),
            lock_replicas=getattr(settings, "lock_replicas", None),
        )
    except ValueError as exc:
        raise StoreError(f"general_settings.store: {exc}") from exc


def _ms(seconds: float) -> int:
    return max(1, round(seconds * 1000))
