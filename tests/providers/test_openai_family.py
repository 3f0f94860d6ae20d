"""The OpenAI family on litellm's road: litellm's config writes the request and reads the answer,
overspill's transport sends it (`providers/translated.py`), and what reaches the client is what
`litellm.acompletion` gives for the same upstream answer. The upstreams are respx."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
import respx

from kernel.config import ModelEntry
from kernel.errors import UpstreamBadResponse, UpstreamError
from kernel.types import Provider, RequestContext
from providers.litellm import LitellmProvider
from providers.translated import TranslatedProvider, build_provider, resolve
from providers.transport import Upstream
from proxy.http import parse_chat_request
from tests.conftest import settings_from
from tests.providers.conftest import Pieces, chunks_of

pytestmark = pytest.mark.usefixtures("no_aiohttp")

BASE = "http://upstream.test/v1"
URL = f"{BASE}/chat/completions"
CTX = RequestContext("rid", "tenant")
SSE = {"content-type": "text/event-stream"}
ANSWER = {  # as OpenAI writes it (`refusal` too, which its SDK would add when missing)
    "id": "chatcmpl-up1", "object": "chat.completion", "created": 1767225600, "model": "m-1",
    "choices": [{"index": 0, "finish_reason": "stop",
                 "message": {"role": "assistant", "content": "Paris", "refusal": None}}],
    "usage": {"prompt_tokens": 12, "completion_tokens": 3, "total_tokens": 15},
}  # fmt: skip
TOOL_ANSWER = {
    **ANSWER,
    "choices": [{"index": 0, "finish_reason": "tool_calls", "message": {
        "role": "assistant", "content": None, "refusal": None, "tool_calls": [{
            "id": "call_1", "type": "function",
            "function": {"name": "lookup", "arguments": "{\"city\": \"Paris\"}"}}]}}],
}  # fmt: skip


def entry(line: str) -> ModelEntry:
    """One deployment from a `litellm_params` flow mapping."""
    config = f"model_list:\n  - model_name: m\n    litellm_params: {line}\n    passthrough: false\n"
    return settings_from(config).model_list[0]


OWN_KEY = entry(f"{{model: openai/m-1, api_base: '{BASE}', api_key: sk-up}}")


def chat(**fields: object) -> bytes:
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hi"}]
    return orjson.dumps({"model": "m", "messages": messages, **fields})


def chunk(delta: dict[str, Any], finish: str | None = None, **extra: Any) -> bytes:
    event = {
        "id": "chatcmpl-up1", "object": "chat.completion.chunk", "created": 1767225600,
        "model": "m-1", "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
        **extra,
    }  # fmt: skip
    return b"data: " + orjson.dumps(event) + b"\n\n"


USAGE = {"prompt_tokens": 12, "completion_tokens": 2, "total_tokens": 14}
STREAM = [
    chunk({"role": "assistant", "content": ""}),
    chunk({"content": "Par"}),
    chunk({"content": "is"}),
    chunk({}, "stop"),
    b'data: {"id":"chatcmpl-up1","object":"chat.completion.chunk","created":1767225600,'
    b'"model":"m-1","choices":[],"usage":' + orjson.dumps(USAGE) + b"}\n\n",
    b"data: [DONE]\n\n",
]


def translated(client: Upstream, deployment: ModelEntry = OWN_KEY) -> TranslatedProvider:
    built = build_provider(deployment, client)
    assert isinstance(built, TranslatedProvider)
    return built


def test_the_openai_family_is_written_by_litellms_config_over_overspills_transport(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """OpenAI-wire providers with a known base and key take the config's road."""
    monkeypatch.setenv("GROQ_API_KEY", "gsk-env")
    for line in (
        f"{{model: openai/m-1, api_base: '{BASE}', api_key: sk-up}}",
        "{model: groq/llama-3.3-70b}",
        f"{{model: hosted_vllm/qwen, api_base: '{BASE}'}}",
        "{model: mistral/mistral-large-latest, api_key: sk-mistral}",
    ):
        assert resolve(entry(line)) is not None, line


