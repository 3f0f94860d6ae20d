"""A scripted upstream with a real context window: a socket server on 127.0.0.1 speaking
OpenAI's wire (`POST /v1/chat/completions`, JSON or SSE), for the bounded-work suite.

It counts every prompt with its own deterministic rule (`tokens_of`: a quarter of the UTF-8
bytes of each message's content, rounded up, plus 4 per message and 3 for the reply), so
overspill's tiktoken estimate is near but never exactly it, as with any real model. A prompt
whose tokens plus `max_tokens` pass `window` gets OpenAI's 400 `context_length_exceeded`
with both numbers in its message; any other gets a short answer (the first words of the last
user message, at most `max_tokens`) with `usage` counted by the same rule.

Every call is recorded (`calls`: its messages, its tokens, its status), so a test compares
what overspill says it spent with what the upstream received. Like a one-slot server's prompt
cache, an answer reports as `cached_tokens` the tokens of the leading messages it shares with
the call before it. `total_slots` makes it answer
`GET /props` as llama-server does, and `in_flight` / `most_in_flight` show how many calls
it was serving at once. `hold` (an `asyncio.Event`) keeps every answer waiting until set.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson


def text_of(message: dict[str, Any]) -> str:
    """A message's text: its string content, or its text parts joined."""
    content = message.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return ""


def tokens_of(messages: Sequence[dict[str, Any]]) -> int:
    """The upstream's own prompt count (see the module docstring)."""
    total = 3
    for message in messages:
        total += 4 + (len(text_of(message).encode()) + 3) // 4
    return total


def count_text(text: str) -> int:
    """The upstream's count of an answer's text."""
    return (len(text.encode()) + 3) // 4


def first_words(messages: Sequence[dict[str, Any]], max_tokens: int) -> str:
    """The default answer: the last user message's first words, within `max_tokens`."""
    users = [m for m in messages if m.get("role") == "user"]
    words = text_of(users[-1] if users else messages[-1]).split()[:40]
    text = " ".join(words) or "ok"
    while count_text(text) > max_tokens and " " in text:
        text = text.rsplit(" ", 1)[0]
    return text[: max(1, max_tokens * 4)]


@dataclass
class Call:
    """One request the upstream received."""

    messages: list[dict[str, Any]]
    body_bytes: int
    prompt_tokens: int
    completion_tokens: int
    status: int
    stream: bool
    max_tokens: int | None
    temperature: float | None = None


