"""Gemini models (Google AI Studio): overspill's own translation and litellm.acompletion.

Every behaviour both must share runs against both (`provider`); what only overspill's path
has (a cut stream, the fallback, the key's place) is tested on it alone.
"""

from __future__ import annotations

from typing import Any

import orjson
import pytest
import respx

from kernel.errors import (
    ContextWindowExceeded,
    OverspillError,
    UpstreamBadResponse,
    UpstreamRateLimited,
    UpstreamTooLarge,
)
from kernel.types import ChatRequest, ChatResponse, Provider, RequestContext
from providers.gemini import GeminiProvider, serves
from providers.litellm import LitellmProvider
from providers.transport import Upstream
from proxy.http import parse_chat_request
from tests.conftest import settings_from
from tests.providers.conftest import Pieces, chunks_of

pytestmark = pytest.mark.usefixtures("no_aiohttp")

BASE = "https://generativelanguage.googleapis.com/v1beta/models/gemini-2.5-flash"
URL = f"{BASE}:generateContent"
STREAM_URL = f"{BASE}:streamGenerateContent"
USAGE = {"promptTokenCount": 12, "candidatesTokenCount": 3, "totalTokenCount": 15}
ANSWER = {
    "candidates": [
        {"content": {"role": "model", "parts": [{"text": "Paris"}]}, "finishReason": "STOP"}
    ],
    "usageMetadata": USAGE,
    "modelVersion": "gemini-2.5-flash",
    "responseId": "resp-1",
}
CTX = RequestContext("rid", "tenant")
SSE = {"content-type": "text/event-stream"}
OVERFLOW = {
    "error": {
        "code": 400,
        "message": "The input token count (1201336) exceeds the maximum number of tokens "
        "allowed (1048576).",
        "status": "INVALID_ARGUMENT",
    }
}
QUOTA = {
    "error": {
        "code": 429,
        "message": "You exceeded your current quota, please check your plan and billing "
        "details. Quota exceeded for metric: "
        "generativelanguage.googleapis.com/generate_content_paid_tier_input_token_count, "
        "limit: 1000000",
        "status": "RESOURCE_EXHAUSTED",
    }
}


def _config(model: str = "gemini/gemini-2.5-flash", extra: str = "") -> str:
    return (
        "model_list:\n  - model_name: gem\n    litellm_params:\n"
        f"      {{model: {model}, api_key: AIza-config{extra}}}\n"
    )


class _Fallback:
    """Stands in for litellm's path: records what was handed to it."""

    def __init__(self) -> None:
        self.name = "gemini"
        self.requests: list[ChatRequest] = []

    async def complete(self, request: ChatRequest, ctx: RequestContext) -> ChatResponse:
        self.requests.append(request)
        return ChatResponse(body=b'{"from": "litellm"}')

    async def aclose(self) -> None:
        """Nothing to close."""


def _built(kind: str, client: Upstream, config: str | None = None, **options: Any) -> Provider:
    """overspill's translation ("own", litellm's acompletion as its fallback) or litellm's
    `acompletion` alone ("acompletion")."""
    entry = settings_from(config or _config()).model_list[0]
    litellms = LitellmProvider(entry, **options)
    if kind == "acompletion":
        return litellms
    return GeminiProvider(entry, client, litellms, **options)


@pytest.fixture(params=["own", "acompletion"])
def provider(request: pytest.FixtureRequest, client: Upstream) -> Provider:
    """Each way a Gemini deployment is served in turn, with a 4 KB answer limit."""
    return _built(request.param, client, max_response_bytes=4096)


@pytest.fixture
def own(client: Upstream) -> GeminiProvider:
    """overspill's translation alone."""
    built = _built("own", client, max_response_bytes=4096)
    assert isinstance(built, GeminiProvider)
    return built


def chat(**fields: object) -> bytes:
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hi"}]
    return orjson.dumps({"model": "gem", "messages": messages, **fields})


