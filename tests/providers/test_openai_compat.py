"""The byte passthrough against a faked upstream transport (respx)."""

from __future__ import annotations

import base64
from collections.abc import AsyncIterator

import httpx
import orjson
import pytest
import respx

from kernel.errors import (
    ContextWindowExceeded,
    UpstreamError,
    UpstreamRateLimited,
    UpstreamRejected,
    UpstreamTimeout,
)
from kernel.types import ChatRequest, RequestContext
from providers.fake import completion, sse_events
from providers.openai_compat import OpenAICompatProvider
from providers.transport import HttpxUpstream
from proxy.http import parse_chat_request
from tests.conftest import settings_from

URL = "http://upstream.test/v1/chat/completions"
LLAMA_OVERFLOW = {
    "error": {
        "code": 400,
        "message": "request (2727 tokens) exceeds the available context size (2048 tokens), try increasing it",
        "type": "exceed_context_size_error",
        "n_prompt_tokens": 2727,
        "n_ctx": 2048,
    }
}


@pytest.fixture
async def provider() -> AsyncIterator[OpenAICompatProvider]:
    settings = settings_from(
        "model_list:\n  - model_name: local\n    litellm_params:\n"
        "      {model: openai/smollm2, api_base: 'http://upstream.test/v1', api_key: sk-upstream}\n"
    )
    async with httpx.AsyncClient() as client:
        yield OpenAICompatProvider(settings.model_list[0], HttpxUpstream(client))


def chat_request(stream: bool = False) -> ChatRequest:
    body = {"model": "local", "messages": [{"role": "user", "content": "hi"}], "stream": stream}
    return parse_chat_request(orjson.dumps(body))


CTX = RequestContext("rid", "tenant")


@respx.mock
async def test_sends_the_client_body_with_the_upstream_model_and_key(
    provider: OpenAICompatProvider,
) -> None:
    """The upstream gets the client's fields, its own model name and overspill's key."""
    route = respx.post(URL).respond(200, json=completion("hello"))
    raw = (
        b'{"model":"local","messages":[{"role":"user","content":"hi"}],"seed":5,"x_vendor":{"a":1}}'
    )
    response = await provider.complete(parse_chat_request(raw), CTX)
    assert orjson.loads(response.body or b"")["choices"][0]["message"]["content"] == "hello"
    sent = route.calls.last.request
    assert orjson.loads(sent.content) == {**orjson.loads(raw), "model": "smollm2"}
    assert sent.headers["authorization"] == "Bearer sk-upstream"
    assert sent.headers["accept-encoding"] == "identity"


@respx.mock
async def test_the_answer_bytes_are_passed_unchanged(provider: OpenAICompatProvider) -> None:
    """A 200 JSON answer reaches the client byte for byte, with rate-limit headers."""
    answer = orjson.dumps(completion("x")) + b"\n"
    respx.post(URL).respond(
        200, content=answer, headers={"x-ratelimit-remaining-tokens": "99", "server": "u"}
    )
    response = await provider.complete(chat_request(), CTX)
    assert response.body == answer
    assert response.headers == {"x-ratelimit-remaining-tokens": "99"}


@respx.mock
async def test_llama_server_overflow_is_classified_with_sizes(
    provider: OpenAICompatProvider,
) -> None:
    """llama-server's exceed_context_size_error becomes ContextWindowExceeded(2727, 2048)."""
    respx.post(URL).respond(400, json=LLAMA_OVERFLOW)
    with pytest.raises(ContextWindowExceeded) as caught:
        await provider.complete(chat_request(), CTX)
    assert (caught.value.requested, caught.value.limit) == (2727, 2048)
    assert "exceeds the available context size" in caught.value.message


@respx.mock
@pytest.mark.parametrize(
    ("status", "payload", "headers", "error", "code"),
    [
        (429, {"error": {"message": "Rate limit reached for requests"}}, {"retry-after": "3"}, UpstreamRateLimited, 429),
        (429, {"error": {"message": "Request too large for gpt-4 on tokens per min (TPM): Limit 10000, Requested 20000"}}, {}, UpstreamRateLimited, 429),
        (400, {"error": {"message": "Invalid value for 'tools'"}}, {}, UpstreamRejected, 400),
        (401, {"error": {"message": "Incorrect API key provided"}}, {}, UpstreamError, 502),
        (500, {"error": {"message": "The server had an error"}}, {}, UpstreamError, 502),
        (504, "gateway timeout", {}, UpstreamTimeout, 504),
        (200, {"error": {"message": "maximum context length is 4096 tokens", "code": "context_length_exceeded"}}, {}, ContextWindowExceeded, 400),
    ],
)  # fmt: skip
async def test_failures_keep_their_kind(
    provider: OpenAICompatProvider,
    status: int,
    payload: object,
    headers: dict[str, str],
    error: type[Exception],
    code: int,
) -> None:
    """Each upstream failure becomes the error class (and status) that fits it, never another."""
    content = payload.encode() if isinstance(payload, str) else orjson.dumps(payload)
    respx.post(URL).respond(status, content=content, headers=headers)
    with pytest.raises(error) as caught:
        await provider.complete(chat_request(), CTX)
    assert type(caught.value) is error
    assert caught.value.http_status() == code  # type: ignore[attr-defined]
    if headers:
        assert caught.value.headers() == {"retry-after": "3"}  # type: ignore[attr-defined]