@dataclass
class WindowedUpstream:
    """The server; `async with WindowedUpstream(window=8192) as upstream:` binds a free port."""

    window: int = 8192
    answer: Callable[[Sequence[dict[str, Any]], int], str] = first_words
    total_slots: int | None = None
    """Answer `GET /props` with this many slots (llama-server's `total_slots`); None: 404."""
    hold: asyncio.Event | None = None
    calls: list[Call] = field(default_factory=list)
    cached: list[dict[str, Any]] = field(default_factory=list)
    """The messages of the last answered call (what the "cache" holds)."""
    in_flight: int = 0
    most_in_flight: int = 0
    props_asked: int = 0
    port: int = 0
    _server: asyncio.Server | None = None
    _writers: set[asyncio.StreamWriter] = field(default_factory=set)

    @property
    def base_url(self) -> str:
        """`http://127.0.0.1:PORT/v1`, an OpenAI-wire `api_base`."""
        return f"http://127.0.0.1:{self.port}/v1"

    def received(self, status: int | None = None) -> list[Call]:
        """The calls (with one status, when given)."""
        return [c for c in self.calls if status is None or c.status == status]

    def tokens_in(self) -> int:
        """Prompt tokens of every call, refused ones included (the upstream read them all)."""
        return sum(c.prompt_tokens for c in self.calls)

    def tokens_out(self) -> int:
        """Completion tokens of every answered call."""
        return sum(c.completion_tokens for c in self.calls)

    def bytes_in(self) -> int:
        """Request body bytes received."""
        return sum(c.body_bytes for c in self.calls)

    async def __aenter__(self) -> WindowedUpstream:
        self._server = await asyncio.start_server(
            self._serve, "127.0.0.1", 0, limit=64 * 1024 * 1024
        )
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()
        for writer in list(self._writers):
            writer.transport.abort()
        await self._server.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._writers.add(writer)
        try:
            while True:  # keep-alive: one request after another on the connection
                try:
                    head = await reader.readuntil(b"\r\n\r\n")
                except (asyncio.IncompleteReadError, ConnectionError):
                    return
                lines = head.decode("latin-1").split("\r\n")
                method, path = lines[0].split(" ")[:2]
                headers = {
                    k.strip().lower(): v.strip()
                    for k, _, v in (line.partition(":") for line in lines[1:] if line)
                }
                body = await reader.readexactly(int(headers.get("content-length", "0")))
                await self._route(method, path, body, writer)
        except (ConnectionError, asyncio.IncompleteReadError):
            return
        finally:
            self._writers.discard(writer)
            if not writer.transport.is_closing():
                writer.close()

    async def _route(
        self, method: str, path: str, body: bytes, writer: asyncio.StreamWriter
    ) -> None:
        if method == "GET" and path.rstrip("/").endswith("/props") and self.total_slots:
            self.props_asked += 1
            await _send(writer, 200, orjson.dumps({"total_slots": self.total_slots}))
        elif method == "POST" and path.endswith("/chat/completions"):
            self.in_flight += 1
            self.most_in_flight = max(self.most_in_flight, self.in_flight)
            try:
                if self.hold is not None:
                    await self.hold.wait()
                await self._chat(orjson.loads(body), len(body), writer)
            finally:
                self.in_flight -= 1
        else:
            await _send(writer, 404, b'{"error": {"message": "no such route"}}')

    async def _chat(self, body: dict[str, Any], size: int, writer: asyncio.StreamWriter) -> None:
        messages = list(body.get("messages") or [])
        stream = bool(body.get("stream"))
        asked = body.get("max_completion_tokens") or body.get("max_tokens")
        temperature = body.get("temperature")
        prompt = tokens_of(messages)
        reserve = asked if isinstance(asked, int) else 0
        if prompt + reserve > self.window:
            self.calls.append(Call(messages, size, prompt, 0, 400, stream, asked, temperature))
            message = (
                f"This model's maximum context length is {self.window} tokens. However, you "
                f"requested {prompt + reserve} tokens ({prompt} in the messages, {reserve} in "
                "the completion). Please reduce the length of the messages or completion."
            )
            error = {"message": message, "type": "invalid_request_error",
                     "param": "messages", "code": "context_length_exceeded"}  # fmt: skip
            await _send(writer, 400, orjson.dumps({"error": error}))
            return
        text = self.answer(messages, reserve or 256)
        done = count_text(text)
        self.calls.append(Call(messages, size, prompt, done, 200, stream, asked, temperature))
        shared = 0
        while shared < min(len(messages), len(self.cached)) and (
            messages[shared] == self.cached[shared]
        ):
            shared += 1
        self.cached = messages
        cached = tokens_of(messages[:shared]) - 3 if shared else 0
        usage: dict[str, Any] = {"prompt_tokens": prompt, "completion_tokens": done,
                 "total_tokens": prompt + done,
                 "prompt_tokens_details": {"cached_tokens": cached}}  # fmt: skip
        if not stream:
            answer = {
                "id": "chatcmpl-windowed", "object": "chat.completion", "created": 0,
                "model": body.get("model"),
                "choices": [{"index": 0, "finish_reason": "stop",
                             "message": {"role": "assistant", "content": text}}],
                "usage": usage,
            }  # fmt: skip
            await _send(writer, 200, orjson.dumps(answer))
            return
        events = [_chunk({"role": "assistant", "content": text}, None), _chunk({}, "stop")]
        options = body.get("stream_options")
        if isinstance(options, dict) and options.get("include_usage"):
            events.append(_chunk(None, None, usage))
        payload = b"".join(b"data: " + orjson.dumps(e) + b"\n\n" for e in events)
        await _send(writer, 200, payload + b"data: [DONE]\n\n", "text/event-stream")


def _chunk(
    delta: dict[str, Any] | None, finish: str | None, usage: dict[str, Any] | None = None
) -> dict[str, Any]:
    event: dict[str, Any] = {
        "id": "chatcmpl-windowed",
        "object": "chat.completion.chunk",
        "created": 0,
        "model": "windowed",
        "choices": [] if delta is None else [{"index": 0, "delta": delta, "finish_reason": finish}],
    }
    if usage is not None:
        event["usage"] = usage
    return event


_REASONS = {200: "OK", 400: "Bad Request", 404: "Not Found"}


async def _send(
    writer: asyncio.StreamWriter, status: int, body: bytes, ctype: str = "application/json"
) -> None:
    head = (
        f"HTTP/1.1 {status} {_REASONS[status]}\r\ncontent-type: {ctype}\r\n"
        f"content-length: {len(body)}\r\n\r\n"
    )
    with contextlib.suppress(ConnectionError):
        writer.write(head.encode("latin-1") + body)
        await writer.drain()
