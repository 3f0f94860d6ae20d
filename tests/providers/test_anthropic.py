"""Anthropic models: overspill's own translation and litellm's, each over overspill's HTTP call.

Every behaviour both must share runs against both (`provider`); what only one has is tested
on it alone.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from typing import Any

import httpx
import orjson
import pytest
import respx

from kernel.errors import (
    ContextWindowExceeded,
    ForbiddenParameter,
    OverspillError,
    UpstreamBadResponse,
    UpstreamError,
    UpstreamRateLimited,
    UpstreamRejected,
    UpstreamTooLarge,
)
from kernel.types import ChatRequest, ChatResponse, Provider, RequestContext
from providers.anthropic import AnthropicProvider, serves
from providers.litellm import LitellmProvider
from providers.translated import TranslatedProvider, build_provider
from providers.transport import Upstream
from proxy.http import parse_chat_request
from tests.conftest import settings_from
from tests.providers.conftest import Pieces, chunks_of

pytestmark = pytest.mark.usefixtures("no_aiohttp")

URL = "https://api.anthropic.com/v1/messages"
ANSWER = {
    "id": "msg_1", "type": "message", "role": "assistant", "model": "claude-sonnet-4-5",
    "content": [{"type": "text", "text": "Paris"}], "stop_reason": "end_turn",
    "stop_sequence": None, "usage": {"input_tokens": 12, "output_tokens": 3},
}  # fmt: skip
CTX = RequestContext("rid", "tenant")
SSE = {"content-type": "text/event-stream"}


def _config(model: str = "anthropic/claude-sonnet-4-5", extra: str = "") -> str:
    return (
        "model_list:\n  - model_name: claude\n    litellm_params:\n"
        f"      {{model: {model}, api_key: sk-ant-config{extra}}}\n"
    )


def _built(kind: str, client: Upstream, config: str | None = None, **options: Any) -> Provider:
    """A deployment's provider: overspill's translation ("own"), litellm's over overspill's
    transport ("litellm"), or `litellm.acompletion` ("acompletion": a deployment with other
    litellm settings)."""
    entry = settings_from(config or _config()).model_list[0]
    if kind == "acompletion":
        return LitellmProvider(entry, **options)
    litellms = build_provider(entry, client, **options)
    assert isinstance(litellms, TranslatedProvider)
    if kind == "litellm":
        return litellms
    return AnthropicProvider(entry, client, litellms, **options)


@pytest.fixture(params=["own", "litellm", "acompletion"])
def provider(request: pytest.FixtureRequest, client: Upstream) -> Provider:
    """Each way an Anthropic deployment is served in turn, with a 4 KB answer limit."""
    return _built(request.param, client, max_response_bytes=4096)


@pytest.fixture(params=["own", "litellm"])
def translating(request: pytest.FixtureRequest, client: Upstream) -> Provider:
    """The two paths where overspill reads the answer itself (acompletion parses its own)."""
    return _built(request.param, client, max_response_bytes=4096)


@pytest.fixture
def litellms(client: Upstream) -> TranslatedProvider:
    """litellm's translation alone."""
    built = _built("litellm", client, max_response_bytes=4096)
    assert isinstance(built, TranslatedProvider)
    return built


def chat(**fields: object) -> bytes:
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hi"}]
    return orjson.dumps({"model": "claude", "messages": messages, **fields})


def event(name: str, payload: Mapping[str, object]) -> bytes:
    return b"event: " + name.encode() + b"\ndata: " + orjson.dumps(payload) + b"\n\n"


