"""A fast mock of Anthropic's Messages API, for benchmarks and end-to-end tests.

    python scripts/mock_anthropic.py --port 18020 [--chunks 20] [--chunk-delay-ms 0]

`POST /v1/messages` (any path ending in `/messages`) answers a Messages API JSON object, or,
when the body has `"stream": true`, Anthropic's event sequence: `message_start`,
`content_block_start`, `ping`, one `content_block_delta` (`text_delta`) per chunk,
`content_block_stop`, `message_delta` (stop_reason and usage), `message_stop`; each event is
`event: NAME\\ndata: {...}\\n\\n`, written as its own HTTP chunk. The text is
`tok0 tok1 ... tokN-1 `, as the OpenAI-wire mock of the gateway benchmark writes it.

A model whose name starts with `overflow` gets Anthropic's real 400 for a prompt over the
window, and one starting with `overloaded` a 529 `overloaded_error` (error bodies for tests).

Raw asyncio (uvloop when installed) and orjson: a few tens of microseconds per request, so it
is never what a benchmark measures.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import sys

import orjson

_HEAD_END = b"\r\n\r\n"
_MAX_HEAD = 64 * 1024


def _event(name: str, payload: object) -> bytes:
    return b"event: " + name.encode() + b"\ndata: " + orjson.dumps(payload) + b"\n\n"


def _chunked(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


class Answers:
    """The pre-rendered bytes of every answer (only the model name varies per request)."""

    def __init__(self, chunks: int) -> None:
        self.pieces = [f"tok{i} " for i in range(chunks)]
        self.text = "".join(self.pieces)
        self.chunks = chunks

    def message(self, model: str) -> bytes:
        """A non-streaming Messages API answer."""
        return orjson.dumps(
            {
                "id": "msg_mock01",
                "type": "message",
                "role": "assistant",
                "model": model,
                "content": [{"type": "text", "text": self.text}],
                "stop_reason": "end_turn",
                "stop_sequence": None,
                "usage": {"input_tokens": 100, "output_tokens": self.chunks},
            }
        )

    def events(self, model: str) -> list[bytes]:
        """The SSE events of a streamed answer, one list item per HTTP chunk."""
        start: dict[str, object] = {
            "id": "msg_mock01", "type": "message", "role": "assistant", "model": model,
            "content": [], "stop_reason": None, "stop_sequence": None,
            "usage": {"input_tokens": 100, "output_tokens": 1},
        }  # fmt: skip
        out = [
            _event("message_start", {"type": "message_start", "message": start}),
            _event(
                "content_block_start",
                {
                    "type": "content_block_start",
                    "index": 0,
                    "content_block": {"type": "text", "text": ""},
                },
            ),
            _event("ping", {"type": "ping"}),
        ]
        for piece in self.pieces:
            delta = {"type": "text_delta", "text": piece}
            out.append(
                _event(
                    "content_block_delta",
                    {"type": "content_block_delta", "index": 0, "delta": delta},
                )
            )
        out.append(_event("content_block_stop", {"type": "content_block_stop", "index": 0}))
        out.append(
            _event(
                "message_delta",
                {
                    "type": "message_delta",
                    "delta": {"stop_reason": "end_turn", "stop_sequence": None},
                    "usage": {"output_tokens": self.chunks},
                },
            )
        )
        out.append(_event("message_stop", {"type": "message_stop"}))
        return out


def error_answer(model: str) -> tuple[int, bytes] | None:
    """The error a model name asks for, if any (Anthropic's real status and body)."""
    if model.startswith("overflow"):
        kind, status = "invalid_request_error", 400
        message = "prompt is too long: 208310 tokens > 200000 maximum"
    elif model.startswith("overloaded"):
        kind, status, message = "overloaded_error", 529, "Overloaded"
    else:
        return None
    return status, _error(kind, message)


def _error(kind: str, message: str) -> bytes:
    """Anthropic's error body."""
    return orjson.dumps({"type": "error", "error": {"type": kind, "message": message}})


_REASONS = {200: b"OK", 400: b"Bad Request", 404: b"Not Found", 529: b"Overloaded"}


class MockProtocol(asyncio.Protocol):
    """One HTTP/1.1 keep-alive connection: Content-Length request bodies, no pipelining."""

    def __init__(self, answers: Answers, delay: float) -> None:
        self.answers = answers
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
        head = bytes(self.buffer[:head_end]).lower()
        length = 0
        for line in head.split(b"\r\n")[1:]:
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

    def _request(self, path: bytes, body: bytes) -> tuple[str, bool] | None:
        if not path.split(b"?")[0].endswith(b"/messages"):
            self._send(404, b"application/json", _error("not_found_error", "no such route"))
            return None
        try:
            request = orjson.loads(body)
        except orjson.JSONDecodeError:
            self._send(400, b"application/json", _error("invalid_request_error", "bad JSON"))
            return None
        model = str(request.get("model") or "mock-model")
        failure = error_answer(model)
        if failure is not None:
            self._send(failure[0], b"application/json", failure[1])
            return None
        return model, request.get("stream") is True

    def _answer(self, path: bytes, body: bytes) -> None:
        found = self._request(path, body)
        if found is None:
            return
        model, stream = found
        if not stream:
            self._send(200, b"application/json", self.answers.message(model))
            return
        assert self.transport is not None
        self.transport.write(_stream_head())
        for event in self.answers.events(model):
            self.transport.write(_chunked(event))
        self.transport.write(b"0\r\n\r\n")

    async def _answer_slowly(self, path: bytes, body: bytes) -> None:
        found = self._request(path, body)
        if found is not None:
            model, stream = found
            if not stream:
                await asyncio.sleep(self.delay)
                self._send(200, b"application/json", self.answers.message(model))
            elif self.transport is not None:
                self.transport.write(_stream_head())
                for event in self.answers.events(model):
                    self.transport.write(_chunked(event))
                    await asyncio.sleep(self.delay)
                    if self.transport.is_closing():
                        return
                self.transport.write(b"0\r\n\r\n")
        self.busy = False
        if self.buffer:
            self._next()

    def _send(self, status: int, ctype: bytes, content: bytes) -> None:
        assert self.transport is not None
        head = b"HTTP/1.1 %d %s\r\ncontent-type: %s\r\ncontent-length: %d\r\n" % (
            status,
            _REASONS.get(status, b"Error"),
            ctype,
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


async def serve(host: str, port: int, chunks: int, delay: float) -> None:
    """Serve until cancelled."""
    answers = Answers(chunks)
    loop = asyncio.get_running_loop()
    server = await loop.create_server(lambda: MockProtocol(answers, delay), host, port)
    bound = server.sockets[0].getsockname()[1]
    print(f"mock anthropic listening on http://{host}:{bound} chunks={chunks}", flush=True)
    async with server:
        await server.serve_forever()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=18020)
    parser.add_argument("--chunks", type=int, default=20, help="content_block_delta events")
    parser.add_argument("--chunk-delay-ms", type=float, default=0.0)
    args = parser.parse_args()
    try:
        import uvloop
    except ImportError:
        run = asyncio.run
    else:
        run = uvloop.run
    with contextlib.suppress(KeyboardInterrupt):
        run(serve(args.host, args.port, args.chunks, args.chunk_delay_ms / 1000))
    sys.exit(0)


if __name__ == "__main__":
    main()
