"""CPU per call of the byte passthrough provider alone (providers/openai_compat.py).

It talks through the httpx upstream to an in-memory transport answering what the gateway
bench's mock answers: a small JSON answer, a 20-event stream, a ~200 KB JSON answer. To
compare another version of the provider, save a run of that revision and compare
(pytest-benchmark's `--benchmark-save NAME` there, `--benchmark-compare` here;
docs/benchmarks.md). Each round is 50 calls.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator

import httpx
import orjson
import pytest

from bench.micro.conftest import Timed
from kernel.config_loading import parse_config
from kernel.types import ChatRequest, RequestContext
from providers.fake import completion, sse_events
from providers.openai_compat import OpenAICompatProvider
from providers.transport import HttpxUpstream
from proxy.http import parse_chat_request

SMALL = orjson.dumps(completion("Hello there, how can I help you today?"))
LARGE = orjson.dumps(completion("lorem ipsum " * 17000))
EVENTS = b"".join(sse_events([f"tok{i} " for i in range(20)]))
CONFIG = """
model_list:
  - model_name: m
    litellm_params: {model: openai/m, api_base: "http://mock.test/v1"}
"""
BASE = b'{"model":"m","messages":[{"role":"user","content":"hi"}]'
REQUESTS = {
    "json small": parse_chat_request(BASE + b"}"),
    "sse small": parse_chat_request(BASE + b',"stream":true}'),
    "json large": parse_chat_request(BASE + b',"large":true}'),
}


class _Body(httpx.AsyncByteStream):
    """A body sent as one chunk, as a socket read gives it (not pre-read like bytes)."""

    def __init__(self, data: bytes) -> None:
        self.data = data

    async def __aiter__(self) -> AsyncIterator[bytes]:
        yield self.data


def _answer(request: httpx.Request) -> httpx.Response:
    body = orjson.loads(request.content)
    if body.get("stream"):
        ctype, data = "text/event-stream", EVENTS
    else:
        ctype, data = "application/json", LARGE if body.get("large") else SMALL
    headers = {"content-type": ctype, "content-length": str(len(data))}
    return httpx.Response(200, stream=_Body(data), headers=headers)


@pytest.fixture(scope="module")
def provider(loop: asyncio.AbstractEventLoop) -> Iterator[OpenAICompatProvider]:
    entry = parse_config(CONFIG, "bench.yaml", {}).settings.model_list[0]
    client = httpx.AsyncClient(transport=httpx.MockTransport(_answer))
    yield OpenAICompatProvider(entry, HttpxUpstream(client))
    loop.run_until_complete(client.aclose())


async def _call(provider: OpenAICompatProvider, request: ChatRequest) -> None:
    response = await provider.complete(request, RequestContext("bench", "bench"))
    if response.stream is not None:
        async for _chunk in response.stream:
            pass


@pytest.mark.parametrize("answer", list(REQUESTS))
def test_provider(timed: Timed, provider: OpenAICompatProvider, answer: str) -> None:
    """One call, the answer read whole."""
    request = REQUESTS[answer]
    timed("passthrough provider", lambda: _call(provider, request), times=50)
