"""In-process CPU cost per request: overspill's app vs a minimal passthrough app, same upstream.

Chat completions (JSON and SSE, small and large) and embeddings (one input, and a batch of 256
inputs), each on its own route in both apps.

Both apps are driven through raw ASGI calls (no sockets) against the same in-memory upstream
answer, so the figures isolate what each app's own code costs per request: overspill with every
shipped layer configured and nothing to do, against the ~20 lines the gateway bench's
passthrough runs (orjson parse, forward, stream back). Rounds interleave the two apps so
machine noise hits both alike; the ratio is what to read.

    .venv/bin/python scripts/bench_overhead.py [--requests 2000] [--rounds 5] [--client-keys N]

With `--client-keys N`, overspill's config lists N client keys besides the master key and every
request presents the last of them (a tenant's key: the lookup is one hash whatever N is).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import statistics
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable, MutableMapping
from typing import Any

import orjson
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from kernel.config import parse_config
from kernel.store import DiskHistoryStore
from kernel.types import ChatRequest, ChatResponse, RequestContext, RouteRequest
from middleware.pipeline import LAYERS
from providers.fake import completion, embeddings, sse_events
from proxy.app import create_app
from proxy.system import build_system

ASGIApp = Callable[..., Awaitable[None]]
ANSWER = orjson.dumps(completion("Hello there, how can I help you today?"))
VECTORS = {1: orjson.dumps(embeddings([[0.01 * i for i in range(384)]]))}
VECTORS[256] = orjson.dumps(embeddings([[0.01 * i for i in range(384)]] * 256))
EVENTS = sse_events([f"token{i} " for i in range(20)])
JSON = "application/json"
KEY = b"sk-bench"
"""The key every request presents (`--client-keys` makes it a client key)."""


class Upstream:
    """The same upstream answer for both apps (what the mock would send)."""

    name = "mock"

    async def complete(self, request: ChatRequest, ctx: RequestContext) -> ChatResponse:
        if request.stream:
            return ChatResponse(stream=_events())
        return ChatResponse(body=ANSWER)

    async def send(self, request: RouteRequest, ctx: RequestContext) -> ChatResponse:
        return ChatResponse(body=VECTORS[_inputs(request.body)])

    async def aclose(self) -> None:
        pass


def _inputs(body: Any) -> int:
    """How many texts an embeddings body holds."""
    return 1 if isinstance(body["input"], str) else len(body["input"])


async def _events() -> AsyncIterator[bytes]:
    for event in EVENTS:
        yield event


def passthrough_app() -> Starlette:
    """The gateway bench's passthrough, with the upstream call replaced by the same answer."""

    async def chat(request: Request) -> Response:
        raw = await request.body()
        try:
            body = orjson.loads(raw)
            if not isinstance(body.get("model"), str):
                raise ValueError("model missing")
        except Exception as exc:  # noqa: BLE001 - mirrors the reference passthrough
            return JSONResponse({"error": {"message": str(exc)}}, 400)
        if body.get("stream"):
            return StreamingResponse(_events(), media_type="text/event-stream")
        if "input" in body:
            return StreamingResponse(_once(VECTORS[_inputs(body)]), media_type=JSON)
        return StreamingResponse(_once(ANSWER), media_type=JSON)

    return Starlette(
        routes=[
            Route("/v1/chat/completions", chat, methods=["POST"]),
            Route("/v1/embeddings", chat, methods=["POST"]),
        ]
    )


async def _once(data: bytes) -> AsyncIterator[bytes]:
    yield data


def overspill_app(store: DiskHistoryStore, client_keys: int = 0) -> Starlette:
    """overspill with every shipped layer configured and a master key, as deployed."""
    layers = ", ".join(LAYERS)
    keys = ", ".join(f"{{name: app-{i}, key: sk-client-{i}}}" for i in range(client_keys))
    config = f"""
model_list:
  - model_name: mock-model
    litellm_params: {{model: openai/mock-model, api_base: "http://mock.test/v1"}}
general_settings: {{master_key: sk-bench, log_level: info, client_keys: [{keys}]}}
middleware: [{layers}]
"""
    settings = parse_config(config, "bench.yaml", {}).settings
    return create_app(build_system(settings, providers={"mock-model": [Upstream()]}, store=store))


