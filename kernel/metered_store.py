"""A history store that counts and times every operation of the store it wraps.

The shell wraps whichever backend the config names (diskcache or Redis) once, so the
`overspill_store_*` metrics mean the same thing for both: operations, StoreErrors and their
duration, by operation. `single_flight` and `aclose` pass straight through.
"""

from __future__ import annotations

from collections.abc import Awaitable, Sequence
from contextlib import AbstractAsyncContextManager
from time import perf_counter
from typing import TypeVar

from kernel import metrics
from kernel.spending import Tally, UsageRow
from kernel.store import (
    DocumentBatches,
    HistoryEntry,
    HistoryStore,
    StoredResponse,
    StoreError,
)

_T = TypeVar("_T")

OPERATIONS = (
    "get", "put", "get_batches", "put_batches", "get_response", "get_responses", "put_response",
    "delete_response", "calibration", "add_calibration", "delete", "clear", "entries", "ping",
    "add_usage", "usage",
)  # fmt: skip
"""The `op` label's values: the HistoryStore methods that reach the backend."""


class MeteredStore:
    """A HistoryStore around another, recording `overspill_store_*` for each operation."""

    def __init__(self, inner: HistoryStore) -> None:
        self.inner = inner
        self._meters = {op: _meters(op) for op in OPERATIONS}

    async def get(self, tenant: str, conversation_id: str) -> HistoryEntry | None:
        """The inner store's `get`, measured."""
        return await self._measure("get", self.inner.get(tenant, conversation_id))

    async def put(self, entry: HistoryEntry) -> None:
        """The inner store's `put`, measured."""
        await self._measure("put", self.inner.put(entry))

    async def get_batches(self, tenant: str, conversation_id: str) -> DocumentBatches | None:
        """The inner store's `get_batches`, measured."""
        return await self._measure("get_batches", self.inner.get_batches(tenant, conversation_id))

    async def put_batches(self, record: DocumentBatches) -> None:
        """The inner store's `put_batches`, measured."""
        await self._measure("put_batches", self.inner.put_batches(record))

    async def get_response(self, tenant: str, response_id: str) -> StoredResponse | None:
        """The inner store's `get_response`, measured."""
        return await self._measure("get_response", self.inner.get_response(tenant, response_id))

    async def get_responses(
        self, tenant: str, response_ids: Sequence[str]
    ) -> list[StoredResponse | None]:
        """The inner store's `get_responses`, measured."""
        return await self._measure("get_responses", self.inner.get_responses(tenant, response_ids))

    async def put_response(self, record: StoredResponse) -> None:
        """The inner store's `put_response`, measured."""
        await self._measure("put_response", self.inner.put_response(record))

    async def delete_response(self, tenant: str, response_id: str) -> bool:
        """The inner store's `delete_response`, measured."""
        return await self._measure(
            "delete_response", self.inner.delete_response(tenant, response_id)
        )

    async def calibration(self, model: str) -> tuple[float, ...]:
        """The inner store's `calibration`, measured."""
        return await self._measure("calibration", self.inner.calibration(model))

    async def add_calibration(self, model: str, ratio: float) -> None:
        """The inner store's `add_calibration`, measured."""
        await self._measure("add_calibration", self.inner.add_calibration(model, ratio))

    async def add_usage(
        self, tenant: str, day: str, model: str, tally: Tally, keep_seconds: float
    ) -> None:
        """The inner store's `add_usage`, measured."""
        await self._measure(
            "add_usage", self.inner.add_usage(tenant, day, model, tally, keep_seconds)
        )

    async def usage(self, tenant: str | None, days: Sequence[str]) -> list[UsageRow]:
        """The inner store's `usage`, measured."""
        return await self._measure("usage", self.inner.usage(tenant, days))

    async def delete(self, tenant: str, conversation_id: str) -> bool:
        """The inner store's `delete`, measured."""
        return await self._measure("delete", self.inner.delete(tenant, conversation_id))

    async def clear(self, tenant: str | None = None) -> int:
        """The inner store's `clear`, measured."""
        return await self._measure("clear", self.inner.clear(tenant))

    async def entries(self, tenant: str | None = None) -> list[HistoryEntry]:
        """The inner store's `entries`, measured."""
        return await self._measure("entries", self.inner.entries(tenant))

    async def ping(self) -> None:
        """The inner store's `ping`, measured."""
        await self._measure("ping", self.inner.ping())

    def single_flight(self, tenant: str, conversation_id: str) -> AbstractAsyncContextManager[None]:
        """The inner store's single flight (not measured: it waits on other requests)."""
        return self.inner.single_flight(tenant, conversation_id)

    async def flight_busy(self, tenant: str, conversation_id: str) -> bool:
        """The inner store's `flight_busy` (not measured, like `single_flight`)."""
        return await self.inner.flight_busy(tenant, conversation_id)

    async def aclose(self) -> None:
        """Close the inner store."""
        await self.inner.aclose()

    async def _measure(self, op: str, pending: Awaitable[_T]) -> _T:
        done, failed, seconds = self._meters[op]
        started = perf_counter()
        try:
            return await pending
        except StoreError:
            failed.add()
            raise
        finally:
            done.add()
            seconds.observe(perf_counter() - started)


_bound: dict[str, tuple[metrics.Tally, metrics.Tally, metrics.HistogramTally]] = {}


def _meters(op: str) -> tuple[metrics.Tally, metrics.Tally, metrics.HistogramTally]:
    """An operation's tallies, shared by every measured store of the process."""
    found = _bound.get(op)
    if found is None:
        found = _bound[op] = (
            metrics.Tally(metrics.STORE_OPERATIONS.labels(op)),
            metrics.Tally(metrics.STORE_ERRORS.labels(op)),
            metrics.HistogramTally(metrics.STORE_SECONDS.labels(op)),
        )
    return found


def metered(store: HistoryStore) -> HistoryStore:
    """`store` measured (once: a store that is already measured is returned as it is)."""
    return store if isinstance(store, MeteredStore) else MeteredStore(store)
