"""A real HTTP upstream speaking OpenAI's wire format, whose streams the test holds open.

Each stream sends its first chunk at once, then waits for `release` before the rest, so a test
can act (signal overspill, rewrite its config) while a stream is in flight.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler
from typing import Any

from tests.e2e.serving import serving

PIECES = ("one", "two", "three")
HOLD_SECONDS = 120
"""The longest a stream waits for `release` (a test that forgets it still ends)."""


class HeldStreams:
    """The upstream's controls: `first_sent` is set when a stream's first chunk is out,
    `release` lets every held stream finish."""

    def __init__(self) -> None:
        self.first_sent = threading.Event()
        self.release = threading.Event()


def _chunk(content: str | None, finish: str | None = None) -> bytes:
    delta: dict[str, Any] = {"content": content} if content is not None else {}
    event = {
        "id": "chatcmpl-held",
        "object": "chat.completion.chunk",
        "created": 0,
        "model": "held",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }
    return b"data: " + json.dumps(event).encode() + b"\n\n"


def _handler(streams: HeldStreams) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:
            """Quiet: the test reads overspill's log, not this one."""

        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["content-length"])))
            if body.get("stream"):
                self._stream()
            else:
                self._json(body)

        def _json(self, body: dict[str, Any]) -> None:
            answer = json.dumps({
                "id": "chatcmpl-held", "object": "chat.completion", "created": 0,
                "model": body.get("model"),
                "choices": [{"index": 0, "finish_reason": "stop",
                             "message": {"role": "assistant", "content": " ".join(PIECES)}}],
                "usage": {"prompt_tokens": 3, "completion_tokens": 3, "total_tokens": 6},
            }).encode()  # fmt: skip
            self.send_response(200)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(answer)))
            self.end_headers()
            self.wfile.write(answer)

        def _stream(self) -> None:
            self.send_response(200)
            self.send_header("content-type", "text/event-stream")
            self.send_header("transfer-encoding", "chunked")
            self.end_headers()
            self._send(_chunk(PIECES[0]))
            streams.first_sent.set()
            streams.release.wait(HOLD_SECONDS)
            for piece in PIECES[1:]:
                self._send(_chunk(piece))
            self._send(_chunk(None, "stop"))
            self._send(b"data: [DONE]\n\n")
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()

        def _send(self, data: bytes) -> None:
            self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
            self.wfile.flush()

    return Handler


@contextmanager
def held_upstream() -> Iterator[tuple[str, HeldStreams]]:
    """A running upstream on a free loopback port: its /v1 URL and its stream controls."""
    streams = HeldStreams()
    with serving(_handler(streams)) as url:
        try:
            yield url, streams
        finally:
            streams.release.set()  # before the server stops: a held stream then finishes
