"""A/B in one process: overspill's EventStream against Starlette's StreamingResponse.

overspill sends SSE with its own small response class and one disconnect watcher per request
(proxy/endpoint.py). This measures whether that earns its place: the same overspill app answers
the gateway bench's streaming bodies, once with `EventStream`, once with Starlette's
`StreamingResponse` (which starts an anyio task group per response to watch for the client
leaving), rounds interleaved so machine noise hits both alike. The ratio is what to read.

    .venv/bin/python scripts/bench_streaming.py [--requests 1500] [--rounds 7]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
from collections.abc import AsyncIterator, Mapping
from pathlib import Path

from starlette.responses import StreamingResponse

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_overhead

from kernel.store import DiskHistoryStore
from proxy import endpoint as chat


class StarletteStream(StreamingResponse):
    """The same relay through Starlette's StreamingResponse."""

    def __init__(
        self,
        chunks: AsyncIterator[bytes],
        watch: chat.DisconnectWatch,
        status_code: int,
        headers: Mapping[str, str],
    ) -> None:
        watch.stop()  # Starlette's own task group watches for the disconnect from here on
        super().__init__(chunks, status_code, headers, media_type="text/event-stream")


async def main(requests: int, rounds: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        store = DiskHistoryStore(tmp)
        app = bench_overhead.overspill_app(store)
        kinds = {"EventStream": chat.EventStream, "StreamingResponse": StarletteStream}
        print(f"{'scenario':<12}{'EventStream µs':>16}{'Starlette µs':>14}{'ratio':>8}")
        for name, (path, body) in bench_overhead.bodies().items():
            if not name.startswith("sse"):
                continue
            figures: dict[str, list[float]] = {key: [] for key in kinds}
            for _ in range(rounds):
                for key, kind in kinds.items():
                    setattr(chat, "EventStream", kind)  # noqa: B010 - swapped in place
                    figures[key].append(await bench_overhead.measure(app, path, body, requests))
            ours, theirs = (statistics.median(figures[k]) for k in kinds)
            print(f"{name:<12}{ours:>16.1f}{theirs:>14.1f}{theirs / ours:>8.2f}")
        setattr(chat, "EventStream", kinds["EventStream"])  # noqa: B010
        await store.aclose()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=1500)
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    asyncio.run(main(args.requests, args.rounds))
