"""The redis-py client behind the Redis store: one server, a Cluster, or a Sentinel set's primary.

    connect(target, timeout_seconds)   a RedisClient for the deployment a URL names

`RedisClient.redis` is redis-py's own client, which does all the routing:
`redis.asyncio.Redis` for one server and for the primary a Sentinel set names
(`Sentinel.master_for`: a new connection asks the Sentinels where the primary is now, and a
connection to a demoted primary is dropped), `redis.asyncio.cluster.RedisCluster` for a
cluster (each command goes to its key's slot's primary; MOVED, ASK and failovers are followed).
The store sends it single-key commands and one-slot scripts. What spans slots goes through the
methods here, still routed by redis-py:

    scan(pattern)        the matching keys of every primary (SCAN on each node in a cluster)
    read(keys)           their values (MGET; per slot with the cluster's `mget_nonatomic`)
    then_wait(...)       one script, then `WAIT replicas` on the same connection, so that the
                         wait counts the replicas holding what the script wrote

Bounded time: `call(what, pending)` awaits one call within `timeout_seconds` (connect, send,
answer, redis-py's one retry) and turns every failure into a `StoreError` naming
`general_settings.store.url`, its password redacted. After a call fails for want of a
connection or an answer, Redis is down: for `retry_after` seconds every call fails at once
without touching it (one log line when it goes down, one when it is back). A failover looks
the same from here: calls fail until the new primary answers.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Coroutine, Sequence
from typing import Any, TypeVar

import redis.asyncio as redis
from redis.asyncio.cluster import ClusterNode, RedisCluster
from redis.asyncio.retry import Retry
from redis.asyncio.sentinel import Sentinel
from redis.backoff import ExponentialBackoff
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import RedisError
from redis.exceptions import TimeoutError as RedisTimeoutError

from kernel.records import StoreError
from kernel.redis_url import RedisTarget, redact

__all__ = ["URL_KEY", "RedisClient", "connect"]

log = logging.getLogger("overspill.store")

URL_KEY = "general_settings.store.url"
_TIMEOUT_KEY = "general_settings.store.timeout_seconds"
_SCAN_COUNT = 500
_T = TypeVar("_T")

Arg = bytes | str | int | float


class RedisClient:
    """redis-py's client for one deployment: bounded calls, and the calls that span slots."""

    def __init__(
        self,
        client: redis.Redis | RedisCluster,
        target: RedisTarget,
        *,
        timeout_seconds: float,
        retry_after: float,
        sentinel: Sentinel | None = None,
    ) -> None:
        self.redis = client
        self.target = target
        self.url = redact(target.url)
        """The URL as it may be shown (passwords hidden)."""
        self.timeout_seconds = timeout_seconds
        self.retry_after = retry_after
        self._sentinel = sentinel
        self._down_until = 0.0
        """Until when (time.monotonic) calls fail at once: Redis failed to connect or answer."""
        self._down_reason = ""

    async def call(self, what: str, pending: Awaitable[_T], *, bounded: bool = True) -> _T:
        """Await one Redis call within timeout_seconds; a failure is a StoreError, and a
        failure to connect or answer marks Redis down for retry_after (calls fail at once)."""
        left = self._down_until - time.monotonic()
        if left > 0:
            if isinstance(pending, Coroutine):
                pending.close()  # never started: no "never awaited" warning
            raise StoreError(
                f"cannot {what}: Redis at {self.url} ({URL_KEY}) is unavailable "
                f"({self._down_reason}); the next try is in {left:.1f} s"
            )
        try:
            if bounded:
                async with asyncio.timeout(self.timeout_seconds):
                    found = await self._ready_then(pending)
            else:
                found = await self._ready_then(pending)
        except StoreError:
            raise
        except TimeoutError as exc:  # the whole call, retry included, took too long
            reason = f"no answer within {self.timeout_seconds:g} s ({_TIMEOUT_KEY})"
            self._went_down(reason)
            raise StoreError(f"cannot {what} in Redis at {self.url}: {reason}") from exc
        except Exception as exc:  # the store never fails a request, and mid-failover redis-py's
            # cluster client raises more than RedisError (RedisClusterException when no node
            # answers, an AttributeError from a connection closed under a command)
            reason = f"{type(exc).__name__}: {exc}"
            if not isinstance(exc, RedisError) or isinstance(
                exc, RedisConnectionError | RedisTimeoutError
            ):
                self._went_down(reason)  # no connection, no answer, or a client in disarray
            raise StoreError(f"cannot {what} in Redis at {self.url} ({URL_KEY}): {reason}") from exc
        if self._down_reason:
            self._down_reason, self._down_until = "", 0.0
            log.info("history store reachable again", extra={"url": self.url})
        return found

    async def _ready_then(self, pending: Awaitable[_T]) -> _T:
        """`pending`, once a cluster client knows the cluster's layout: redis-py's cluster
        client learns it lazily, and commands that start together on a client that has yet to
        learn it (at first, or again after a failover) break each other's connections."""
        if isinstance(self.redis, RedisCluster):
            try:
                await self.redis.initialize()
            except BaseException:
                if isinstance(pending, Coroutine):
                    pending.close()
                raise
        return await pending

    def _went_down(self, reason: str) -> None:
        """Redis did not connect or answer: calls fail at once for retry_after (logged once)."""
        if not self._down_reason:
            log.error(
                "history store unavailable; requests go on without it",
                extra={"url": self.url, "error": reason, "retry_after_seconds": self.retry_after},
            )
        self._down_reason = reason
        self._down_until = time.monotonic() + self.retry_after

    @property
    def cluster(self) -> bool:
        """Whether this is a Redis Cluster (keys spread over slots and nodes)."""
        return isinstance(self.redis, RedisCluster)

    async def scan(self, pattern: str) -> AsyncIterator[bytes]:
        """The keys matching `pattern` on every primary (a key may come twice: SCAN's rule)."""
        if isinstance(self.redis, RedisCluster):
            found = self.redis.scan_iter(
                match=pattern, count=_SCAN_COUNT, target_nodes=RedisCluster.PRIMARIES
            )
        else:
            found = self.redis.scan_iter(match=pattern, count=_SCAN_COUNT)
        async for key in found:
            yield key

    async def read(self, keys: Sequence[str]) -> list[bytes | None]:
        """The values of `keys` (None where missing), whatever slots they are on."""
        if isinstance(self.redis, RedisCluster):
            found = await self.redis.mget_nonatomic(list(keys))
        else:
            found = await self.redis.mget(list(keys))
        return [value.encode() if isinstance(value, str) else value for value in found]

    async def then_wait(
        self, script: str, keys: Sequence[str], args: Sequence[Arg], replicas: int, wait_ms: int
    ) -> tuple[Any, int]:
        """Run `script` (its keys on one slot), then WAIT for `replicas` replicas on the same
        connection: the script's answer and how many replicas acknowledged it."""
        if isinstance(self.redis, RedisCluster):
            node = self.redis.get_node_from_key(keys[0])
            pipe: Any = self.redis.pipeline()
            pipe.eval(script, len(keys), *keys, *args)
            pipe.execute_command("WAIT", replicas, wait_ms, target_nodes=node)
        else:
            pipe = self.redis.pipeline(transaction=False)
            pipe.eval(script, len(keys), *keys, *args)
            pipe.wait(replicas, wait_ms)
        answer, acknowledged = await pipe.execute()
        return answer, int(acknowledged)

    async def aclose(self) -> None:
        """Close every connection (to the Sentinels too)."""
        await self.redis.aclose()
        if isinstance(self.redis, RedisCluster):
            # redis-py closes a cluster client's connections only while it knows the layout;
            # after a failed call it has forgotten it until the next one, and they would leak
            known = self.redis.nodes_manager
            nodes = [*known.nodes_cache.values(), *known.startup_nodes.values()]
            await asyncio.gather(*(node.disconnect() for node in nodes), return_exceptions=True)
        if self._sentinel is not None:
            for sentinel in self._sentinel.sentinels:
                await sentinel.aclose()


