"""The Redis store's single flight: one holder of a conversation across replicas and failovers.

    RedisFlights.hold(tenant, id)   hold the conversation's flight for a block
    RedisFlights.busy(tenant, id)   whether anyone holds it now
    RedisFlights.fence(tenant, id)  the current task's hold of it, for a fenced write

The in-process `SingleFlight` first (one replica's waiters do not poll Redis), then the lock:
one script takes `{prefix}lock:...` (`SET NX PX lock_ttl`, or renews it when it already holds
this holder's token: a holder that retries after a failover finds its own lock), polled with a
20-200 ms backoff. While held, a watchdog renews it every `lock_ttl / 3` (only while it still
holds this holder's token), so an extraction that runs past `lock_ttl` keeps it. It is
released by a compare-and-delete script, so a holder whose lock expired never removes a
successor's. The store fences the holder's write of its conversation with the token (one
script writes it only while the lock holds it), so a holder that lost its lock never writes
over a newer holder's result. A crashed holder blocks the others for at most `lock_ttl`.

Failover (Redis Cluster, Sentinel). Replication is asynchronous: a primary acknowledges a write
before its replicas have it, and a replica promoted after the primary dies lacks what had not
reached it yet. For the lock that would let a second holder in while the first still works, so
with `replicas` > 0 the lock is taken and released by a script followed by `WAIT replicas` on
the same connection: the holder goes on once a replica holds its lock, and its release (and,
since one primary replicates in order and the lock shares the conversation's slot, the entry
it wrote before) is on a replica before the flight is over. A lock no replica acknowledged
within 100 ms (or half of `timeout_seconds`) is still held on the primary (logged once a
minute: only a failover in that moment would let a second holder in, and the fence still
keeps its write out); a release no replica acknowledged is done on the primary (only a
failover in that moment would bring the lock back, for at most `lock_ttl`). A release that
fails (the primary is gone) is retried in the background until it is done or the lock would
have expired, so a failover does not bring back a released lock. While the store cannot be
reached, a holder waits for it (a failover takes seconds) as for a held lock, up to
`wait_deadline`.

Degraded, never failed: a waiter still without the lock `wait_deadline` after it arrived
(queueing in this process included) proceeds without it, and so does a holder that cannot
reach one Redis (no failover will bring it back); both are logged, and their writes are not
fenced. At worst two replicas extract the same conversation.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import secrets
import time
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass

from kernel.records import StoreError
from kernel.redis_client import RedisClient
from kernel.redis_keys import KeyLayout
from kernel.store import SingleFlight

__all__ = ["Hold", "RedisFlights"]

log = logging.getLogger("overspill.store")

_POLL_FIRST_SECONDS = 0.02
_POLL_MAX_SECONDS = 0.2
_WAIT_MS_MAX = 100
"""The longest a lock waits for its replicas: a replica on the same network acknowledges
within milliseconds; past this it is lagging or gone."""
_UNREPLICATED_LOG_SECONDS = 60.0

# KEYS: lock. ARGV: token, ttl ms. Takes the lock, or renews it if it is already this token's.
_ACQUIRE = """
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then return 1 end
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('PEXPIRE', KEYS[1], ARGV[2]) end
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
class Hold:
    """A held single-flight lock: its key, this holder's token, whether it was lost."""

    tenant: str
    conversation_id: str
    lock: str
    token: str
    lost: bool = False


_HELD: contextvars.ContextVar[Hold | None] = contextvars.ContextVar("overspill_lock", default=None)
"""The lock the current task holds (set inside `hold`), for fenced writes."""


