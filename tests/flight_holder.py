"""A process that holds one conversation's flight on a disk store (for the cross-process tests).

    python -m tests.flight_holder <directory> <tenant> <conversation id>

It prints `held` (flushed) once it holds the flight, releases it when a line arrives on stdin
(then prints `released`), and exits at end of input. Killing it instead must free the flight.
"""

from __future__ import annotations

import asyncio
import sys

from kernel.store import DiskHistoryStore


async def main(directory: str, tenant: str, conversation_id: str) -> None:
    store = DiskHistoryStore(directory)
    loop = asyncio.get_running_loop()
    try:
        async with store.single_flight(tenant, conversation_id):
            print("held", flush=True)
            await loop.run_in_executor(None, sys.stdin.readline)
        print("released", flush=True)
        await loop.run_in_executor(None, sys.stdin.readline)
    finally:
        await store.aclose()


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:4]))
