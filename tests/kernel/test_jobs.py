"""Background jobs: drained on close, cancelled past the grace period, refused once closing."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from kernel.jobs import Jobs
from kernel.types import RequestContext
from tests.conftest import sample


async def test_drain_lets_a_running_job_finish() -> None:
    """A job that ends within the grace period ends normally; nothing is cancelled."""
    jobs, go, done = Jobs(), asyncio.Event(), asyncio.Event()

    async def job() -> None:
        await go.wait()
        done.set()

    jobs.spawn(job(), name="compact")
    draining = asyncio.ensure_future(jobs.drain(grace=60))
    asyncio.get_running_loop().call_soon(go.set)  # runs after the job and the drain started
    assert await draining == 0
    assert done.is_set()
    assert len(jobs) == 0


async def test_drain_cancels_what_outlives_the_grace_period() -> None:
    """A job still running after the grace period is cancelled and its cleanup runs."""
    jobs, started, handed_back = Jobs(), asyncio.Event(), asyncio.Event()

    async def job() -> None:
        started.set()
        try:
            await asyncio.Event().wait()
        finally:
            handed_back.set()

    jobs.spawn(job(), name="stuck")
    await started.wait()
    assert await jobs.drain(grace=0) == 1
    assert handed_back.is_set()


async def test_no_job_starts_once_draining() -> None:
    """spawn after drain began is refused, and the coroutine is closed, not leaked."""
    jobs = Jobs()
    await jobs.drain(grace=0)

    async def job() -> None:
        raise AssertionError("never runs")

    with pytest.raises(RuntimeError, match="closing"):
        jobs.spawn(job(), name="late")


async def test_follow_ups_beyond_max_running_wait_and_start_in_turn() -> None:
    """A flood of follow-ups: at most `max_running` run, the rest wait in order (a newer one
    of the same name replaces the waiting one), the oldest past `max_waiting` is dropped and
    counted, and each waiting one starts as a running one ends."""
    jobs = Jobs(max_running=2, max_waiting=3)
    gates = {name: asyncio.Event() for name in "abcdefg"}
    began = {name: asyncio.Event() for name in "abcdefg"}
    started: list[str] = []

    def follow_up(name: str, tag: str = "") -> Any:
        async def run() -> None:
            started.append(name + tag)
            began[name].set()
            await gates[name].wait()

        return run

    dropped = sample("overspill_background_jobs_dropped_total", reason="queue_full")
    replaced = sample("overspill_background_jobs_dropped_total", reason="replaced")
    ctx = RequestContext("r", "t")
    for name in "abcdef":
        ctx.after_response(name, follow_up(name))
    ctx.after_response("d", follow_up("d", "-newer"))
    assert jobs.start_after(ctx) == 2
    await began["a"].wait()
    await began["b"].wait()
    assert started == ["a", "b"]
    assert jobs.waiting == 3  # c was dropped for f; d was replaced by its newer turn
    assert sample("overspill_background_jobs_dropped_total", reason="queue_full") == dropped + 1
    assert sample("overspill_background_jobs_dropped_total", reason="replaced") == replaced + 1
    gates["a"].set()
    await began["e"].wait()
    assert started == ["a", "b", "e"]
    for gate in gates.values():
        gate.set()
    await jobs.idle()
    assert started == ["a", "b", "e", "f", "d-newer"]
    assert len(jobs) == 0


async def test_closing_drops_what_still_waits() -> None:
    """Draining takes no waiting follow-up: they are dropped (counted), the running one ends."""
    jobs, go = Jobs(max_running=1, max_waiting=4), asyncio.Event()
    ran: list[str] = []

    def follow_up(name: str) -> Any:
        async def run() -> None:
            ran.append(name)
            await go.wait()

        return run

    ctx = RequestContext("r", "t")
    ctx.after_response("x", follow_up("x"))
    ctx.after_response("y", follow_up("y"))
    jobs.start_after(ctx)
    closing = sample("overspill_background_jobs_dropped_total", reason="closing")
    asyncio.get_running_loop().call_soon(go.set)
    assert await jobs.drain(grace=60) == 0
    assert ran == ["x"]
    assert sample("overspill_background_jobs_dropped_total", reason="closing") == closing + 1
