"""Background jobs a system owns (growing an extraction ahead of the wall, after a response):
started through `Jobs.spawn` (or `start_after`, for the follow-ups a request's layers asked
for), drained in one place when the system closes (on shutdown, or after a reload retired it)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine
from typing import Any

from kernel.types import RequestContext

log = logging.getLogger("overspill.jobs")


class Jobs:
    """The running background tasks of one system."""

    def __init__(self) -> None:
        self._tasks: set[asyncio.Task[None]] = set()
        self.closed = False

    def __len__(self) -> int:
        return len(self._tasks)

    def spawn(self, job: Coroutine[Any, Any, None], *, name: str) -> asyncio.Task[None]:
        """Run `job` in the background; refused once draining started (the system is closing)."""
        if self.closed:
            job.close()
            raise RuntimeError(f"background job {name!r} refused: the system is closing")
        task = asyncio.get_running_loop().create_task(job, name=name)
        self._tasks.add(task)
        task.add_done_callback(self._finished)
        return task

    def start_after(self, ctx: RequestContext) -> int:
        """Start the follow-ups a request's layers asked for (`ctx.after`), once its response
        was sent; while the system closes they are dropped (logged). Returns how many started."""
        started = 0
        for name, job in ctx.after:
            if self.closed:
                log.info("background job dropped: the system is closing", extra={"job": name})
                continue
            self.spawn(job(), name=name)
            started += 1
        ctx.after.clear()
        return started

    def _finished(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("background job failed", exc_info=task.exception(),
                      extra={"job": task.get_name()})  # fmt: skip

    async def drain(self, grace: float) -> int:
        """Take no new jobs, let the running ones finish for up to `grace` seconds, then cancel
        the rest (a cancelled job hands its work back: it must leave the store as it found it,
        so a later request or replica redoes it). Returns how many were cancelled."""
        self.closed = True
        if not self._tasks:
            return 0
        _, pending = await asyncio.wait(set(self._tasks), timeout=grace)
        for task in pending:
            task.cancel()
        if pending:
            log.warning("cancelled background jobs at shutdown",
                        extra={"jobs": sorted(task.get_name() for task in pending)})  # fmt: skip
            await asyncio.gather(*pending, return_exceptions=True)
        return len(pending)