def test_a_deployment_litellm_must_resolve_stays_with_litellms_call(
    monkeypatch: pytest.MonkeyPatch, client: Upstream
) -> None:
    """No key known, Azure, or a setting only litellm's call applies: litellm.acompletion."""
    monkeypatch.delenv("GROQ_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    for line in (
        "{model: groq/llama-3.3-70b}",
        f"{{model: azure/gpt-4o, api_base: '{BASE}', api_key: k, api_version: '2024-06-01'}}",
        f"{{model: openai/m-1, api_base: '{BASE}', api_key: k, organization: org-1}}",
        "{model: bedrock/anthropic.claude-3-haiku}",
    ):
        assert resolve(entry(line)) is None, line
        assert isinstance(build_provider(entry(line), client), LitellmProvider), line


@respx.mock
async def test_the_request_is_litellms_body_with_the_deployments_key(client: Upstream) -> None:
    """The body is litellm's (the upstream's model name, mapped parameters), sent with the key."""
    route = respx.post(URL).respond(200, json=ANSWER)
    await translated(client).complete(parse_chat_request(chat(max_tokens=5, seed=7)), CTX)
    sent = route.calls.last.request
    assert sent.headers["authorization"] == "Bearer sk-up"
    body = orjson.loads(sent.content)
    assert body["model"] == "m-1"
    assert body["max_tokens"] == 5
    assert body["seed"] == 7
    assert [m["role"] for m in body["messages"]] == ["system", "user"]
    assert "stream" not in body