@respx.mock
async def test_unreachable_and_slow_upstreams(provider: OpenAICompatProvider) -> None:
    """A refused connection is a 502 naming the upstream; a timeout is a 504."""
    respx.post(URL).mock(side_effect=httpx.ConnectError("refused"))
    with pytest.raises(
        UpstreamError, match=r"cannot reach upstream openai at http://upstream\.test"
    ):
        await provider.complete(chat_request(), CTX)
    respx.post(URL).mock(side_effect=httpx.ReadTimeout("slow"))
    with pytest.raises(UpstreamTimeout):
        await provider.complete(chat_request(), CTX)


async def collect(stream: AsyncIterator[bytes] | None) -> bytes:
    assert stream is not None
    return b"".join([chunk async for chunk in stream])


@respx.mock
async def test_stream_is_relayed_byte_for_byte(provider: OpenAICompatProvider) -> None:
    """SSE events pass through unchanged, [DONE] included."""
    events = b"".join(sse_events(["a", "b", "c"]))
    respx.post(URL).respond(200, content=events, headers={"content-type": "text/event-stream"})
    response = await provider.complete(chat_request(stream=True), CTX)
    assert await collect(response.stream) == events


@respx.mock
async def test_stream_overflow_before_any_byte_is_an_exception(
    provider: OpenAICompatProvider,
) -> None:
    """An overflow refused with 400 before the stream starts raises, like a JSON request."""
    respx.post(URL).respond(400, json=LLAMA_OVERFLOW)
    with pytest.raises(ContextWindowExceeded):
        await provider.complete(chat_request(stream=True), CTX)


@respx.mock
async def test_error_as_first_event_is_an_exception(provider: OpenAICompatProvider) -> None:
    """A 200 stream whose first event is an error raises before anything reaches the client."""
    first = (
        b"data: "
        + orjson.dumps(
            {
                "error": {
                    "message": "This model's maximum context length is 2048 tokens. However, you requested 2743 tokens",
                    "code": "context_length_exceeded",
                }
            }
        )
        + b"\n\n"
    )
    respx.post(URL).respond(200, content=first, headers={"content-type": "text/event-stream"})
    with pytest.raises(ContextWindowExceeded) as caught:
        await provider.complete(chat_request(stream=True), CTX)
    assert (caught.value.requested, caught.value.limit) == (2743, 2048)


@respx.mock
async def test_empty_200_stream_is_an_upstream_error(provider: OpenAICompatProvider) -> None:
    """A 200 stream that ends with no event and no [DONE] (llama-cpp-python's overflow) raises."""
    respx.post(URL).respond(200, content=b"", headers={"content-type": "text/event-stream"})
    with pytest.raises(UpstreamError, match="without sending any event"):
        await provider.complete(chat_request(stream=True), CTX)


@respx.mock
async def test_stream_cut_before_done_raises_at_the_end(provider: OpenAICompatProvider) -> None:
    """A stream that stops without [DONE] raises after relaying what came."""
    events = b"".join(sse_events(["a", "b"])[:-1])
    respx.post(URL).respond(200, content=events, headers={"content-type": "text/event-stream"})
    response = await provider.complete(chat_request(stream=True), CTX)
    assert response.stream is not None
    seen: list[bytes] = []

    async def drain(stream: AsyncIterator[bytes]) -> None:
        async for chunk in stream:
            seen.append(chunk)

    with pytest.raises(UpstreamError, match=r"before \[DONE\]"):
        await drain(response.stream)
    assert b"".join(seen) == events


@respx.mock
async def test_credentials_in_api_base_become_basic_auth() -> None:
    """`http://user:pass@host/v1` sends Basic auth for them, and no credentials in the URL."""
    settings = settings_from(
        "model_list:\n  - model_name: local\n    litellm_params:\n"
        "      {model: openai/m, api_base: 'http://al%40ice:p%3Ass@upstream.test/v1', api_key: k}\n"
    )
    route = respx.post(URL).respond(200, json=completion("hello"))
    async with httpx.AsyncClient() as client:
        provider = OpenAICompatProvider(settings.model_list[0], HttpxUpstream(client))
        await provider.complete(chat_request(), CTX)
    sent = route.calls.last.request
    assert sent.url == URL
    assert sent.headers["authorization"] == "Basic " + base64.b64encode(b"al@ice:p:ss").decode()