def sse(*events: dict[str, Any]) -> bytes:
    return b"".join(b"data: " + orjson.dumps(e) + b"\r\n\r\n" for e in events)


def text_events(*pieces: str, end: bool = True) -> list[dict[str, Any]]:
    """Gemini's stream for a text answer (`end=False`: cut before the finish reason)."""
    out: list[dict[str, Any]] = [
        {
            "candidates": [{"content": {"role": "model", "parts": [{"text": piece}]}}],
            "usageMetadata": {"promptTokenCount": 12, "totalTokenCount": 12},
            "modelVersion": "gemini-2.5-flash",
            "responseId": "resp-2",
        }
        for piece in pieces
    ]
    if end:
        out.append(
            {
                "candidates": [{"content": {"parts": [{"text": ""}]}, "finishReason": "STOP"}],
                "usageMetadata": USAGE,
                "modelVersion": "gemini-2.5-flash",
                "responseId": "resp-2",
            }
        )
    return out


def test_serves_gemini_deployments_with_a_key(monkeypatch: pytest.MonkeyPatch) -> None:
    """A gemini/ deployment with a key (its own or GEMINI_API_KEY) and no other litellm
    setting is served here; vertex_ai, a keyless one or one with more settings is not."""
    for name in ("GOOGLE_API_KEY", "GEMINI_API_KEY", "PALM_API_KEY"):
        monkeypatch.delenv(name, raising=False)
    entry = settings_from(_config()).model_list[0]
    keyless = settings_from(
        "model_list:\n  - model_name: g\n    litellm_params: {model: gemini/gemini-2.5-flash}\n"
    ).model_list[0]
    assert serves(entry)
    assert not serves(keyless)
    monkeypatch.setenv("GEMINI_API_KEY", "AIza-env")
    assert serves(keyless)
    assert not serves(settings_from(_config("vertex_ai/gemini-2.5-flash")).model_list[0])
    assert not serves(settings_from(_config(extra=", safety_settings: []")).model_list[0])


@respx.mock
async def test_answer_comes_back_in_openai_shape(provider: Provider) -> None:
    """A Gemini answer is a chat.completion with usage; the request went out translated,
    the key in x-goog-api-key and not in the URL."""
    route = respx.post(URL).respond(200, json=ANSWER)
    response = await provider.complete(parse_chat_request(chat(max_tokens=5)), CTX)
    payload = orjson.loads(response.body or b"")
    assert payload["object"] == "chat.completion"
    assert payload["id"] == "resp-1"
    assert payload["choices"][0]["message"]["content"] == "Paris"
    assert payload["choices"][0]["finish_reason"] == "stop"
    assert payload["usage"]["prompt_tokens"] == 12
    assert payload["usage"]["total_tokens"] == 15
    sent = route.calls.last.request
    assert sent.headers["x-goog-api-key"] == "AIza-config"
    assert "AIza" not in str(sent.url)
    body = orjson.loads(sent.content)
    assert body["system_instruction"] == {"parts": [{"text": "Be brief."}]}
    assert body["contents"] == [{"role": "user", "parts": [{"text": "hi"}]}]
    assert body["generationConfig"] == {"max_output_tokens": 5}


def test_the_url_follows_the_model_and_the_api_base(client: Upstream) -> None:
    """Gemini 3 is under v1alpha, older models under v1beta; an api_base is used as given,
    with the model's path after it."""
    newer = _built("own", client, _config("gemini/gemini-3.1-pro-preview"))
    assert isinstance(newer, GeminiProvider)
    assert newer.own.exchange.url.endswith("/v1alpha/models/gemini-3.1-pro-preview:generateContent")
    based = _built("own", client, _config(extra=", api_base: 'http://mock.test/v1beta'"))
    assert isinstance(based, GeminiProvider)
    assert (
        based.own.exchange.url == "http://mock.test/v1beta/models/gemini-2.5-flash:generateContent"
    )
    assert based.own.streams.url.endswith(":streamGenerateContent?alt=sse")


