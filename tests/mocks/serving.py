"""The HTTP side of the provider mocks (`anthropic.py`, `gemini.py`): raw asyncio.

One HTTP/1.1 keep-alive connection per `MockProtocol`: Content-Length request bodies, no
pipelining. What to answer is the mock's `Wire`: a JSON body (or an error) with its status,
or a stream's events, each written as its own HTTP chunk (`delay` seconds apart when set).
uvloop when installed and orjson: a few tens of microseconds per request, so a mock is never
what a benchmark measures.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import sys
from collections.abc import Callable
from typing import Protocol

_HEAD_END = b"\r\n\r\n"
_MAX_HEAD = 64 * 1024
_REASONS = {
    200: b"OK", 400: b"Bad Request", 404: b"Not Found", 429: b"Too Many Requests",
    529: b"Overloaded",
}  # fmt: skip

Json = tuple[int, bytes]
"""A JSON answer: (status, body)."""


class Wire(Protocol):
    """A provider's answers."""

    def reply(self, path: bytes, body: bytes) -> Json | list[bytes]:
        """The answer to one request: a JSON body with its status, or a stream's events."""


def _chunked(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


class MockProtocol(asyncio.Protocol):
    """One HTTP/1.1 keep-alive connection: Content-Length request bodies, no pipelining."""

    def __init__(self, wire: Wire, delay: float) -> None:
        self.wire = wire
        self.delay = delay
        self.buffer = bytearray()
        self.transport: asyncio.WriteTransport | None = None
        self.busy = False
        self.task: asyncio.Future[None] | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # a TCP server's is writable

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        if not self.busy:
            self._next()

    def _next(self) -> None:
        head_end = self.buffer.find(_HEAD_END)
        if head_end < 0:
            if len(self.buffer) > _MAX_HEAD and self.transport is not None:
                self.transport.close()
            return
        head = bytes(self.buffer[:head_end])
        length = 0
        for line in head.lower().split(b"\r\n")[1:]:
            if line.startswith(b"content-length:"):
                length = int(line[15:].strip())
        end = head_end + 4 + length
        if len(self.buffer) < end:
            return
        path = head.split(b" ", 2)[1] if head.count(b" ") >= 2 else b""
        body = bytes(self.buffer[head_end + 4 : end])
        del self.buffer[:end]
        self.busy = True
        if self.delay > 0:
            self.task = asyncio.ensure_future(self._answer_slowly(path, body))
        else:
            self._answer(path, body)
            self.busy = False
            if self.buffer:
                self._next()

    def _answer(self, path: bytes, body: bytes) -> None:
        answer = self.wire.reply(path, body)
        if isinstance(answer, tuple):
            self._send(*answer)
            return
        assert self.transport is not None
        self.transport.write(_stream_head())
        for event in answer:
            self.transport.write(_chunked(event))
        self.transport.write(b"0\r\n\r\n")

    async def _answer_slowly(self, path: bytes, body: bytes) -> None:
        answer = self.wire.reply(path, body)
        if isinstance(answer, tuple):
            if answer[0] == 200:
                await asyncio.sleep(self.delay)
            self._send(*answer)
        elif self.transport is not None:
            self.transport.write(_stream_head())
            for event in answer:
                self.transport.write(_chunked(event))
                await asyncio.sleep(self.delay)
                if self.transport.is_closing():
                    return
            self.transport.write(b"0\r\n\r\n")
        self.busy = False
        if self.buffer:
            self._next()

    def _send(self, status: int, content: bytes) -> None:
        assert self.transport is not None
        head = b"HTTP/1.1 %d %s\r\ncontent-type: application/json\r\ncontent-length: %d\r\n" % (
            status,
            _REASONS.get(status, b"Error"),
            len(content),
        )
        if status != 200:
            head += b"request-id: req_mock01\r\n"
        self.transport.write(head + b"\r\n" + content)


def _stream_head() -> bytes:
    return (
        b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream; charset=utf-8\r\n"
        b"cache-control: no-cache\r\ntransfer-encoding: chunked\r\n\r\n"
    )


async def serve(name: str, wire: Wire, host: str, port: int, delay: float) -> None:
    """Serve until cancelled; says where it listens once bound."""
    loop = asyncio.get_running_loop()
    server = await loop.create_server(lambda: MockProtocol(wire, delay), host, port)
    bound = server.sockets[0].getsockname()[1]
    print(f"mock {name} listening on http://{host}:{bound}", flush=True)
    async with server:
        await server.serve_forever()


def main(name: str, doc: str, port: int, make: Callable[[int], Wire], events: str) -> None:
    """A mock's command line: `--host`, `--port`, `--chunks` (the stream's text events),
    `--chunk-delay-ms`."""
    parser = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=port)
    parser.add_argument("--chunks", type=int, default=20, help=events)
    parser.add_argument("--chunk-delay-ms", type=float, default=0.0)
    args = parser.parse_args()
    try:
        import uvloop
    except ImportError:
        run = asyncio.run
    else:
        run = uvloop.run
    wire = make(args.chunks)
    with contextlib.suppress(KeyboardInterrupt):
        run(serve(name, wire, args.host, args.port, args.chunk_delay_ms / 1000))
    sys.exit(0)
