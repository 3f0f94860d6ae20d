"""What the in-process benchmarks share: an event loop to time coroutines in, a store.

Run them with `make bench-micro` (pytest-benchmark; `ARGS="-k overhead"` for some). The timer
is the process's CPU time (`--benchmark-timer time.process_time`), so other work on the
machine moves the figures less. Each group is one table, its rows compared: the ratios
between rows of one group, measured in one run, are what to read. `make test` does not collect
these files (pytest's testpaths is tests/); `tests/test_benchmarks.py` runs each once.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterator

import pytest
from pytest_benchmark.fixture import BenchmarkFixture

from kernel.store import DiskHistoryStore
from tests.redis_server import redis_url  # noqa: F401 - the redis rows of test_store.py

Call = Callable[[], Awaitable[object]]


@pytest.fixture(scope="module")
def loop() -> Iterator[asyncio.AbstractEventLoop]:
    """One event loop for a module's benchmarks (uvloop's, as overspill serves, when there)."""
    try:
        import uvloop
    except ImportError:
        made = asyncio.new_event_loop()
    else:
        made = uvloop.new_event_loop()
    asyncio.set_event_loop(made)
    yield made
    made.run_until_complete(made.shutdown_asyncgens())
    made.close()
    asyncio.set_event_loop(None)


@pytest.fixture(scope="module")
def store(
    loop: asyncio.AbstractEventLoop, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[DiskHistoryStore]:
    """A diskcache store in a temporary folder, closed at the module's end."""
    made = DiskHistoryStore(str(tmp_path_factory.mktemp("store")))
    yield made
    loop.run_until_complete(made.aclose())


class Timed:
    """Times coroutines in the module's loop: each round awaits `call` `times` times in one
    entry into the loop, so the loop's own entry cost (~10 µs) is spread over them."""

    def __init__(self, benchmark: BenchmarkFixture, loop: asyncio.AbstractEventLoop) -> None:
        self.benchmark = benchmark
        self.loop = loop

    def _batch(self, call: Call, times: int) -> Callable[[], None]:
        async def batch() -> None:
            for _ in range(times):
                await call()

        def run() -> None:
            self.loop.run_until_complete(batch())

        self.benchmark.extra_info["calls_per_round"] = times
        return run

    def __call__(self, group: str, call: Call, times: int = 1) -> None:
        """Calibrated rounds (pytest-benchmark's own), after one untimed batch."""
        self.benchmark.group = group
        run = self._batch(call, times)
        run()
        self.benchmark(run)

    def rounds(self, group: str, call: Call, setup: Call, rounds: int = 50) -> None:
        """`rounds` rounds of one call each, `setup` awaited untimed before each."""
        self.benchmark.group = group
        self.benchmark.pedantic(  # type: ignore[no-untyped-call]
            self._batch(call, 1), setup=lambda: self.loop.run_until_complete(setup()),
            rounds=rounds, warmup_rounds=2,
        )  # fmt: skip


@pytest.fixture
def timed(benchmark: BenchmarkFixture, loop: asyncio.AbstractEventLoop) -> Timed:
    """`timed("group", lambda: coroutine(), times=N)`: what a coroutine costs."""
    return Timed(benchmark, loop)
