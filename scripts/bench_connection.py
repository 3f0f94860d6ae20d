"""Per-request cost of overspill's bounded protocol against uvicorn's own (httptools), in-process.

Both serve the same trivial ASGI app on a local socket; one client sends requests one after
another on a keep-alive connection (whole, and with the head split over two writes, which
arms the head deadline). Rounds interleave the two protocols so machine noise hits both
alike; the ratio is what to read (client and server share the loop and are both counted).

    .venv/bin/python scripts/bench_connection.py [--requests 3000] [--rounds 5]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from typing import Any

from uvicorn.config import Config
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
from uvicorn.server import ServerState

from proxy.connection import LimitedHttpProtocol

BODY = b'{"model":"local","messages":[{"role":"user","content":"hi"}]}'
REQUEST = (
    b"POST /v1/chat/completions HTTP/1.1\r\nHost: bench\r\nAuthorization: Bearer sk-x\r\n"
    b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(BODY)
) + BODY
ANSWER = b'{"id":"x","object":"chat.completion","choices":[]}'


async def app(scope: Any, receive: Any, send: Any) -> None:
    """Read the body, answer a small JSON."""
    if scope["type"] != "http":
        return
    more = True
    while more:
        message = await receive()
        more = message.get("more_body", False)
    headers = [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(ANSWER))]
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    await send({"type": "http.response.body", "body": ANSWER})


async def serve(protocol: type[HttpToolsProtocol]) -> tuple[asyncio.Server, int]:
    config = Config(app=app, http=protocol, ws="none", lifespan="off", log_level="error")
    config.load()
    state = ServerState()
    loop = asyncio.get_running_loop()
    server = await loop.create_server(
        lambda: protocol(config=config, server_state=state, app_state={}), "127.0.0.1", 0
    )
    return server, server.sockets[0].getsockname()[1]


async def run(port: int, requests: int, split: bool) -> float:
    """µs per request, sequential on one connection."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    first, second = REQUEST[:40], REQUEST[40:]
    started = time.perf_counter()
    for _ in range(requests):
        if split:
            writer.write(first)
            await writer.drain()
            await asyncio.sleep(0)  # let the server read the first part alone
            writer.write(second)
        else:
            writer.write(REQUEST)
        await reader.readuntil(b"\r\n\r\n")
        await reader.readexactly(len(ANSWER))
    elapsed = time.perf_counter() - started
    writer.close()
    await writer.wait_closed()
    return elapsed / requests * 1e6


async def main(requests: int, rounds: int) -> None:
    stock, stock_port = await serve(HttpToolsProtocol)
    bounded, bounded_port = await serve(LimitedHttpProtocol)
    print(f"{'scenario':<14}{'uvicorn µs':>12}{'bounded µs':>12}{'ratio':>8}")
    for split in (False, True):
        ours: list[float] = []
        theirs: list[float] = []
        for _ in range(rounds):
            theirs.append(await run(stock_port, requests, split))
            ours.append(await run(bounded_port, requests, split))
        a, b = statistics.median(theirs), statistics.median(ours)
        name = "head split" if split else "whole request"
        print(f"{name:<14}{a:>12.1f}{b:>12.1f}{b / a:>8.2f}")
    stock.close()
    bounded.close()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=3000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    asyncio.run(main(args.requests, args.rounds))
