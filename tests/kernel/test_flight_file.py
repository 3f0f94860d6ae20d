"""Single flight across processes on one disk store: workers of `overspill serve --workers N`."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from kernel.flight_file import FlightFile, offset_of
from kernel.store import DiskHistoryStore

pytestmark = pytest.mark.reliability("store")
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def holder(tmp_path: Path) -> Iterator[subprocess.Popen[str]]:
    """Another process holding conversation c1's flight on the store in tmp_path/store."""
    (tmp_path / "store").mkdir(exist_ok=True)
    child = subprocess.Popen(
        [sys.executable, "-m", "tests.flight_holder", str(tmp_path / "store"), "t", "c1"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=ROOT,
    )  # fmt: skip
    assert child.stdout is not None
    assert child.stdout.readline() == "held\n"
    with child:
        yield child
        child.kill()


async def test_another_process_holding_a_flight_is_seen_as_busy(
    holder: subprocess.Popen[str], store: DiskHistoryStore
) -> None:
    """A flight held by another worker is busy here; other conversations are not."""
    assert await store.flight_busy("t", "c1")
    assert not await store.flight_busy("t", "c2")
    assert not await store.flight_busy("u", "c1")


async def test_a_waiter_enters_when_the_other_process_lets_go(
    holder: subprocess.Popen[str], store: DiskHistoryStore
) -> None:
    """single_flight waits while another process holds the key and enters once it is free."""
    assert holder.stdin is not None
    assert holder.stdout is not None
    refused = asyncio.Event()
    attempts: list[bool] = []
    take = store._flight_file._try

    def counted(offset: int) -> bool:
        attempts.append(taken := take(offset))
        if attempts.count(False) >= 3:
            refused.set()
        return taken

    store._flight_file._try = counted  # type: ignore[method-assign]
    waiter = asyncio.create_task(_enter(store))
    await asyncio.wait_for(refused.wait(), timeout=30)
    assert not waiter.done()  # refused three times while the other process holds it
    holder.stdin.write("go\n")
    holder.stdin.flush()
    assert holder.stdout.readline() == "released\n"
    await asyncio.wait_for(waiter, timeout=30)
    assert not await store.flight_busy("t", "c1")


async def test_a_killed_holder_leaves_no_stale_flight(
    holder: subprocess.Popen[str], store: DiskHistoryStore
) -> None:
    """SIGKILL on the holding worker frees its flight at once: nothing to expire or clean."""
    assert await store.flight_busy("t", "c1")
    holder.kill()
    holder.wait()
    assert not await store.flight_busy("t", "c1")
    await asyncio.wait_for(_enter(store), timeout=30)


async def _enter(store: DiskHistoryStore) -> None:
    async with store.single_flight("t", "c1"):
        pass


async def test_a_probe_leaves_this_process_s_own_flight_held(store: DiskHistoryStore) -> None:
    """Asking whether a key is busy while this process holds it neither frees nor blocks it."""
    async with store.single_flight("t", "c1"):
        assert await store.flight_busy("t", "c1")
        assert await store.flight_busy("t", "c1")
    assert not await store.flight_busy("t", "c1")


def test_keys_map_to_distinct_bytes() -> None:
    """Tenants and ids are kept apart (length-prefixed) and spread over the file."""
    assert offset_of("a:b", "c") != offset_of("a", "b:c")
    offsets = {offset_of("t", f"conversation-{i}") for i in range(10_000)}
    assert len(offsets) == 10_000


def test_a_closed_flight_file_refuses_use(tmp_path: Path) -> None:
    """After close, using the file is a clear error, not a lock on a reused descriptor."""
    flights = FlightFile(tmp_path / "flights.lock")
    flights.close()
    with pytest.raises(RuntimeError, match="closed"):
        flights.busy("t", "c1")
