"""What the tests of the translated wires (Anthropic's, Gemini's) share: the upstream client,
litellm's httpx transport (so respx sees its calls), bodies read in pieces."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import httpx
import orjson
import pytest_asyncio

from kernel.types import ChatResponse
from providers.transport import HttpxUpstream, Upstream


@pytest_asyncio.fixture
async def client() -> AsyncIterator[Upstream]:
    """The shared upstream client the app would pass (httpx: respx answers for the upstream)."""
    async with httpx.AsyncClient() as made:
        yield HttpxUpstream(made)


class Pieces(httpx.AsyncByteStream):
    """A body arriving as separate reads, one per item."""

    def __init__(self, items: list[bytes]) -> None:
        self.items = items

    async def __aiter__(self) -> AsyncIterator[bytes]:
        for item in self.items:
            yield item


async def chunks_of(response: ChatResponse) -> list[dict[str, Any] | str]:
    """The stream's events, parsed (`[DONE]` as the string)."""
    assert response.stream is not None
    out = b"".join([chunk async for chunk in response.stream])
    payloads = [part[6:] for part in out.split(b"\n\n") if part.startswith(b"data: ")]
    return [p.decode() if p == b"[DONE]" else orjson.loads(p) for p in payloads]
