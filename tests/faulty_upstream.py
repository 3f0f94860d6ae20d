"""A scripted misbehaving upstream: a real HTTP/1.1 socket server on 127.0.0.1 for fault tests.

It speaks three wires, enough for overspill's provider paths: OpenAI's
(`POST /v1/chat/completions`, JSON or SSE `data:` events ending with `[DONE]`) for the byte
passthrough, Anthropic's Messages API (`POST /v1/messages`, JSON or SSE with
`message_start` ... `message_stop`) for an `anthropic/...` model, and Gemini's
(`POST .../models/M:generateContent`, or `:streamGenerateContent?alt=sse`) for `gemini/...`.

`upstream.fault` picks what the next requests get (see `FAULTS`); every request is counted,
and what was written to each connection is recorded, so a test can tell that overspill hung
up before a huge body was sent.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import struct
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import orjson

FAULTS = (
    "ok",  # a well-formed answer
    "hang",  # reads the request, never answers
    "hang-body",  # sends the head, never the body
    "drip",  # sends a well-formed answer one byte at a time, `drip_seconds` apart
    "slow-events",  # a stream whose events come `drip_seconds` apart (a healthy slow model)
    "stall",  # a stream: the head and three events (some text), then silence
    "trickle",  # a stream: three events, then the rest one byte at a time, `drip_seconds` apart
    "reset",  # reads the request, resets the connection (RST) without answering
    "reset-mid-stream",  # a chunked stream (as servers send one): three events, then a reset
    "cut-stream",  # a stream: the head and three events, then a clean close (no end event)
    "empty-stream",  # a stream: the head (200 text/event-stream), then a clean close, no event
    "cut-event",  # a stream: the head, three events and half of a fourth, then a clean close
    "malformed",  # 200 application/json whose body is cut short
    "html",  # 200 text/html (a captive portal, a load balancer page)
    "empty",  # 200 with an empty body
    "error-event",  # a stream whose first event is an error event
    "rate-limited",  # 429 with Retry-After
    "server-error",  # 500 with an error body
    "huge",  # a 200 of `huge_bytes`, no content-length (JSON: one answer; stream: one event)
)

_REASONS = {200: "OK", 429: "Too Many Requests", 500: "Internal Server Error"}
RETRY_AFTER = "7"


@dataclass
class Connection:
    """What happened on one accepted connection."""

    path: str = ""
    stream: bool = False
    written: int = 0
    planned: int = 0
    peer_closed: bool = False
    """The peer went away before everything planned was written."""
    done: asyncio.Event = field(default_factory=asyncio.Event)
    """Set when the server is finished with the connection."""


@dataclass
class FaultyUpstream:
    """The server; `async with FaultyUpstream() as upstream:` binds a free port."""

    fault: str = "ok"
    drip_seconds: float = 0.2
    huge_bytes: int = 20 * 1024 * 1024
    connections: list[Connection] = field(default_factory=list)
    port: int = 0
    _server: asyncio.Server | None = None
    _writers: set[asyncio.StreamWriter] = field(default_factory=set)
    _stop: asyncio.Event = field(default_factory=asyncio.Event)

    @property
    def base_url(self) -> str:
        """`http://127.0.0.1:PORT` (the OpenAI wire adds `/v1`, Anthropic's api_base is this)."""
        return f"http://127.0.0.1:{self.port}"

    @property
    def calls(self) -> int:
        """How many requests reached the server."""
        return len(self.connections)

    async def __aenter__(self) -> FaultyUpstream:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc: object) -> None:
        self._stop.set()
        assert self._server is not None
        self._server.close()
        for writer in list(self._writers):
            writer.transport.abort()
        await self._server.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._writers.add(writer)
        conn = Connection()
        try:
            head = await reader.readuntil(b"\r\n\r\n")
            lines = head.decode("latin-1").split("\r\n")
            conn.path = lines[0].split(" ")[1]
            headers = dict(
                (k.strip().lower(), v.strip())
                for k, _, v in (line.partition(":") for line in lines[1:] if line)
            )
            body = await reader.readexactly(int(headers.get("content-length", "0")))
            conn.stream = bool(orjson.loads(body).get("stream")) if body else False
            conn.stream = conn.stream or ":streamGenerateContent" in conn.path
            self.connections.append(conn)
            await self._answer(conn, writer)
        except (ConnectionError, asyncio.IncompleteReadError):
            conn.peer_closed = True
        finally:
            self._writers.discard(writer)
            if not writer.transport.is_closing():
                writer.close()
            conn.done.set()

    async def _answer(self, conn: Connection, writer: asyncio.StreamWriter) -> None:
        fault = self.fault
        wire: Wire = OpenAI()
        if conn.path.endswith("/messages"):
            wire = Anthropic()
        elif "generateContent" in conn.path or "GenerateContent" in conn.path:
            wire = Gemini()
        if fault == "hang":
            await self._stop.wait()
            return
        if fault == "reset":
            _reset(writer)
            return
        if fault == "rate-limited":
            body = wire.error_body("rate_limit_error", "slow down, you are over the limit")
            await self._send(
                conn, writer, 429, "application/json", body, {"retry-after": RETRY_AFTER}
            )
            return
        if fault == "server-error":
            body = wire.error_body("api_error", "the upstream broke")
            await self._send(conn, writer, 500, "application/json", body)
            return
        if fault == "malformed":
            body = wire.answer()
            await self._send(conn, writer, 200, "application/json", body[: len(body) // 2])
            return
        if fault == "html":
            page = b"<html><body><h1>Welcome to the hotel wifi</h1></body></html>"
            await self._send(conn, writer, 200, "text/html", page)
            return
        if fault == "empty":
            await self._send(conn, writer, 200, "application/json", b"")
            return
        if not conn.stream:
            await self._json(conn, writer, wire, fault)
            return
        await self._stream(conn, writer, wire, fault)

    async def _json(
        self, conn: Connection, writer: asyncio.StreamWriter, wire: Wire, fault: str
    ) -> None:
        if fault == "huge":  # no content-length: the size shows only while reading
            await self._head(writer, 200, "application/json", None)
            await self._huge(conn, writer, wire.answer(_HUGE_MARK))
            return
        body = wire.answer("Hello there")
        if fault == "hang-body":
            await self._head(writer, 200, "application/json", len(body))
            await self._stop.wait()
        elif fault == "drip":
            await self._head(writer, 200, "application/json", len(body))
            await self._drip(conn, writer, body)
        else:
            await self._send(conn, writer, 200, "application/json", body)

    async def _stream(
        self, conn: Connection, writer: asyncio.StreamWriter, wire: Wire, fault: str
    ) -> None:
        events = wire.events(["Hel", "lo", " there"])
        if fault == "hang-body":
            await self._head(writer, 200, "text/event-stream", None)
            await self._stop.wait()
            return
        if fault == "reset-mid-stream":  # chunked, as real servers stream: the reset shows
            await self._head(writer, 200, "text/event-stream", None, _CHUNKED)
            data = b"".join(events[:3])
            await self._write(conn, writer, b"%x\r\n%s\r\n" % (len(data), data))
            _reset(writer)
            return
        await self._head(writer, 200, "text/event-stream", None)
        if fault == "drip":
            await self._drip(conn, writer, b"".join(events))
        elif fault == "slow-events":
            for event in events:
                await self._write(conn, writer, event)
                await asyncio.sleep(self.drip_seconds)
        elif fault == "trickle":
            await self._write(conn, writer, b"".join(events[:3]))
            await self._drip(conn, writer, b"".join(events[3:]))
        elif fault == "stall":
            await self._write(conn, writer, b"".join(events[:3]))
            await self._stop.wait()
        elif fault == "cut-stream":
            await self._write(conn, writer, b"".join(events[:3]))
        elif fault == "empty-stream":
            return  # llama-cpp-python's server answers an overflowing stream this way
        elif fault == "cut-event":
            fourth = events[3]
            await self._write(conn, writer, b"".join(events[:3]) + fourth[: len(fourth) // 2])
        elif fault == "error-event":
            await self._write(conn, writer, wire.error_event("overloaded_error", "overloaded"))
        elif fault == "huge":
            await self._write(conn, writer, b"".join(events[:3]))
            event = next(e for e in wire.events([_HUGE_MARK]) if _HUGE_MARK.encode() in e)
            await self._huge(conn, writer, event)
        else:
            await self._write(conn, writer, b"".join(events))

    async def _head(
        self, writer: asyncio.StreamWriter, status: int, ctype: str, length: int | None,
        extra: dict[str, str] | None = None,
    ) -> None:  # fmt: skip
        lines = [f"HTTP/1.1 {status} {_REASONS[status]}", f"content-type: {ctype}"]
        lines.append("connection: close")
        if length is not None:
            lines.append(f"content-length: {length}")
        lines += [f"{k}: {v}" for k, v in (extra or {}).items()]
        writer.write(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1"))
        await writer.drain()

    async def _send(
        self, conn: Connection, writer: asyncio.StreamWriter, status: int, ctype: str,
        body: bytes, extra: dict[str, str] | None = None,
    ) -> None:  # fmt: skip
        await self._head(writer, status, ctype, len(body), extra)
        conn.planned = len(body)
        await self._chunked(conn, writer, body)

    async def _chunked(self, conn: Connection, writer: asyncio.StreamWriter, data: bytes) -> None:
        view = memoryview(data)
        for start in range(0, len(data), _PIECE):
            await self._write(conn, writer, bytes(view[start : start + _PIECE]))

    async def _huge(self, conn: Connection, writer: asyncio.StreamWriter, shape: bytes) -> None:
        """`shape` (an answer or an event around `_HUGE_MARK`) with `huge_bytes` of text in the
        mark's place, written as it is made: building 20 MiB first took longer than the
        tests' 0.5 s timeout on a loaded machine, and the fault read as a hang."""
        head, tail = shape.split(_HUGE_MARK.encode())
        conn.planned = conn.written + len(head) + self.huge_bytes + len(tail)
        await self._write(conn, writer, head)
        chunk = b"x" * _PIECE
        for start in range(0, self.huge_bytes, len(chunk)):
            await self._write(conn, writer, chunk[: self.huge_bytes - start])
        await self._write(conn, writer, tail)

    async def _write(self, conn: Connection, writer: asyncio.StreamWriter, data: bytes) -> None:
        if writer.transport.is_closing():
            raise ConnectionResetError("the peer closed the connection")
        writer.write(data)
        await writer.drain()
        conn.written += len(data)

    async def _drip(self, conn: Connection, writer: asyncio.StreamWriter, data: bytes) -> None:
        for index in range(len(data)):
            await self._write(conn, writer, data[index : index + 1])
            await asyncio.sleep(self.drip_seconds)


_CHUNKED = {"transfer-encoding": "chunked"}
_HUGE_MARK = "HUGE-TEXT-GOES-HERE"
_PIECE = 64 * 1024
"""How much one write sends of a long body."""


def _reset(writer: asyncio.StreamWriter) -> None:
    """Close with RST: SO_LINGER 0, then abort."""
    sock = writer.get_extra_info("socket")
    if sock is not None:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    writer.transport.abort()


class Wire:
    """One provider's answer shapes."""

    def answer(self, text: str = "Hello there") -> bytes:
        """A complete JSON answer carrying `text`."""
        raise NotImplementedError

    def events(self, pieces: list[str]) -> list[bytes]:
        """A complete stream carrying `pieces`, one SSE event per item."""
        raise NotImplementedError

    def error_body(self, kind: str, message: str) -> bytes:
        """An error body in the provider's shape."""
        raise NotImplementedError

    def error_event(self, kind: str, message: str) -> bytes:
        """An error as the stream's first event."""
        raise NotImplementedError


class OpenAI(Wire):
    """OpenAI's chat completions wire."""

    def answer(self, text: str = "Hello there") -> bytes:
        """A chat.completion object."""
        return orjson.dumps(
            {
                "id": "chatcmpl-faulty",
                "object": "chat.completion",
                "created": 0,
                "model": "faulty",
                "choices": [
                    {
                        "index": 0,
                        "message": {"role": "assistant", "content": text},
                        "finish_reason": "stop",
                    }
                ],
                "usage": {"prompt_tokens": 5, "completion_tokens": 2, "total_tokens": 7},
            }
        )

    def events(self, pieces: list[str]) -> list[bytes]:
        """A role chunk, a chunk per piece, a finish chunk, `[DONE]`."""
        deltas: list[dict[str, object]] = [{"role": "assistant", "content": ""}]
        deltas += [{"content": piece} for piece in pieces]
        out = [self._chunk(delta, None) for delta in deltas]
        out.append(self._chunk({}, "stop"))
        out.append(b"data: [DONE]\n\n")
        return out

    def _chunk(self, delta: dict[str, object], finish: str | None) -> bytes:
        chunk = {
            "id": "chatcmpl-faulty",
            "object": "chat.completion.chunk",
            "created": 0,
            "model": "faulty",
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
        }
        return b"data: " + orjson.dumps(chunk) + b"\n\n"

    def error_body(self, kind: str, message: str) -> bytes:
        """OpenAI's error object."""
        return orjson.dumps({"error": {"message": message, "type": kind, "code": None}})

    def error_event(self, kind: str, message: str) -> bytes:
        """`data: {"error": ...}`."""
        return b"data: " + self.error_body(kind, message) + b"\n\n"


class Anthropic(Wire):
    """Anthropic's Messages API wire."""

    def answer(self, text: str = "Hello there") -> bytes:
        """A message object."""
        return orjson.dumps(
            {
                "id": "msg_faulty",
                "type": "message",
                "role": "assistant",
                "model": "claude-faulty",
                "content": [{"type": "text", "text": text}],
                "stop_reason": "end_turn",
                "stop_sequence": None,
                "usage": {"input_tokens": 5, "output_tokens": 2},
            }
        )

    def events(self, pieces: list[str]) -> list[bytes]:
        """message_start, a text block with a delta per piece, message_delta, message_stop."""
        start = {
            "type": "message_start",
            "message": {
                "id": "msg_faulty", "type": "message", "role": "assistant",
                "model": "claude-faulty", "content": [], "stop_reason": None,
                "stop_sequence": None, "usage": {"input_tokens": 5, "output_tokens": 1},
            },
        }  # fmt: skip
        out = [_named("message_start", start)]
        block = {"type": "content_block_start", "index": 0, "content_block": {"type": "text"}}
        block["content_block"] = {"type": "text", "text": ""}
        out.append(_named("content_block_start", block))
        for piece in pieces:
            delta = {"type": "text_delta", "text": piece}
            out.append(
                _named(
                    "content_block_delta",
                    {"type": "content_block_delta", "index": 0, "delta": delta},
                )
            )
        out.append(_named("content_block_stop", {"type": "content_block_stop", "index": 0}))
        stop = {"stop_reason": "end_turn", "stop_sequence": None}
        ending = {"type": "message_delta", "delta": stop, "usage": {"output_tokens": 3}}
        out.append(_named("message_delta", ending))
        out.append(_named("message_stop", {"type": "message_stop"}))
        return out

    def error_body(self, kind: str, message: str) -> bytes:
        """Anthropic's error object."""
        return orjson.dumps({"type": "error", "error": {"type": kind, "message": message}})

    def error_event(self, kind: str, message: str) -> bytes:
        """`event: error`."""
        return b"event: error\ndata: " + self.error_body(kind, message) + b"\n\n"


class Gemini(Wire):
    """Google AI Studio's Gemini API wire (each stream event a whole response)."""

    def answer(self, text: str = "Hello there") -> bytes:
        """A GenerateContentResponse."""
        return orjson.dumps(self._response(text, "STOP"))

    def events(self, pieces: list[str]) -> list[bytes]:
        """A response per piece, the last one with the finish reason."""
        out = [self._response(piece, None) for piece in pieces]
        out.append(self._response("", "STOP"))
        return [b"data: " + orjson.dumps(event) + b"\r\n\r\n" for event in out]

    def _response(self, text: str, finish: str | None) -> dict[str, object]:
        candidate: dict[str, object] = {"content": {"role": "model", "parts": [{"text": text}]}}
        if finish:
            candidate["finishReason"] = finish
        usage = {"promptTokenCount": 5, "candidatesTokenCount": 2, "totalTokenCount": 7}
        return {"candidates": [candidate], "usageMetadata": usage, "responseId": "faulty"}

    def error_body(self, kind: str, message: str) -> bytes:
        """Google's error object."""
        code = 429 if kind == "rate_limit_error" else 500
        return orjson.dumps({"error": {"code": code, "message": message, "status": kind}})

    def error_event(self, kind: str, message: str) -> bytes:
        """`data: {"error": ...}`."""
        return b"data: " + self.error_body(kind, message) + b"\r\n\r\n"


def _named(name: str, payload: object) -> bytes:
    return b"event: " + name.encode() + b"\ndata: " + orjson.dumps(payload) + b"\n\n"


@contextlib.asynccontextmanager
async def faulty_upstream(fault: str = "ok", **options: float) -> AsyncIterator[FaultyUpstream]:
    """A running upstream playing `fault`."""
    async with FaultyUpstream(fault=fault, **options) as upstream:  # type: ignore[arg-type]
        yield upstream
