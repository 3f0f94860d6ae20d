"""The passthrough with an aiohttp client instead of httpx (see the package's docstring)."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

import aiohttp
from starlette.applications import Starlette
from starlette.background import BackgroundTask
from starlette.responses import Response, StreamingResponse

from bench.gateway.passthrough import HEADERS, HOP, UPSTREAM, passthrough_app

_session: list[aiohttp.ClientSession] = []


async def _aiohttp_forward(path: str, raw: bytes) -> Response:
    answer = await _session[0].post(
        UPSTREAM + path, data=raw, headers=HEADERS, auto_decompress=False
    )
    headers = {k: v for k, v in answer.headers.items() if k.lower() not in HOP}
    return StreamingResponse(
        answer.content.iter_any(), answer.status, headers, background=BackgroundTask(answer.release)
    )


@contextlib.asynccontextmanager
async def _aiohttp_lifespan(_app: Starlette) -> AsyncIterator[None]:
    # Idle connections close before a typical upstream's idle timeout (aiohttp's 15 s is not),
    # else a reused connection can be reset by the upstream mid-request.
    connector = aiohttp.TCPConnector(limit=1000, keepalive_timeout=5)
    timeout = aiohttp.ClientTimeout(total=60, connect=5)
    _session.append(aiohttp.ClientSession(connector=connector, timeout=timeout))
    yield
    await _session.pop().close()


app = passthrough_app(_aiohttp_forward, _aiohttp_lifespan)
