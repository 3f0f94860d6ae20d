"""A recording relay in front of the real llama-server: every request body it forwards is kept,
so a test can compare the prompts overspill sent rather than the model's answers to them.

Under pytest-xdist the shared llama-server batches several workers' requests together, and a
batch's composition changes a greedy answer's last tokens; the prompt is what overspill decides.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from http.server import BaseHTTPRequestHandler
from typing import Any

import httpx

from tests.e2e.serving import serving

FORWARD_TIMEOUT_SECONDS = 300.0
"""As long as overspill waits for one upstream call in the e2e configs (`timeout: 300`)."""


class Recorded:
    """The JSON bodies the relay forwarded, in arrival order."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._bodies: list[dict[str, Any]] = []

    def add(self, body: dict[str, Any]) -> None:
        with self._lock:
            self._bodies.append(body)

    def bodies(self) -> list[dict[str, Any]]:
        with self._lock:
            return list(self._bodies)


def _handler(target: str, recorded: Recorded, client: httpx.Client) -> type[BaseHTTPRequestHandler]:
    class Relay(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: object) -> None:
            pass

        def do_GET(self) -> None:
            self._forward(None)

        def do_POST(self) -> None:
            raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            with suppress(ValueError):
                recorded.add(json.loads(raw))
            self._forward(raw)

        def _forward(self, raw: bytes | None) -> None:
            headers = {"Content-Type": self.headers.get("Content-Type") or "application/json"}
            url = target + self.path
            reply = (
                client.get(url, headers=headers)
                if raw is None
                else client.post(url, content=raw, headers=headers)
            )
            self.send_response(reply.status_code)
            self.send_header("Content-Type", reply.headers.get("content-type", "application/json"))
            self.send_header("Content-Length", str(len(reply.content)))
            self.end_headers()
            self.wfile.write(reply.content)

    return Relay


@contextmanager
def recording_relay(upstream: str) -> Iterator[tuple[str, Recorded]]:
    """A relay to `upstream` (a /v1 URL) on a free local port; yields its /v1 URL and what it
    recorded. Streams are forwarded whole, once the upstream has finished them."""
    target = upstream.removesuffix("/v1")
    recorded = Recorded()
    with (
        httpx.Client(timeout=FORWARD_TIMEOUT_SECONDS) as client,
        serving(_handler(target, recorded, client)) as url,
    ):
        yield url, recorded


def answering_prompts(recorded: Recorded, since: int, last: str) -> list[Any]:
    """The messages of each answering call (not a growth's: the e2e tests ask for 8 tokens)
    recorded after `since` whose last message ends with `last` (quoted relevant turns may
    come before it)."""
    return [
        body["messages"]
        for body in recorded.bodies()[since:]
        if 8 in (body.get("max_tokens"), body.get("max_completion_tokens"))
        and str(body["messages"][-1].get("content")).endswith(last)
    ]
