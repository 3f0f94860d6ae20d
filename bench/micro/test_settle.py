"""What reading a new turn's statements costs: its sentences, their values, and which of them
a later statement replaces (`supersede.settle`, as `relevance.restated_later` reads the turns
sent verbatim at a spliced request that quotes, on the event loop, and the ledger reads what
it condenses).

A turn is read once (its lines and values are cached), but an agent's every turn brings a tool
result never read before, so each round reads the text afresh. Cases, each at two sizes:

- `tool result`: a JSON array of rows (id, SKU, price, date, warehouse), one sentence of five
  values a row;
- `log`: lines of a job log (a time, a worker, a job id, a duration);
- `chat`: sentences of everyday talk with a name and a number in some.

Read the ratio between a case's two sizes (four times the text): a reading linear in the text
takes about four times as long. Before 2026-12-01 the 200-row tool result took 1.3 s of CPU,
14 times the 50-row one (every value searched its whole sentence for its clause); 18 ms since.
"""

from __future__ import annotations

import json

import pytest
from pytest_benchmark.fixture import BenchmarkFixture

from middleware.condensing.ledger import supersede
from middleware.condensing.relevance import _lines


def tool_result(size: int) -> str:
    """`size` JSON rows of an inventory tool."""
    rows = [
        {"id": 1000 + i, "sku": f"SKU-{i:05d}", "price": round(3.5 * i, 2),
         "updated": f"2024-01-{i % 28 + 1:02d}", "warehouse": f"wh-{i % 7}"}
        for i in range(size)
    ]  # fmt: skip
    return json.dumps(rows)


def log(size: int) -> str:
    """`size` lines of a job log."""
    return "\n".join(
        f"12:{i // 60 % 60:02}:{i % 60:02} worker-{i % 8} finished job-{4000 + i} in {i % 97} ms"
        for i in range(size)
    )


def chat(size: int) -> str:
    """`size` sentences of talk."""
    names = ("Maria", "John", "Deborah", "Calvin")
    return " ".join(
        f"{names[i % 4]} said the trip to the lake took {i % 9 + 2} hours, and it was worth it."
        for i in range(size)
    )


TEXTS = {"tool result": (tool_result, "tool(inventory)"), "log": (log, "tool(shell)"),
         "chat": (chat, "user")}  # fmt: skip


@pytest.mark.parametrize("size", [50, 200])
@pytest.mark.parametrize("case", list(TEXTS))
def test_read(benchmark: BenchmarkFixture, case: str, size: int) -> None:
    """A turn's text read as the ledger reads it, for the first time."""
    make, who = TEXTS[case]
    text = make(size)

    def fresh() -> tuple[tuple[()], dict[str, object]]:
        _lines.cache_clear()
        supersede._parsed.cache_clear()
        return (), {}

    def read() -> supersede.Settled:
        return supersede.settle(_lines(who, text))

    benchmark.group = f"settle: {case}"
    benchmark.pedantic(read, setup=fresh, rounds=10)  # type: ignore[no-untyped-call]
