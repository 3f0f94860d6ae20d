"""The reference passthroughs: what plain Python does for a request that needs no help.

Starlette on uvicorn; each request's body is parsed with orjson (to read `model`, the least a
routing gateway must do), the original bytes are forwarded to the same path upstream, and the
upstream's answer (JSON or SSE) is streamed back unchanged. Two apps, one per HTTP client:

    UPSTREAM_ROOT=http://127.0.0.1:18000 uvicorn bench.gateway.passthrough.with_httpx:app
    UPSTREAM_ROOT=http://127.0.0.1:18000 uvicorn bench.gateway.passthrough.with_aiohttp:app

`with_httpx` is the reference (one shared `httpx.AsyncClient`); `with_aiohttp` shows how much
of that is the client library (overspill's byte passthrough uses aiohttp). Each imports only
its own client, so their memory figures compare.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Awaitable, Callable

import orjson
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

UPSTREAM = os.environ.get("UPSTREAM_ROOT", "http://127.0.0.1:18000").rstrip("/")
KEY = os.environ.get("UPSTREAM_API_KEY", "sk-mock")
HOP = {"content-length", "transfer-encoding", "connection", "keep-alive", "content-encoding"}
HOP |= {"date", "server"}
HEADERS = {"content-type": "application/json", "authorization": "Bearer " + KEY}

Forward = Callable[[str, bytes], Awaitable[Response]]


def refused(raw: bytes) -> Response | None:
    """A 400 in OpenAI's shape when the body is not a JSON object naming a model."""
    try:
        body = orjson.loads(raw)
        if not isinstance(body, dict) or not isinstance(body.get("model"), str):
            raise ValueError("the body names no model")
    except ValueError as error:
        detail = {"message": str(error), "type": "invalid_request_error"}
        return JSONResponse({"error": detail}, 400)
    return None


def passthrough_app(
    forward: Forward, lifespan: Callable[[Starlette], contextlib.AbstractAsyncContextManager[None]]
) -> Starlette:
    async def handle(request: Request) -> Response:
        raw = await request.body()
        return refused(raw) or await forward(request.url.path, raw)

    return Starlette(routes=[Route("/{path:path}", handle, methods=["POST"])], lifespan=lifespan)
