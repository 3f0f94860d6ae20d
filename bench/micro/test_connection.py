"""Per-request cost of overspill's bounded HTTP protocol against uvicorn's own (httptools).

Both serve the same trivial ASGI app on a local socket; one client sends requests one after
another on a keep-alive connection, whole, and with the head split over two writes (which
arms the head deadline). Client and server share the loop and are both counted. Each round
is 100 requests; bounded over uvicorn within a group is the ratio.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest
from uvicorn.config import Config
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
from uvicorn.server import ServerState

from bench.micro.conftest import Timed
from proxy.connection import LimitedHttpProtocol

BODY = b'{"model":"local","messages":[{"role":"user","content":"hi"}]}'
REQUEST = (
    b"POST /v1/chat/completions HTTP/1.1\r\nHost: bench\r\nAuthorization: Bearer sk-x\r\n"
    b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(BODY)
) + BODY
ANSWER = b'{"id":"x","object":"chat.completion","choices":[]}'
PROTOCOLS: dict[str, type[HttpToolsProtocol]] = {
    "uvicorn": HttpToolsProtocol,
    "bounded": LimitedHttpProtocol,
}


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


class Client:
    """One keep-alive connection to a server of one protocol."""

    def __init__(self, loop: asyncio.AbstractEventLoop, protocol: type[HttpToolsProtocol]) -> None:
        config = Config(app=app, http=protocol, ws="none", lifespan="off", log_level="error")
        config.load()
        state = ServerState()
        self.loop = loop
        self.server = loop.run_until_complete(
            loop.create_server(
                lambda: protocol(config=config, server_state=state, app_state={}), "127.0.0.1", 0
            )
        )
        port = self.server.sockets[0].getsockname()[1]
        self.reader, self.writer = loop.run_until_complete(
            asyncio.open_connection("127.0.0.1", port)
        )

    async def request(self, split: bool) -> None:
        if split:
            self.writer.write(REQUEST[:40])
            await self.writer.drain()
            await asyncio.sleep(0)  # let the server read the first part alone
            self.writer.write(REQUEST[40:])
        else:
            self.writer.write(REQUEST)
        await self.reader.readuntil(b"\r\n\r\n")
        await self.reader.readexactly(len(ANSWER))

    def close(self) -> None:
        self.writer.close()
        self.server.close()
        self.loop.run_until_complete(self.server.wait_closed())


@pytest.fixture(scope="module")
def clients(loop: asyncio.AbstractEventLoop) -> Iterator[dict[str, Client]]:
    made = {name: Client(loop, protocol) for name, protocol in PROTOCOLS.items()}
    yield made
    for client in made.values():
        client.close()


@pytest.mark.parametrize("protocol", list(PROTOCOLS))
@pytest.mark.parametrize("head", ["whole", "split"])
def test_request(timed: Timed, clients: dict[str, Client], head: str, protocol: str) -> None:
    """One request and its answer on the open connection."""
    client = clients[protocol]
    timed(f"connection: head {head}", lambda: client.request(head == "split"), times=100)
