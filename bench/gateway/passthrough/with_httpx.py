"""The reference passthrough with one shared httpx client (see the package's docstring)."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

import httpx
from starlette.applications import Starlette
from starlette.background import BackgroundTask
from starlette.responses import Response, StreamingResponse

from bench.gateway.passthrough import HEADERS, HOP, UPSTREAM, passthrough_app

_httpx = httpx.AsyncClient(
    timeout=httpx.Timeout(60.0, connect=5.0),
    limits=httpx.Limits(max_connections=1000, max_keepalive_connections=1000),
)


async def _httpx_forward(path: str, raw: bytes) -> Response:
    request = _httpx.build_request("POST", UPSTREAM + path, content=raw, headers=HEADERS)
    answer = await _httpx.send(request, stream=True)
    headers = {k: v for k, v in answer.headers.items() if k.lower() not in HOP}
    return StreamingResponse(
        answer.aiter_raw(), answer.status_code, headers, background=BackgroundTask(answer.aclose)
    )


@contextlib.asynccontextmanager
async def _httpx_lifespan(_app: Starlette) -> AsyncIterator[None]:
    yield
    await _httpx.aclose()


app = passthrough_app(_httpx_forward, _httpx_lifespan)