async def test_unsupported_parameter_is_the_clients_error(provider: Provider) -> None:
    """An OpenAI parameter Gemini lacks is a 400 naming it, unless drop_params is on."""
    with pytest.raises(OverspillError) as caught:
        await provider.complete(parse_chat_request(chat(logit_bias={"1": 2})), CTX)
    assert caught.value.http_status() == 400
    assert "logit_bias" in caught.value.message


@respx.mock
async def test_gemini_overflow_is_classified(provider: Provider) -> None:
    """Gemini's "input token count exceeds the maximum" (400 INVALID_ARGUMENT) is
    ContextWindowExceeded with both sizes."""
    respx.post(URL).respond(400, json=OVERFLOW)
    with pytest.raises(ContextWindowExceeded) as caught:
        await provider.complete(parse_chat_request(chat()), CTX)
    assert (caught.value.requested, caught.value.limit) == (1201336, 1048576)
    assert caught.value.provider == "gemini"


@respx.mock
async def test_overflow_of_a_stream_is_classified(own: GeminiProvider) -> None:
    """The same overflow answered to a stream request is the call's error, before any byte."""
    respx.post(url__startswith=STREAM_URL).respond(400, json=OVERFLOW)
    with pytest.raises(ContextWindowExceeded) as caught:
        await own.complete(parse_chat_request(chat(stream=True)), CTX)
    assert caught.value.limit == 1048576


@respx.mock
async def test_token_quota_is_a_rate_limit_not_an_overflow(provider: Provider) -> None:
    """429 RESOURCE_EXHAUSTED naming an input-token quota is a rate limit, never an overflow."""
    respx.post(URL).respond(429, json=QUOTA, headers={"retry-after": "7"})
    with pytest.raises(UpstreamRateLimited) as caught:
        await provider.complete(parse_chat_request(chat()), CTX)
    assert not isinstance(caught.value, ContextWindowExceeded)


@respx.mock
async def test_answer_over_the_limit_is_refused(own: GeminiProvider) -> None:
    """A JSON answer over max_response_bytes is UpstreamTooLarge, not read whole."""
    respx.post(URL).respond(200, json={**ANSWER, "padding": "x" * 5000})
    with pytest.raises(UpstreamTooLarge):
        await own.complete(parse_chat_request(chat()), CTX)


@respx.mock
async def test_a_json_answer_that_is_not_gemini_s_is_a_bad_response(own: GeminiProvider) -> None:
    """A 200 JSON object without candidates is a 502, naming what was expected."""
    respx.post(URL).respond(200, json={"choices": []})
    with pytest.raises(UpstreamBadResponse, match="GenerateContentResponse"):
        await own.complete(parse_chat_request(chat()), CTX)


@respx.mock
async def test_stream_is_sse_in_openai_chunks(provider: Provider) -> None:
    """A streamed answer becomes OpenAI chunk events: the role first, the text, stop, [DONE]."""
    body = sse(*text_events("Par", "is"))
    route = respx.post(url__startswith=STREAM_URL).respond(200, content=body, headers=SSE)
    response = await provider.complete(parse_chat_request(chat(stream=True)), CTX)
    chunks = await chunks_of(response)
    assert chunks[-1] == "[DONE]"
    parsed = [c for c in chunks if isinstance(c, dict)]
    assert all(c["object"] == "chat.completion.chunk" for c in parsed)
    deltas = [c["choices"][0]["delta"] for c in parsed if c["choices"]]
    assert deltas[0]["role"] == "assistant"
    assert "".join(d.get("content") or "" for d in deltas) == "Paris"
    finishes = [c["choices"][0].get("finish_reason") for c in parsed if c["choices"]]
    assert [f for f in finishes if f] == ["stop"]
    assert route.calls.last.request.url.params["alt"] == "sse"