@respx.mock
async def test_a_deployment_with_its_own_base_and_no_key_is_sent_without_one(
    client: Upstream, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A local server named by `api_base` gets no Authorization header (litellm's call refuses)."""
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    route = respx.post(URL).respond(200, json=ANSWER)
    local = translated(client, entry(f"{{model: openai/m-1, api_base: '{BASE}'}}"))
    await local.complete(parse_chat_request(chat()), CTX)
    assert "authorization" not in route.calls.last.request.headers


@respx.mock
async def test_metadata_goes_to_an_openai_wire_as_the_client_sent_it(client: Upstream) -> None:
    """`metadata` (litellm's own for its call) is OpenAI's API's: sent as given."""
    route = respx.post(URL).respond(200, json=ANSWER)
    tags = {"team": "search", "ticket": "OPS-7"}
    await translated(client).complete(parse_chat_request(chat(metadata=tags)), CTX)
    assert orjson.loads(route.calls.last.request.content)["metadata"] == tags


@respx.mock
async def test_a_groq_deployment_calls_groqs_endpoint_with_its_variable(
    client: Upstream, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A provider's default base and key variable are litellm's own."""
    monkeypatch.setenv("GROQ_API_KEY", "gsk-env")
    answer = {**ANSWER, "service_tier": "on_demand"}  # litellm reads it from every answer
    route = respx.post("https://api.groq.com/openai/v1/chat/completions").respond(200, json=answer)
    provider = translated(client, entry("{model: groq/llama-3.3-70b}"))
    await provider.complete(parse_chat_request(chat()), CTX)
    assert route.calls.last.request.headers["authorization"] == "Bearer gsk-env"
    assert orjson.loads(route.calls.last.request.content)["model"] == "llama-3.3-70b"


async def _answer(provider: Provider, body: bytes) -> dict[str, Any]:
    response = await provider.complete(parse_chat_request(body), CTX)
    assert response.body is not None
    answer: dict[str, Any] = orjson.loads(response.body)
    return answer


@respx.mock
@pytest.mark.parametrize("upstream", [ANSWER, TOOL_ANSWER], ids=["text", "tool-call"])
async def test_the_answer_is_what_litellms_call_gives(
    client: Upstream, upstream: dict[str, Any]
) -> None:
    """The JSON answer equals litellm.acompletion's for the same upstream answer."""
    respx.post(URL).respond(200, json=upstream)
    ours = await _answer(translated(client), chat())
    theirs = await _answer(LitellmProvider(OWN_KEY), chat())
    for answer in (ours, theirs):
        answer.pop("created")
    assert ours == theirs
    assert ours["id"] == "chatcmpl-up1"
    assert ours["usage"]["total_tokens"] == 15


@respx.mock
async def test_a_stream_is_relayed_as_chunks_with_its_usage_and_done(client: Upstream) -> None:
    """Text deltas, the finish reason, the usage asked for, then [DONE]."""
    respx.post(URL).respond(200, headers=SSE, stream=Pieces(STREAM))
    body = chat(stream=True, stream_options={"include_usage": True})
    events = await chunks_of(await translated(client).complete(parse_chat_request(body), CTX))
    assert events[-1] == "[DONE]"
    parsed = [e for e in events if isinstance(e, dict)]
    text = "".join(c["choices"][0]["delta"].get("content", "") for c in parsed if c["choices"])
    assert text == "Paris"
    assert parsed[0]["choices"][0]["delta"]["role"] == "assistant"
    assert {c["id"] for c in parsed} == {"chatcmpl-up1"}
    finishes = [c["choices"][0]["finish_reason"] for c in parsed if c["choices"]]
    assert finishes[-1] == "stop"
    assert parsed[-1]["usage"]["total_tokens"] == 14


@respx.mock
async def test_a_streamed_tool_call_goes_through_litellms_parser(client: Upstream) -> None:
    """A tool call's deltas come out as OpenAI tool-call deltas, whole."""
    call = {"index": 0, "id": "call_1", "type": "function",
            "function": {"name": "lookup", "arguments": ""}}  # fmt: skip
    more = {"index": 0, "function": {"arguments": '{"city": "Paris"}'}}
    pieces = [
        chunk({"role": "assistant", "content": None, "tool_calls": [call]}),
        chunk({"tool_calls": [more]}),
        chunk({}, "tool_calls"),
        b"data: [DONE]\n\n",
    ]
    respx.post(URL).respond(200, headers=SSE, stream=Pieces(pieces))
    events = await chunks_of(
        await translated(client).complete(parse_chat_request(chat(stream=True)), CTX)
    )
    deltas = [e["choices"][0]["delta"] for e in events if isinstance(e, dict) and e["choices"]]
    calls = [c for d in deltas for c in d.get("tool_calls", [])]
    assert calls[0]["function"]["name"] == "lookup"
    assert "".join(c["function"].get("arguments") or "" for c in calls) == '{"city": "Paris"}'
    assert events[-2]["choices"][0]["finish_reason"] == "tool_calls"  # type: ignore[index]


@respx.mock
async def test_a_stream_cut_before_done_is_an_error_not_a_silent_end(client: Upstream) -> None:
    """An upstream stream that stops before `[DONE]` fails the relay."""
    respx.post(URL).respond(200, headers=SSE, stream=Pieces(STREAM[:3]))
    response = await translated(client).complete(parse_chat_request(chat(stream=True)), CTX)
    with pytest.raises(UpstreamBadResponse, match=r"before its end event \(\[DONE\]\)"):
        await chunks_of(response)


@respx.mock
async def test_an_upstream_error_is_classified_once(client: Upstream) -> None:
    """A 401 from the upstream is the error tree's, with the upstream's words and status."""
    error = {"error": {"message": "Incorrect API key provided", "type": "invalid_request_error"}}
    respx.post(URL).respond(401, json=error)
    with pytest.raises(UpstreamError, match=r"\(401\): Incorrect API key"):
        await translated(client).complete(parse_chat_request(chat()), CTX)


@respx.mock
async def test_an_answer_that_is_not_a_chat_completion_is_a_502(client: Upstream) -> None:
    """A 200 whose body is not JSON is the upstream's bad answer, not a crash."""
    respx.post(URL).respond(200, content=b"<html>gateway</html>")
    with pytest.raises(UpstreamBadResponse):
        await translated(client).complete(parse_chat_request(chat()), CTX)
