"""overspill's app and the reference passthrough's, driven through raw ASGI calls (no sockets).

Both answer from the same in-memory upstream (what the gateway bench's mock sends: a small
JSON answer, or 20 SSE events), so what a request costs is each app's own code: overspill
with every shipped layer configured and nothing to do, against the ~20 lines of
`bench.gateway.passthrough` (orjson parse, forward, stream back).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable, MutableMapping
from typing import Any

import orjson
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

from bench.gateway import bodies
from bench.gateway.passthrough import refused
from kernel.config_loading import parse_config
from kernel.store import DiskHistoryStore
from kernel.types import ChatRequest, ChatResponse, RequestContext
from middleware.pipeline import LAYERS
from providers.fake import completion, sse_events
from proxy.app import create_app
from proxy.system import build_system

ASGIApp = Callable[..., Awaitable[None]]
ANSWER = orjson.dumps(completion("Hello there, how can I help you today?"))
EVENTS = sse_events([f"tok{i} " for i in range(20)])
MASTER_KEY = "sk-bench"
BODIES = {
    f"{'sse' if stream else 'json'} {size}": bodies.body("chat", size, "mock-model", stream)
    for stream in (False, True)
    for size in bodies.SIZES
}
"""The gateway bench's chat bodies: 10 messages (~2 KB) and 200 (~213 KB), JSON and SSE."""


class Upstream:
    """The same upstream answer for both apps (what the mock would send)."""

    name = "mock"

    async def complete(self, request: ChatRequest, ctx: RequestContext) -> ChatResponse:
        if request.stream:
            return ChatResponse(stream=_events())
        return ChatResponse(body=ANSWER)

    async def aclose(self) -> None:
        pass


async def _events() -> AsyncIterator[bytes]:
    for event in EVENTS:
        yield event


async def _once(data: bytes) -> AsyncIterator[bytes]:
    yield data


def passthrough_app() -> Starlette:
    """The gateway bench's passthrough, with the upstream call replaced by the same answer."""

    async def chat(request: Request) -> Response:
        raw = await request.body()
        failed = refused(raw)
        if failed is not None:
            return failed
        if orjson.loads(raw).get("stream"):
            return StreamingResponse(_events(), media_type="text/event-stream")
        return StreamingResponse(_once(ANSWER), media_type="application/json")

    return Starlette(routes=[Route("/v1/chat/completions", chat, methods=["POST"])])


def overspill_app(store: DiskHistoryStore, client_keys: int = 0) -> Starlette:
    """overspill with every shipped layer configured and a master key, as deployed; with
    `client_keys`, that many tenant keys beside it."""
    keys = ", ".join(f"{{name: app-{i}, key: sk-client-{i}}}" for i in range(client_keys))
    config = f"""
model_list:
  - model_name: mock-model
    litellm_params: {{model: openai/mock-model, api_base: "http://mock.test/v1"}}
general_settings: {{master_key: {MASTER_KEY}, log_level: info, client_keys: [{keys}]}}
middleware: [{", ".join(LAYERS)}]
"""
    settings = parse_config(config, "bench.yaml", {}).settings
    return create_app(build_system(settings, providers={"mock-model": [Upstream()]}, store=store))


async def call(app: ASGIApp, body: bytes, key: str = MASTER_KEY) -> int:
    """One POST /v1/chat/completions through the app; the bytes of body it sent back."""
    scope = {
        "type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST",
        "scheme": "http", "path": "/v1/chat/completions", "raw_path": b"/v1/chat/completions",
        "query_string": b"", "root_path": "", "server": ("127.0.0.1", 4000),
        "client": ("127.0.0.1", 5000),
        "headers": [(b"authorization", b"Bearer " + key.encode()),
                    (b"content-type", b"application/json"),
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