def connect(target: RedisTarget, *, timeout_seconds: float, retry_after: float) -> RedisClient:
    """redis-py's client for `target`; ValueError for a URL redis-py cannot use."""
    timeout = timeout_seconds

    def retry() -> Retry:
        return Retry(ExponentialBackoff(cap=0.1, base=0.01), retries=1)

    if target.mode == "single":
        client = redis.Redis.from_url(
            target.url, socket_timeout=timeout, socket_connect_timeout=timeout, retry=retry()
        )
        return RedisClient(client, target, timeout_seconds=timeout, retry_after=retry_after)
    if target.mode == "cluster":
        cluster = RedisCluster(
            startup_nodes=[ClusterNode(host, port) for host, port in target.hosts],
            username=target.username, password=target.password, ssl=target.ssl,
            socket_timeout=timeout, socket_connect_timeout=timeout, retry=retry(),
        )  # fmt: skip
        return RedisClient(cluster, target, timeout_seconds=timeout, retry_after=retry_after)
    sentinel = Sentinel(  # type: ignore[no-untyped-call]
        list(target.hosts),
        sentinel_kwargs={
            "socket_timeout": timeout, "socket_connect_timeout": timeout,
            "username": target.sentinel_username, "password": target.sentinel_password,
            "ssl": target.ssl,
        },
    )  # fmt: skip
    primary = sentinel.master_for(
        target.service, db=target.db,
        username=target.username, password=target.password, ssl=target.ssl,
        socket_timeout=timeout, socket_connect_timeout=timeout, retry=retry(),
    )  # fmt: skip
    return RedisClient(
        primary, target, timeout_seconds=timeout, retry_after=retry_after, sentinel=sentinel
    )