async def call(app: ASGIApp, body: bytes, path: str = "/v1/chat/completions") -> int:
    """One POST through the app; returns the bytes of body it sent back."""
    scope = {
        "type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST",
        "scheme": "http", "path": path, "raw_path": path.encode(),
        "query_string": b"", "root_path": "", "server": ("127.0.0.1", 4000),
        "client": ("127.0.0.1", 5000),
        "headers": [(b"authorization", b"Bearer " + KEY), (b"content-type", b"application/json"),
                    (b"content-length", str(len(body)).encode())],
    }  # fmt: skip
    sent = 0
    received = False
    never = asyncio.Event()

    async def receive() -> dict[str, Any]:
        nonlocal received
        if not received:
            received = True
            return {"type": "http.request", "body": body, "more_body": False}
        await never.wait()
        return {"type": "http.disconnect"}

    async def send(message: MutableMapping[str, Any]) -> None:
        nonlocal sent
        sent += len(message.get("body", b""))

    await app(scope, receive, send)
    return sent


def bodies() -> dict[str, tuple[str, bytes]]:
    """The gateway bench's small body (10 messages) and large body (200 messages), and two
    embeddings bodies: one input, and 256 inputs of ~60 words (each with its route)."""

    def make(count: int, size: int, stream: bool) -> bytes:
        messages = [{"role": "system", "content": "You are helpful."}]
        for i in range(count - 1):
            role = "user" if i % 2 == 0 else "assistant"
            messages.append({"role": role, "content": f"message {i} " + "lorem ipsum " * size})
        return orjson.dumps({"model": "mock-model", "messages": messages, "stream": stream})

    def embed(count: int) -> bytes:
        texts = [f"passage {i} " + "lorem ipsum dolor sit amet " * 12 for i in range(count)]
        return orjson.dumps({"model": "mock-model", "input": texts[0] if count == 1 else texts})

    chat, embeddings_route = "/v1/chat/completions", "/v1/embeddings"
    return {
        "json small": (chat, make(10, 15, False)), "sse small": (chat, make(10, 15, True)),
        "json large": (chat, make(200, 85, False)), "sse large": (chat, make(200, 85, True)),
        "embed one": (embeddings_route, embed(1)), "embed 256": (embeddings_route, embed(256)),
    }  # fmt: skip


async def measure(app: ASGIApp, path: str, body: bytes, requests: int) -> float:
    """CPU microseconds per request."""
    start = time.process_time()
    for _ in range(requests):
        await call(app, body, path)
    return (time.process_time() - start) * 1e6 / requests


async def main(requests: int, rounds: int, client_keys: int = 0) -> None:
    import logging

    global KEY
    if client_keys:
        KEY = f"sk-client-{client_keys - 1}".encode()

    logging.getLogger("overspill").setLevel(logging.INFO)
    with tempfile.TemporaryDirectory() as tmp:
        store = DiskHistoryStore(tmp)
        apps = {"passthrough": passthrough_app(), "overspill": overspill_app(store, client_keys)}
        gc.collect()  # the startup's garbage, once, before any scenario is measured
        print(f"{'scenario':<12}{'passthrough µs':>16}{'overspill µs':>15}{'ratio':>8}")
        for name, (path, body) in bodies().items():
            for app in apps.values():
                await measure(app, path, body, 50)
            figures: dict[str, list[float]] = {key: [] for key in apps}
            for _ in range(rounds):
                for key, app in apps.items():
                    figures[key].append(await measure(app, path, body, requests))
            base, ours = (statistics.median(figures[k]) for k in ("passthrough", "overspill"))
            print(f"{name:<12}{base:>16.1f}{ours:>15.1f}{ours / base:>8.2f}")
        await store.aclose()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--client-keys", type=int, default=0)
    args = parser.parse_args()
    asyncio.run(main(args.requests, args.rounds, args.client_keys))
