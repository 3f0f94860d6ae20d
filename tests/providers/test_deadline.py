"""The per-call deadline: a timeout of its own, never a cancellation from elsewhere."""

from __future__ import annotations

import asyncio

import pytest

from providers.deadline import Deadline


@pytest.mark.reliability("timeouts")
async def test_a_call_past_its_deadline_raises_timeout_error() -> None:
    """Work still waiting when the time is up ends with TimeoutError, the task not cancelled."""
    never = asyncio.Event()
    with pytest.raises(TimeoutError), Deadline(0.01):
        await never.wait()
    task = asyncio.current_task()
    assert task is not None
    assert task.cancelling() == 0
    await asyncio.sleep(0)  # no cancellation left pending


@pytest.mark.reliability("timeouts")
async def test_work_done_in_time_is_untouched() -> None:
    """Finishing before the deadline leaves no timer behind."""
    with Deadline(60) as deadline:
        await asyncio.sleep(0)
    assert deadline.handle.cancelled()
    assert not deadline.fired


@pytest.mark.reliability("timeouts")
async def test_a_cancellation_from_elsewhere_stays_a_cancellation() -> None:
    """The client leaving (the task cancelled by someone else) is not turned into a timeout."""
    started = asyncio.Event()

    async def call() -> None:
        with Deadline(60):
            started.set()
            await asyncio.Event().wait()

    task = asyncio.create_task(call())
    await started.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