@respx.mock
async def test_stream_usage_comes_when_asked(provider: Provider) -> None:
    """stream_options.include_usage adds the usage chunk (the last usageMetadata)."""
    body = sse(*text_events("Hi"))
    respx.post(url__startswith=STREAM_URL).respond(200, content=body, headers=SSE)
    request = parse_chat_request(chat(stream=True, stream_options={"include_usage": True}))
    chunks = await chunks_of(await provider.complete(request, CTX))
    usage = [c["usage"] for c in chunks if isinstance(c, dict) and c.get("usage")]
    assert usage[-1]["prompt_tokens"] == 12
    assert usage[-1]["completion_tokens"] == 3


@respx.mock
async def test_stream_without_usage_asked_has_none(own: GeminiProvider) -> None:
    """Without include_usage, no chunk carries usage."""
    body = sse(*text_events("Hi"))
    respx.post(url__startswith=STREAM_URL).respond(200, content=body, headers=SSE)
    chunks = await chunks_of(await own.complete(parse_chat_request(chat(stream=True)), CTX))
    assert not any(isinstance(c, dict) and "usage" in c for c in chunks)


@respx.mock
async def test_a_stream_cut_before_its_finish_reason_is_an_error(own: GeminiProvider) -> None:
    """A stream that ends before any candidate gave its finish reason is an error, never a
    silent end."""
    body = sse(*text_events("Par", "is", end=False))
    respx.post(url__startswith=STREAM_URL).respond(200, content=body, headers=SSE)
    response = await own.complete(parse_chat_request(chat(stream=True)), CTX)
    with pytest.raises(UpstreamBadResponse, match=r"before its end event \(the finish reason"):
        await chunks_of(response)


@respx.mock
async def test_an_error_event_mid_stream_is_classified(own: GeminiProvider) -> None:
    """An error object as a stream event (a 200 stream) is raised as its classified error:
    its code 429 makes a quota a rate limit."""
    body = Pieces([sse(text_events("Hi", end=False)[0]), sse(QUOTA)])
    respx.post(url__startswith=STREAM_URL).respond(200, stream=body, headers=SSE)
    response = await own.complete(parse_chat_request(chat(stream=True)), CTX)
    with pytest.raises(UpstreamRateLimited) as caught:
        await chunks_of(response)
    assert "quota" in caught.value.message


@respx.mock
async def test_tool_calls_stream_with_their_signatures(own: GeminiProvider) -> None:
    """A function call streams as a tool call whose id carries its thought signature, and
    the stream finishes with tool_calls."""
    event = {
        "candidates": [
            {
                "content": {
                    "parts": [
                        {
                            "functionCall": {"name": "get", "args": {"a": 1}},
                            "thoughtSignature": "c2",
                        }
                    ]
                },
                "finishReason": "STOP",
            }
        ],
        "usageMetadata": USAGE,
        "responseId": "r",
    }
    respx.post(url__startswith=STREAM_URL).respond(200, content=sse(event), headers=SSE)
    chunks = await chunks_of(await own.complete(parse_chat_request(chat(stream=True)), CTX))
    first = chunks[0]
    assert isinstance(first, dict)
    call = first["choices"][0]["delta"]["tool_calls"][0]
    assert call["id"].endswith("__thought__c2")
    assert call["function"] == {"name": "get", "arguments": '{"a": 1}'}
    assert first["choices"][0]["finish_reason"] == "tool_calls"


async def test_what_only_litellm_writes_goes_to_the_fallback(client: Upstream) -> None:
    """A response_format request is handed to litellm's path; a plain one is not."""
    fallback = _Fallback()
    entry = settings_from(_config()).model_list[0]
    provider = GeminiProvider(entry, client, fallback)
    request = parse_chat_request(chat(response_format={"type": "json_object"}))
    response = await provider.complete(request, CTX)
    assert response.body == b'{"from": "litellm"}'
    assert fallback.requests == [request]
