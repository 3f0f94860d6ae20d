"""litellm deployments (Anthropic here) against a faked transport: shape, params, errors."""

from __future__ import annotations

from collections.abc import Iterator

import litellm
import orjson
import pytest
import respx

from kernel.errors import (
    ContextWindowExceeded,
    ForbiddenParameter,
    UpstreamRateLimited,
    UpstreamRejected,
)
from kernel.types import RequestContext
from providers.litellm import LitellmProvider
from proxy.http import parse_chat_request
from tests.conftest import settings_from

URL = "https://api.anthropic.com/v1/messages"
ANSWER = {
    "id": "msg_1", "type": "message", "role": "assistant", "model": "claude-sonnet-4-5",
    "content": [{"type": "text", "text": "Paris"}], "stop_reason": "end_turn",
    "usage": {"input_tokens": 12, "output_tokens": 3},
}  # fmt: skip
CTX = RequestContext("rid", "tenant")


@pytest.fixture(autouse=True)
def no_aiohttp() -> Iterator[None]:
    """litellm's aiohttp transport bypasses respx; use httpx in these tests."""
    previous = litellm.disable_aiohttp_transport
    litellm.disable_aiohttp_transport = True
    yield
    litellm.disable_aiohttp_transport = previous


@pytest.fixture
def provider() -> LitellmProvider:
    settings = settings_from(
        "model_list:\n  - model_name: claude\n    litellm_params:\n"
        "      {model: anthropic/claude-sonnet-4-5, api_key: sk-ant-config, max_retries: 0}\n"
    )
    return LitellmProvider(settings.model_list[0])


def chat(**fields: object) -> bytes:
    return orjson.dumps(
        {"model": "claude", "messages": [{"role": "user", "content": "hi"}], **fields}
    )


@respx.mock
async def test_answer_comes_back_in_openai_shape(provider: LitellmProvider) -> None:
    """An Anthropic answer is translated to a chat.completion with usage."""
    route = respx.post(URL).respond(200, json=ANSWER)
    response = await provider.complete(parse_chat_request(chat(max_tokens=5, x_vendor=1)), CTX)
    payload = orjson.loads(response.body or b"")
    assert payload["object"] == "chat.completion"
    assert payload["choices"][0]["message"]["content"] == "Paris"
    assert payload["usage"]["prompt_tokens"] == 12
    sent = route.calls.last.request
    assert sent.headers["x-api-key"] == "sk-ant-config"
    assert orjson.loads(sent.content)["x_vendor"] == 1


@pytest.mark.parametrize(
    "field",
    ["num_retries", "fallbacks", "context_window_fallback_dict", "cache", "timeout", "drop_params"],
)
def test_litellm_settings_cannot_come_from_a_request(provider: LitellmProvider, field: str) -> None:
    """A body field litellm would read as its own setting is refused, naming it."""
    with pytest.raises(ForbiddenParameter) as caught:
        provider.kwargs(parse_chat_request(chat(**{field: 1})))
    assert caught.value.param == field


@respx.mock
async def test_anthropic_overflow_is_classified(provider: LitellmProvider) -> None:
    """Anthropic's "prompt is too long" is ContextWindowExceeded with both sizes."""
    error = {
        "type": "error",
        "error": {
            "type": "invalid_request_error",
            "message": "prompt is too long: 208310 tokens > 200000 maximum",
        },
    }
    respx.post(URL).respond(400, json=error)
    with pytest.raises(ContextWindowExceeded) as caught:
        await provider.complete(parse_chat_request(chat()), CTX)
    assert caught.value.message == "prompt is too long: 208310 tokens > 200000 maximum"
    assert (caught.value.requested, caught.value.limit, caught.value.provider) == (
        208310,
        200000,
        "anthropic",
    )


@respx.mock
async def test_token_rate_limit_is_not_an_overflow(provider: LitellmProvider) -> None:
    """A per-minute token limit is a 429 with Retry-After, never an overflow."""
    error = {
        "type": "error",
        "error": {
            "type": "rate_limit_error",
            "message": "Number of request tokens has exceeded your per-minute rate limit",
        },
    }
    respx.post(URL).respond(429, json=error, headers={"retry-after": "12"})
    with pytest.raises(UpstreamRateLimited) as caught:
        await provider.complete(parse_chat_request(chat()), CTX)
    assert caught.value.headers() == {"retry-after": "12"}


@respx.mock
async def test_output_cap_is_a_rejection_not_an_overflow(provider: LitellmProvider) -> None:
    """max_tokens over the model's output cap is the upstream's 400, not an overflow."""
    error = {
        "type": "error",
        "error": {
            "type": "invalid_request_error",
            "message": "max_tokens: 100000 > 64000, which is the maximum allowed number of output tokens for claude-sonnet-4-5",
        },
    }
    respx.post(URL).respond(400, json=error)
    with pytest.raises(UpstreamRejected) as caught:
        await provider.complete(parse_chat_request(chat(max_tokens=100000)), CTX)
    assert "maximum allowed number of output tokens" in caught.value.message


@respx.mock
async def test_stream_is_sse_in_openai_chunks(provider: LitellmProvider) -> None:
    """A streamed Anthropic answer becomes OpenAI chunk events ending with [DONE]."""
    events = [
        ("message_start", {"type": "message_start", "message": {**ANSWER, "content": [], "usage": {"input_tokens": 12, "output_tokens": 0}}}),
        ("content_block_start", {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
        ("content_block_delta", {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "Par"}}),
        ("content_block_delta", {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "is"}}),
        ("content_block_stop", {"type": "content_block_stop", "index": 0}),
        ("message_delta", {"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 2}}),
        ("message_stop", {"type": "message_stop"}),
    ]  # fmt: skip
    body = b"".join(
        b"event: " + name.encode() + b"\ndata: " + orjson.dumps(data) + b"\n\n"
        for name, data in events
    )
    respx.post(URL).respond(200, content=body, headers={"content-type": "text/event-stream"})
    response = await provider.complete(parse_chat_request(chat(stream=True)), CTX)
    assert response.stream is not None
    out = b"".join([chunk async for chunk in response.stream])
    payloads = [line[6:] for line in out.split(b"\n\n") if line.startswith(b"data: ")]
    assert payloads[-1] == b"[DONE]"
    chunks = [orjson.loads(p) for p in payloads[:-1]]
    assert all(c["object"] == "chat.completion.chunk" for c in chunks)
    text = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"])
    assert text == "Paris"