class RedisFlights:
    """Single-flight locks in Redis for one store."""

    def __init__(
        self,
        client: RedisClient,
        layout: KeyLayout,
        *,
        lock_ttl: float,
        wait_deadline: float,
        replicas: int,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.client = client
        self.layout = layout
        self.lock_ttl = lock_ttl
        self.wait_deadline = wait_deadline
        self.replicas = replicas
        self.local = SingleFlight()
        self._monotonic = monotonic
        self._wait_ms = max(1, min(_WAIT_MS_MAX, int(client.timeout_seconds * 500)))
        self._quiet_until = 0.0
        self._releasing: set[asyncio.Task[None]] = set()
        redis = client.redis
        self._acquire = redis.register_script(_ACQUIRE)
        self._release = redis.register_script(_RELEASE)
        self._renew = redis.register_script(_RENEW)

    def hold(self, tenant: str, conversation_id: str) -> AbstractAsyncContextManager[None]:
        """Hold the conversation's flight in this process and in Redis for the block."""
        return self._hold(tenant, conversation_id)

    async def busy(self, tenant: str, conversation_id: str) -> bool:
        """Whether the flight is held here or its lock by any replica (a Redis error counts as
        free: the lock itself still serialises the holders)."""
        if self.local.held(tenant, conversation_id):
            return True
        lock = self.layout.lock(tenant, conversation_id)
        try:
            found = await self.client.call("read the single-flight lock", self._exists(lock))
        except StoreError as exc:
            log.warning("single-flight lock not readable", extra={"lock": lock, "error": str(exc)})
            return False
        return bool(found)

    def fence(self, tenant: str, conversation_id: str) -> Hold | None:
        """The current task's hold of this conversation's flight, if it holds it."""
        hold = _HELD.get()
        if hold is None or (hold.tenant, hold.conversation_id) != (tenant, conversation_id):
            return None
        return hold

    async def aclose(self) -> None:
        """Stop retrying releases (those locks expire by themselves)."""
        for task in list(self._releasing):
            task.cancel()
        await asyncio.gather(*self._releasing, return_exceptions=True)

    async def _exists(self, lock: str) -> int:
        return int(await self.client.redis.exists(lock))

    @asynccontextmanager
    async def _hold(self, tenant: str, conversation_id: str) -> AsyncIterator[None]:
        deadline = self._monotonic() + self.wait_deadline  # counted from arrival, not from turn
        async with self.local.hold(tenant, conversation_id):
            lock = self.layout.lock(tenant, conversation_id)
            token = await self._take(lock, deadline)
            if token is None:
                yield
                return
            hold = Hold(tenant, conversation_id, lock, token)
            watchdog = asyncio.get_running_loop().create_task(self._watch(hold))
            held = _HELD.set(hold)
            try:
                yield
            finally:
                _HELD.reset(held)
                watchdog.cancel()
                await asyncio.gather(watchdog, return_exceptions=True)
                await self._unlock(lock, token)

    async def _take(self, lock: str, deadline: float) -> str | None:
        """The lock's token once held; None when proceeding without it (deadline or error)."""
        token = secrets.token_hex(16)
        pause = _POLL_FIRST_SECONDS
        unavailable: StoreError | None = None
        while True:
            try:
                if await self._try_take(lock, token):
                    if unavailable is not None:
                        log.info("single-flight lock taken after the store came back",
                                 extra={"lock": lock, "url": self.client.url})  # fmt: skip
                    return token
                unavailable = None
            except StoreError as exc:
                if not self.client.target.follows_failover:
                    log.error(
                        "single-flight lock unavailable; proceeding without it",
                        extra={"lock": lock, "url": self.client.url, "error": str(exc)},
                    )
                    return None
                if unavailable is None:
                    log.warning(
                        "single-flight lock unavailable; waiting for the store to come back",
                        extra={"lock": lock, "url": self.client.url, "error": str(exc)},
                    )
                unavailable = exc
            left = deadline - self._monotonic()
            if left <= 0:
                log.warning(
                    "single-flight lock %s after %.1f s; proceeding without it",
                    "still unavailable" if unavailable is not None else "still held",
                    self.wait_deadline,
                    extra={"lock": lock, "url": self.client.url},
                )
                return None
            await asyncio.sleep(min(pause, left))
            pause = min(pause * 2, _POLL_MAX_SECONDS)

    async def _try_take(self, lock: str, token: str) -> bool:
        """One attempt at the lock; with replicas, it is held once a replica has it."""
        ttl = _ms(self.lock_ttl)
        what = "take the single-flight lock"
        if not self.replicas:
            return bool(await self.client.call(what, self._acquire(keys=[lock], args=[token, ttl])))
        taking = self.client.then_wait(_ACQUIRE, [lock], [token, ttl], self.replicas, self._wait_ms)
        taken, acknowledged = await self.client.call(what, taking)
        if taken and acknowledged < self.replicas:
            self._unreplicated(lock, acknowledged)
        return bool(taken)

    def _unreplicated(self, lock: str, acknowledged: int) -> None:
        """Log (at most once a minute) that a lock is held on its primary only."""
        now = self._monotonic()
        if now < self._quiet_until:
            return
        self._quiet_until = now + _UNREPLICATED_LOG_SECONDS
        log.warning(
            "single-flight lock held on the primary only: %d of %d replicas acknowledged it "
            "within %d ms (a primary whose replica is gone or lagging; with no replica at all, "
            "set general_settings.store.lock_replicas: 0); logged once a minute",
            acknowledged, self.replicas, self._wait_ms,
            extra={"lock": lock, "url": self.client.url},
        )  # fmt: skip

    async def _watch(self, hold: Hold) -> None:
        """Renew the lock every lock_ttl / 3 while it is held; stop once it is lost."""
        while True:
            await asyncio.sleep(self.lock_ttl / 3)
            try:
                renew = self._renew(keys=[hold.lock], args=[hold.token, _ms(self.lock_ttl)])
                renewed = await self.client.call("renew the single-flight lock", renew)
            except StoreError as exc:
                log.warning(
                    "single-flight lock not renewed; trying again",
                    extra={"lock": hold.lock, "url": self.client.url, "error": str(exc)},
                )
                continue
            if not renewed:
                hold.lost = True
                log.warning(
                    "single-flight lock lost (expired or taken over); this holder's result "
                    "will not be stored",
                    extra={"lock": hold.lock, "url": self.client.url},
                )
                return

    async def _unlock(self, lock: str, token: str) -> None:
        """Release the lock if still ours (with replicas, WAIT for them: the release, and the
        entry written before it, are then on a replica). A lost lock is only logged; a release
        that failed while a failover is under way is retried in the background."""
        expires = self._monotonic() + self.lock_ttl  # at the latest: renewed at most now
        try:
            released = await self._release_once(lock, token)
        except StoreError as exc:
            retry = self.client.target.follows_failover
            log.warning(
                "single-flight lock not released; %s",
                "retrying in the background" if retry else "it expires by itself",
                extra={"lock": lock, "url": self.client.url, "error": str(exc)},
            )
            if retry:
                task = asyncio.get_running_loop().create_task(
                    self._release_again(lock, token, expires)
                )
                self._releasing.add(task)
                task.add_done_callback(self._releasing.discard)
            return
        if not released:
            log.warning(
                "single-flight lock expired before release (not renewed within lock_ttl "
                "%.1f s, or removed); a successor's lock is left alone",
                self.lock_ttl,
                extra={"lock": lock, "url": self.client.url},
            )

    async def _release_once(self, lock: str, token: str) -> bool:
        """Whether the lock was ours and is gone now."""
        what = "release the single-flight lock"
        if not self.replicas:
            return bool(await self.client.call(what, self._release(keys=[lock], args=[token])))
        releasing = self.client.then_wait(_RELEASE, [lock], [token], self.replicas, self._wait_ms)
        released, _ = await self.client.call(what, releasing)
        return bool(released)

    async def _release_again(self, lock: str, token: str, expires: float) -> None:
        """Release again (only ever this token's lock) until it is done or the lock would have
        expired: after a failover, the new primary may still hold it."""
        pause = _POLL_FIRST_SECONDS
        while self._monotonic() < expires:
            await asyncio.sleep(pause)
            pause = min(pause * 2, max(self.client.retry_after, _POLL_MAX_SECONDS))
            try:
                released = await self._release_once(lock, token)
            except StoreError:
                continue
            if released:
                log.info("single-flight lock released after the store came back",
                         extra={"lock": lock, "url": self.client.url})  # fmt: skip
            return


def _ms(seconds: float) -> int:
    return max(1, round(seconds * 1000))