def events(*pieces: str, end: bool = True) -> list[bytes]:
    """Anthropic's event sequence for a text answer (`end=False`: cut before message_stop)."""
    start = {**ANSWER, "content": [], "stop_reason": None, "usage": {"input_tokens": 12, "output_tokens": 1}}  # fmt: skip
    out = [
        event("message_start", {"type": "message_start", "message": start}),
        event("content_block_start", {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
        event("ping", {"type": "ping"}),
    ]  # fmt: skip
    for piece in pieces:
        delta = {"type": "text_delta", "text": piece}
        out.append(event("content_block_delta", {"type": "content_block_delta", "index": 0, "delta": delta}))  # fmt: skip
    out.append(event("content_block_stop", {"type": "content_block_stop", "index": 0}))
    if end:
        out.append(event("message_delta", {"type": "message_delta", "delta": {"stop_reason": "end_turn", "stop_sequence": None}, "usage": {"output_tokens": 2}}))  # fmt: skip
        out.append(event("message_stop", {"type": "message_stop"}))
    return out


@respx.mock
async def test_answer_comes_back_in_openai_shape(provider: Provider) -> None:
    """An Anthropic answer is a chat.completion with usage; the request went out translated."""
    route = respx.post(URL).respond(200, json=ANSWER)
    request = parse_chat_request(chat(max_tokens=5, x_vendor=1))
    response = await provider.complete(request, CTX)
    payload = orjson.loads(response.body or b"")
    assert payload["object"] == "chat.completion"
    assert payload["choices"][0]["message"]["content"] == "Paris"
    assert payload["choices"][0]["finish_reason"] == "stop"
    assert payload["usage"]["prompt_tokens"] == 12
    sent = route.calls.last.request
    assert sent.headers["x-api-key"] == "sk-ant-config"
    assert "anthropic-version" in sent.headers
    body = orjson.loads(sent.content)
    assert body["model"] == "claude-sonnet-4-5"
    assert body["x_vendor"] == 1
    assert body["max_tokens"] == 5
    assert body["system"][0]["text"] == "Be brief."
    assert [m["role"] for m in body["messages"]] == ["user"]
    assert request.messages[0] == {"role": "system", "content": "Be brief."}, "left as it was"


@pytest.mark.parametrize("kind", ["own", "litellm"])
async def test_api_base_gets_the_messages_path_once(client: Upstream, kind: str) -> None:
    """api_base is the server's root or already the endpoint; both reach /v1/messages."""
    for base in ("http://mock.test", "http://mock.test/v1/messages"):
        built = _built(kind, client, _config(extra=f", api_base: '{base}'"))
        assert isinstance(built, AnthropicProvider | TranslatedProvider)
        exchange = built.own.exchange if isinstance(built, AnthropicProvider) else built.exchange
        assert exchange.url == "http://mock.test/v1/messages"


@pytest.mark.parametrize("kind", ["own", "litellm", "acompletion"])
@respx.mock
async def test_the_base_url_variables_are_honoured_as_litellm_does(
    client: Upstream, kind: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without api_base, ANTHROPIC_API_BASE then ANTHROPIC_BASE_URL say where requests go:
    a company gateway set so is never bypassed for api.anthropic.com."""
    monkeypatch.setenv("ANTHROPIC_BASE_URL", "http://gateway.test/anthropic")
    route = respx.post("http://gateway.test/anthropic/v1/messages").respond(200, json=ANSWER)
    await _built(kind, client).complete(parse_chat_request(chat(max_tokens=5)), CTX)
    monkeypatch.setenv("ANTHROPIC_API_BASE", "http://first.test")
    first = respx.post("http://first.test/v1/messages").respond(200, json=ANSWER)
    await _built(kind, client).complete(parse_chat_request(chat(max_tokens=5)), CTX)
    monkeypatch.setenv("LITELLM_ANTHROPIC_DISABLE_URL_SUFFIX", "true")
    monkeypatch.setenv("ANTHROPIC_API_BASE", "http://first.test/messages")
    bare = respx.post("http://first.test/messages").respond(200, json=ANSWER)
    await _built(kind, client).complete(parse_chat_request(chat(max_tokens=5)), CTX)
    assert (route.call_count, first.call_count, bare.call_count) == (1, 1, 1)


def test_providers_without_a_wire_keep_litellm(client: Upstream) -> None:
    """A provider not served here, or a deployment with other litellm settings, uses litellm."""
    gemini = settings_from(_config("gemini/gemini-2.5-flash")).model_list[0]
    assert isinstance(build_provider(gemini, client), LitellmProvider)
    extra = settings_from(_config(extra=", aws_region_name: eu-west-1")).model_list[0]
    assert isinstance(build_provider(extra, client), LitellmProvider)


@pytest.mark.parametrize(
    "field", ["num_retries", "fallbacks", "cache", "timeout", "api_base", "drop_params"]
)
async def test_litellm_settings_cannot_come_from_a_request(
    litellms: TranslatedProvider, field: str
) -> None:
    """A body field litellm would read as its own setting is refused, naming it."""
    with pytest.raises(ForbiddenParameter) as caught:
        await litellms.complete(parse_chat_request(chat(**{field: 1})), CTX)
    assert caught.value.param == field


async def test_unsupported_parameter_is_the_clients_error(provider: Provider) -> None:
    """An OpenAI parameter Anthropic lacks is a 400 naming it and overspill's setting that
    drops it (litellm's own words name its settings), unless drop_params is on."""
    with pytest.raises(OverspillError) as caught:
        await provider.complete(parse_chat_request(chat(logit_bias={"1": 2})), CTX)
    assert caught.value.http_status() == 400
    assert caught.value.type == "invalid_request_error"
    assert caught.value.message == (
        "anthropic does not support the parameter(s) logit_bias: remove them, or set "
        "litellm_settings.drop_params: true in overspill's config to drop them"
    )
    assert caught.value.param == "logit_bias"


@pytest.mark.parametrize(
    ("response_format", "named"),
    [
        ("x", "response_format type - x"),
        ({"type": "json_schema"}, "'json_schema'"),
        ({"type": "json_schema", "json_schema": {}}, "'schema'"),
        ({"type": "json_schema", "json_schema": "x"}, "another type"),
    ],
)
@respx.mock
async def test_what_litellm_cannot_write_is_a_400_saying_what(
    provider: Provider, response_format: object, named: str
) -> None:
    """A request litellm's code fails to write (its own KeyError or TypeError) is the
    client's 400 in litellm's words, on every path: never a JSON nesting error, a failed
    connection or a traceback; nothing is sent."""
    sent = respx.post(URL).respond(json=ANSWER)
    with pytest.raises(OverspillError) as caught:
        await provider.complete(parse_chat_request(chat(response_format=response_format)), CTX)
    assert caught.value.http_status() == 400
    assert caught.value.type == "invalid_request_error"
    assert caught.value.message.startswith("the request cannot be written in anthropic's API")
    assert named in caught.value.message
    assert "Traceback" not in caught.value.message
    assert not sent.called


@pytest.mark.parametrize("kind", ["own", "litellm"])
@respx.mock
async def test_drop_params_drops_what_anthropic_lacks(client: Upstream, kind: str) -> None:
    """With drop_params, the unsupported parameter is left out of the upstream request."""
    dropping = _built(kind, client, drop_params=True)
    route = respx.post(URL).respond(200, json=ANSWER)
    await dropping.complete(parse_chat_request(chat(logit_bias={"1": 2})), CTX)
    assert "logit_bias" not in orjson.loads(route.calls.last.request.content)


@respx.mock
async def test_anthropic_overflow_is_classified(provider: Provider) -> None:
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
async def test_token_rate_limit_is_not_an_overflow(provider: Provider) -> None:
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
        await provider.complete(parse_chat_request(chat(stream=True)), CTX)
    assert caught.value.headers() == {"retry-after": "12"}


@respx.mock
async def test_output_cap_is_a_rejection_not_an_overflow(provider: Provider) -> None:
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
async def test_answer_over_the_limit_is_refused(provider: Provider) -> None:
    """A JSON answer over max_response_bytes is UpstreamTooLarge, not read whole."""
    respx.post(URL).respond(200, json={**ANSWER, "padding": "x" * 5000})
    with pytest.raises(UpstreamTooLarge):
        await provider.complete(parse_chat_request(chat()), CTX)


@respx.mock
async def test_stream_is_sse_in_openai_chunks(provider: Provider) -> None:
    """A streamed answer becomes OpenAI chunk events: the role first, the text, stop, [DONE]."""
    route = respx.post(URL).respond(200, stream=httpx.ByteStream(b"".join(events("Par", "is"))), headers=SSE)  # fmt: skip
    response = await provider.complete(parse_chat_request(chat(stream=True)), CTX)
    chunks = await chunks_of(response)
    assert chunks[-1] == "[DONE]"
    parsed = [c for c in chunks if isinstance(c, dict)]
    assert all(c["object"] == "chat.completion.chunk" for c in parsed)
    assert len({c["id"] for c in parsed}) == 1
    deltas = [c["choices"][0]["delta"] for c in parsed]
    assert deltas[0]["role"] == "assistant"
    assert "".join(d.get("content") or "" for d in deltas) == "Paris"
    assert parsed[-1]["choices"][0]["finish_reason"] == "stop"
    assert orjson.loads(route.calls.last.request.content)["stream"] is True


@respx.mock
async def test_stream_usage_comes_when_asked(translating: Provider) -> None:
    """stream_options.include_usage adds OpenAI's last usage chunk (no choices)."""
    respx.post(URL).respond(200, stream=httpx.ByteStream(b"".join(events("Hi"))), headers=SSE)
    request = chat(stream=True, stream_options={"include_usage": True})
    chunks = await chunks_of(await translating.complete(parse_chat_request(request), CTX))
    last = chunks[-2]
    assert isinstance(last, dict)
    assert last["choices"] == []
    assert last["usage"]["prompt_tokens"] == 12
    assert last["usage"]["completion_tokens"] == 2


@pytest.mark.reliability("streams")
@respx.mock
async def test_stream_cut_before_its_end_is_an_error(provider: Provider) -> None:
    """A stream that stops before message_stop ends with an error, never looks complete."""
    respx.post(URL).respond(200, stream=Pieces(events("Par", end=False)), headers=SSE)
    response = await provider.complete(parse_chat_request(chat(stream=True)), CTX)
    assert response.stream is not None
    seen: list[bytes] = []

    async def read(stream: AsyncIterator[bytes]) -> None:
        async for chunk in stream:
            seen.append(chunk)

    with pytest.raises(UpstreamBadResponse, match="before its end event"):
        await read(response.stream)
    assert b"Par" in b"".join(seen)


@pytest.mark.reliability("streams")
@respx.mock
async def test_error_event_first_is_the_calls_error(provider: Provider) -> None:
    """An `event: error` before any text is raised before the response head."""
    error = {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}
    respx.post(URL).respond(200, stream=httpx.ByteStream(event("error", error)), headers=SSE)
    with pytest.raises(UpstreamError, match="Overloaded"):
        await provider.complete(parse_chat_request(chat(stream=True)), CTX)


@pytest.mark.reliability("streams")
@respx.mock
async def test_error_event_mid_stream_ends_it_with_the_error(provider: Provider) -> None:
    """An error event after some text ends the stream with that error (classified)."""
    error = {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}
    body = Pieces([*events("Par", end=False), event("error", error)])
    respx.post(URL).respond(200, stream=body, headers=SSE)
    response = await provider.complete(parse_chat_request(chat(stream=True)), CTX)
    assert response.stream is not None
    with pytest.raises(UpstreamError, match="Overloaded"):
        async for _ in response.stream:
            pass


@pytest.mark.reliability("upstream-bodies")
@respx.mock
async def test_stream_event_that_is_not_json_is_a_bad_response(
    translating: Provider,
) -> None:
    """An event whose data is not JSON is UpstreamBadResponse, not litellm's exception."""
    body = Pieces([*events("Par", end=False), b"event: content_block_delta\ndata: {oops\n\n"])
    respx.post(URL).respond(200, stream=body, headers=SSE)
    response = await translating.complete(parse_chat_request(chat(stream=True)), CTX)
    assert response.stream is not None
    with pytest.raises(UpstreamBadResponse, match="not JSON"):
        async for _ in response.stream:
            pass


@pytest.mark.reliability("upstream-bodies")
@respx.mock
async def test_answer_that_is_not_a_messages_answer_is_a_bad_response(
    translating: Provider,
) -> None:
    """A JSON object that is not a Messages answer is UpstreamBadResponse (a 502)."""
    respx.post(URL).respond(200, json={"unexpected": True})
    with pytest.raises(UpstreamBadResponse, match="not the API's response"):
        await translating.complete(parse_chat_request(chat()), CTX)


@respx.mock
async def test_streamed_tool_call_becomes_tool_call_deltas(provider: Provider) -> None:
    """A tool_use block streams as OpenAI tool_calls deltas, ending with tool_calls."""
    start = {**ANSWER, "content": [], "stop_reason": None, "usage": {"input_tokens": 12, "output_tokens": 1}}  # fmt: skip
    body = [
        event("message_start", {"type": "message_start", "message": start}),
        event("content_block_start", {"type": "content_block_start", "index": 0, "content_block": {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {}}}),
        event("content_block_delta", {"type": "content_block_delta", "index": 0, "delta": {"type": "input_json_delta", "partial_json": '{"city": '}}),
        event("content_block_delta", {"type": "content_block_delta", "index": 0, "delta": {"type": "input_json_delta", "partial_json": '"Paris"}'}}),
        event("content_block_stop", {"type": "content_block_stop", "index": 0}),
        event("message_delta", {"type": "message_delta", "delta": {"stop_reason": "tool_use", "stop_sequence": None}, "usage": {"output_tokens": 9}}),
        event("message_stop", {"type": "message_stop"}),
    ]  # fmt: skip
    respx.post(URL).respond(200, stream=Pieces(body), headers=SSE)
    chunks = await chunks_of(await provider.complete(parse_chat_request(chat(stream=True)), CTX))
    parsed = [c for c in chunks if isinstance(c, dict)]
    calls = [call for c in parsed for call in c["choices"][0]["delta"].get("tool_calls") or []]
    assert calls[0]["id"] == "toolu_1"
    assert calls[0]["function"]["name"] == "get_weather"
    assert "".join(c["function"].get("arguments") or "" for c in calls) == '{"city": "Paris"}'
    assert parsed[-1]["choices"][0]["finish_reason"] == "tool_calls"


def test_parameter_mapping_is_remembered_as_new_objects(litellms: TranslatedProvider) -> None:
    """A repeated parameter set is mapped once; each request still gets objects of its own."""
    params = {"max_tokens": 5, "temperature": 0.2, "stop": ["\n"], "x_vendor": {"a": 1}}

    def fresh() -> dict[str, Any]:
        return dict(orjson.loads(orjson.dumps(params)))  # as each request parses its body

    first = litellms.translation.mapped(fresh(), False)
    first["x_vendor"]["a"] = 2
    first["stop_sequences"].append("changed")
    again = litellms.translation.mapped(fresh(), False)
    assert again == {"max_tokens": 5, "temperature": 0.2, "stop_sequences": ["\n"], "x_vendor": {"a": 1}}  # fmt: skip
    assert len(litellms.translation.memo) == 1
    assert litellms.translation.mapped(fresh(), True) is not again
    assert len(litellms.translation.memo) == 2


# -- overspill's own translation ------------------------------------------------------------


class Recording:
    """A fallback provider that records the requests it is given."""

    name = "anthropic"

    def __init__(self) -> None:
        self.requests: list[ChatRequest] = []

    async def complete(self, request: ChatRequest, ctx: RequestContext) -> ChatResponse:
        self.requests.append(request)
        return ChatResponse(body=b"{}")

    async def aclose(self) -> None:
        """Nothing to release."""


def own(client: Upstream, fallback: Provider, config: str | None = None) -> AnthropicProvider:
    return AnthropicProvider(settings_from(config or _config()).model_list[0], client, fallback)


@respx.mock
async def test_only_what_litellm_alone_writes_goes_to_the_fallback(client: Upstream) -> None:
    """A plain request is sent by overspill's translation; response_format goes to litellm's."""
    fallback = Recording()
    provider = own(client, fallback)
    route = respx.post(URL).respond(200, json=ANSWER)
    await provider.complete(parse_chat_request(chat(temperature=0.1)), CTX)
    assert route.call_count == 1
    assert fallback.requests == []
    fancy = parse_chat_request(chat(response_format={"type": "json_object"}))
    await provider.complete(fancy, CTX)
    assert route.call_count == 1
    assert fallback.requests == [fancy]


@respx.mock
async def test_fields_that_are_not_openais_go_to_anthropic_as_given(client: Upstream) -> None:
    """A field litellm would read as a setting (`num_retries`) is part of the Messages body
    here, never acted on (Anthropic's own validation answers for it); `top_k` goes as given."""
    route = respx.post(URL).respond(200, json=ANSWER)
    await own(client, Recording()).complete(parse_chat_request(chat(num_retries=5, top_k=3)), CTX)
    assert route.call_count == 1, "sent once: no retries"
    body = orjson.loads(route.calls.last.request.content)
    assert (body["num_retries"], body["top_k"]) == (5, 3)


def test_serves_anthropic_deployments_with_a_key_and_known_settings(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Other providers, other litellm settings, no key or an OAuth token: litellm's path."""
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)

    def entry(config: str) -> Any:
        return settings_from(config).model_list[0]

    assert serves(entry(_config()))
    assert serves(entry(_config(extra=", extra_headers: {anthropic-beta: x}")))
    assert not serves(entry(_config("gemini/gemini-2.5-flash")))
    assert not serves(entry(_config(extra=", aws_region_name: eu-west-1")))
    keyless = "model_list:\n  - model_name: c\n    litellm_params: {model: anthropic/claude-x}\n"
    assert not serves(entry(keyless))
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-env")
    assert serves(entry(keyless))
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-oat01-token")
    assert not serves(entry(keyless))


@respx.mock
async def test_key_from_the_environment_and_extra_headers_are_sent(
    client: Upstream, monkeypatch: pytest.MonkeyPatch
) -> None:
    """ANTHROPIC_API_KEY stands in for a missing api_key; extra_headers go along."""
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-env")
    config = (
        "model_list:\n  - model_name: c\n    litellm_params:\n"
        "      {model: anthropic/claude-x, extra_headers: {anthropic-beta: b1}}\n"
    )
    route = respx.post(URL).respond(200, json=ANSWER)
    await own(client, Recording(), config).complete(parse_chat_request(chat()), CTX)
    sent = route.calls.last.request
    assert sent.headers["x-api-key"] == "sk-ant-env"
    assert sent.headers["anthropic-beta"] == "b1"
    assert sent.headers["anthropic-version"] == "2023-06-01"


@respx.mock
async def test_bad_message_shape_is_the_clients_error_naming_where(client: Upstream) -> None:
    """A tool call whose arguments are not a JSON object is a 400 naming the message."""
    body = orjson.dumps(
        {
            "model": "claude",
            "messages": [
                {"role": "user", "content": "hi"},
                {"role": "assistant", "tool_calls": [{"id": "c", "type": "function", "function": {"name": "f", "arguments": "[1]"}}]},
            ],
        }
    )  # fmt: skip
    with pytest.raises(OverspillError) as caught:
        await own(client, Recording()).complete(parse_chat_request(body), CTX)
    assert caught.value.http_status() == 400
    assert "messages[1].tool_calls[0].function.arguments" in caught.value.message
