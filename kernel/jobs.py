"""Background jobs a system owns (growing an extraction ahead of the wall, after a response):
started through `Jobs.spawn` (or `start_after`, for the follow-ups a request's layers asked
for), drained in one place when the system closes (on shutdown, or after a reload retired it).

Bounded: at most `max_running` follow-ups run at once (`general_settings.max_background_jobs`);
the others wait in a queue of at most `max_waiting` (`max_waiting_jobs`), started in turn as
running ones end. A follow-up whose name is already waiting replaces it (a conversation's newer
turn asks for the same growth with more history), and past `max_waiting` the oldest waiting one
is dropped: a flood of long conversations cannot start unbounded compaction jobs, and a dropped
growth only means its conversation grows on a later turn. What runs, waits and is dropped is
counted in metrics (`overspill_background_jobs`, `overspill_background_jobs_dropped_total`).
"""

from __future__ import annotations

import asyncio
import logging
from collections import OrderedDict
from collections.abc import Callable, Coroutine
from typing import Any

from kernel import metrics
from kernel.types import RequestContext

log = logging.getLogger("overspill.jobs")

Factory = Callable[[], Coroutine[Any, Any, None]]
"""A job not yet started (made into a coroutine only when it starts)."""


class Jobs:
    """The running background tasks of one system, and the follow-ups waiting to run."""

    def __init__(self, max_running: int = 4, max_waiting: int = 256) -> None:
        if max_running < 1 or max_waiting < 0:
            raise ValueError("Jobs runs at least one job and keeps no negative queue")
        self.max_running = max_running
        self.max_waiting = max_waiting
        self._tasks: set[asyncio.Task[None]] = set()
        self._queued: set[asyncio.Task[None]] = set()
        """Running follow-ups (they count against max_running; `spawn`'s do not)."""
        self._waiting: OrderedDict[str, Factory] = OrderedDict()
        self.closed = False

    def __len__(self) -> int:
        """Jobs running or waiting."""
        return len(self._tasks) + len(self._waiting)

    @property
    def waiting(self) -> int:
        """Follow-ups waiting for a turn."""
        return len(self._waiting)

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
        was sent, or queue them while `max_running` run; while the system closes they are
        dropped (logged). Returns how many started now."""
        started = 0
        for name, job in ctx.after:
            if self.closed:
                log.info("background job dropped: the system is closing", extra={"job": name})
                continue
            if len(self._queued) < self.max_running and name not in self._waiting:
                self._run(name, job)
                started += 1
                continue
            self._wait(name, job)
        ctx.after.clear()
        return started

    def _run(self, name: str, job: Factory) -> None:
        task = self.spawn(job(), name=name)
        self._queued.add(task)
        metrics.background_jobs(running=1)

    def _wait(self, name: str, job: Factory) -> None:
        """Queue a follow-up (the newest of a name replaces the waiting one)."""
        if self._waiting.pop(name, None) is not None:
            metrics.background_job_dropped("replaced")
        else:
            metrics.background_jobs(waiting=1)
        self._waiting[name] = job
        while len(self._waiting) > self.max_waiting:
            dropped, _ = self._waiting.popitem(last=False)
            metrics.background_jobs(waiting=-1)
            metrics.background_job_dropped("queue_full")
            log.warning("background job dropped: too many waiting", extra={"job": dropped})

    def _finished(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        if task in self._queued:
            self._queued.discard(task)
            metrics.background_jobs(running=-1)
        if not task.cancelled() and task.exception() is not None:
            log.error("background job failed", exc_info=task.exception(),
                      extra={"job": task.get_name()})  # fmt: skip
        while self._waiting and len(self._queued) < self.max_running and not self.closed:
            name, job = self._waiting.popitem(last=False)
            metrics.background_jobs(waiting=-1)
            self._run(name, job)

    async def idle(self) -> None:
        """Return once no job runs or waits (the waiting ones start as running ones end)."""
        while self._tasks:
            await asyncio.wait(set(self._tasks))

    async def drain(self, grace: float) -> int:
        """Take no new jobs (the waiting ones are dropped), let the running ones finish for up
        to `grace` seconds, then cancel the rest (a cancelled job hands its work back: it must
        leave the store as it found it, so a later request or replica redoes it). Returns how
        many were cancelled."""
        self.closed = True
        if self._waiting:
            log.info("background jobs dropped: the system is closing",
                     extra={"jobs": list(self._waiting)})  # fmt: skip
            for _ in self._waiting:
                metrics.background_job_dropped("closing")
            metrics.background_jobs(waiting=-len(self._waiting))
            self._waiting.clear()
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
