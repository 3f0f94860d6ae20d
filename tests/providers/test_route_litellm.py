"""Embeddings and legacy completions on litellm's road (`litellm.aembedding`,
`litellm.atext_completion`), for every provider that does not speak OpenAI's wire, and how the
other providers reach it: the translated providers, Anthropic's and Gemini's own translation,
the deferred stand-in. The upstreams are respx."""

from __future__ import annotations

import base64
import struct
from typing import Any

import httpx
import orjson
import pytest
import respx

from kernel.errors import (
    ContextWindowExceeded,
    ForbiddenParameter,
    RouteNotServed,
    UpstreamError,
    UpstreamRejected,
)
from kernel.types import ChatResponse, Provider, RequestContext, RouteRequest
from providers.anthropic import AnthropicProvider
from providers.deferred import DeferredProvider
from providers.fake import ScriptedProvider, embeddings, text_completion
from providers.litellm import LitellmProvider, float32_base64
from providers.translated import TranslatedProvider
from providers.transport import Upstream
from proxy.surfaces.routes import parse_route_request
from tests.conftest import settings_from
from tests.providers.conftest import chunks_of

pytestmark = pytest.mark.usefixtures("no_aiohttp")

OLLAMA = "http://ollama.test:11434"
CONFIG = f"""
model_list:
  - model_name: llama
    litellm_params: {{model: ollama_chat/llama3.2, api_base: "{OLLAMA}"}}
  - model_name: via
    litellm_params: {{model: openai/other, api_base: "http://litellm.test/v1", api_key: sk-up}}
    passthrough: false
  - model_name: embed3
    litellm_params: {{model: openai/text-embedding-3-small, api_base: "http://litellm.test/v1", api_key: sk-up}}
    passthrough: false
  - model_name: claude
    litellm_params: {{model: anthropic/claude-sonnet-4-5, api_key: sk-ant-config}}
"""
CTX = RequestContext("rid", "tenant")
NDJSON = {"content-type": "application/x-ndjson"}


def provider(name: str) -> LitellmProvider:
    entries = {e.model_name: e for e in settings_from(CONFIG).model_list}
    return LitellmProvider(entries[name])


def route(route: str, **body: Any) -> RouteRequest:
    return parse_route_request(route, orjson.dumps(body))


def ollama_chat(text: str = "Hello") -> dict[str, Any]:
    return {
        "model": "llama3.2", "created_at": "2026-01-01T00:00:00Z",
        "message": {"role": "assistant", "content": text}, "done": True, "done_reason": "stop",
        "prompt_eval_count": 3, "eval_count": 2,
    }  # fmt: skip


@respx.mock
async def test_ollama_embeddings_go_to_its_embed_route_and_come_back_in_openai_shape() -> None:
    """An `ollama_chat/` model embeds through Ollama's /api/embed; the answer is OpenAI's."""
    sent = respx.post(f"{OLLAMA}/api/embed").respond(
        200,
        json={
            "model": "llama3.2",
            "embeddings": [[0.5, -1.0], [2.0, 0.25]],
            "prompt_eval_count": 2,
        },
    )
    response = await provider("llama").send(
        route("embeddings", model="llama", input=["a", "b"]), CTX
    )
    assert orjson.loads(sent.calls.last.request.content) == {
        "model": "llama3.2",
        "input": ["a", "b"],
    }
    answer = response.json()
    assert answer["object"] == "list"
    assert [item["embedding"] for item in answer["data"]] == [[0.5, -1.0], [2.0, 0.25]]
    assert [item["index"] for item in answer["data"]] == [0, 1]


@respx.mock
async def test_base64_is_written_by_overspill_for_a_provider_that_has_none() -> None:
    """`encoding_format: base64` is OpenAI's float32 bytes, though Ollama only answers floats."""
    sent = respx.post(f"{OLLAMA}/api/embed").respond(
        200, json={"model": "llama3.2", "embeddings": [[0.5, -1.0, 3.0]], "prompt_eval_count": 1}
    )
    request = route("embeddings", model="llama", input="a", encoding_format="base64")
    answer = (await provider("llama").send(request, CTX)).json()
    assert "encoding_format" not in orjson.loads(sent.calls.last.request.content)
    decoded = base64.b64decode(answer["data"][0]["embedding"])
    assert struct.unpack("<3f", decoded) == (0.5, -1.0, 3.0)


def test_the_base64_is_openais() -> None:
    """float32 little-endian, base64 without a newline: what OpenAI's SDK decodes."""
    assert float32_base64([0.5, -1.0]) == base64.b64encode(struct.pack("<2f", 0.5, -1.0)).decode()


@respx.mock
async def test_openai_embeddings_through_litellm_keep_the_clients_fields() -> None:
    """A deployment with passthrough off embeds through litellm; `dimensions` goes along."""
    sent = respx.post("http://litellm.test/v1/embeddings").respond(200, json=embeddings([[1.0]]))
    request = route("embeddings", model="embed3", input="a", dimensions=1, user="u-1")
    answer = (await provider("embed3").send(request, CTX)).json()
    assert answer["data"][0]["embedding"] == [1.0]
    body = orjson.loads(sent.calls.last.request.content)
    assert (body["model"], body["dimensions"], body["user"]) == ("text-embedding-3-small", 1, "u-1")


@respx.mock
async def test_a_text_completion_becomes_the_providers_chat_and_comes_back_as_text() -> None:
    """litellm's text completion: Ollama's chat with the prompt, answered as text_completion."""
    sent = respx.post(f"{OLLAMA}/api/chat").respond(200, json=ollama_chat("Paris"))
    request = route("completions", model="llama", prompt="The capital of France is", max_tokens=4)
    answer = (await provider("llama").send(request, CTX)).json()
    body = orjson.loads(sent.calls.last.request.content)
    assert body["messages"][0]["content"] == "The capital of France is"
    assert answer["object"] == "text_completion"
    assert answer["choices"] == [
        {"index": 0, "text": "Paris", "logprobs": None, "finish_reason": "stop"}
    ]
    assert answer["usage"]["completion_tokens"] == 2


@respx.mock
async def test_a_text_completion_stream_is_relayed_as_openai_chunks_to_done() -> None:
    """Each chunk is a text_completion event with text; no zero usage; the stream ends [DONE]."""
    pieces = [{**ollama_chat("Hel"), "done": False}, ollama_chat("lo")]
    respx.post(f"{OLLAMA}/api/chat").respond(
        200, content=b"\n".join(orjson.dumps(p) for p in pieces) + b"\n", headers=NDJSON
    )
    request = route("completions", model="llama", prompt="Say", stream=True)
    events = await chunks_of(await provider("llama").send(request, CTX))
    assert events[-1] == "[DONE]"
    chunks = [e for e in events if isinstance(e, dict)]
    assert "".join(c["choices"][0]["text"] for c in chunks) == "Hello"
    assert all("usage" not in c and c["object"] == "text_completion" for c in chunks)
    assert chunks[-1]["choices"][0]["finish_reason"] == "stop"


@respx.mock
async def test_an_openai_text_completion_keeps_its_prompt_array() -> None:
    """OpenAI's own text completion API takes the prompt array as the client sent it."""
    sent = respx.post("http://litellm.test/v1/completions").respond(200, json=text_completion("x"))
    request = route("completions", model="via", prompt=["a", "b"], echo=True)
    await provider("via").send(request, CTX)
    body = orjson.loads(sent.calls.last.request.content)
    assert (body["prompt"], body["echo"]) == (["a", "b"], True)


@pytest.mark.parametrize("prompt", [["a", "b"], [1, 2, 3], [[1, 2]]])
async def test_a_chat_provider_takes_one_text_prompt(prompt: Any) -> None:
    """More than one prompt, or token ids, cannot become one chat message: a 400 says so."""
    with pytest.raises(RouteNotServed, match="one text prompt per request"):
        await provider("llama").send(route("completions", model="llama", prompt=prompt), CTX)


@pytest.mark.parametrize("given", [[1, 2, 3], [[1, 2]], [[1, 2], [3]]])
async def test_a_text_only_embedder_refuses_token_ids(given: Any) -> None:
    """Token ids are OpenAI's embedding input: for a provider that embeds text only (Ollama
    here, Cohere, Gemini) they are a 400 saying what to send; OpenAI's API takes them, and
    a provider not known to refuse them is sent them."""
    with pytest.raises(RouteNotServed, match="embeds text only"):
        await provider("llama").send(route("embeddings", model="llama", input=given), CTX)
    assert provider("embed3").route_kwargs(route("embeddings", model="embed3", input=given))


@respx.mock
async def test_a_one_prompt_array_is_that_prompt() -> None:
    """`prompt: ["text"]` is the text (what llama-index and others send)."""
    sent = respx.post(f"{OLLAMA}/api/chat").respond(200, json=ollama_chat())
    await provider("llama").send(route("completions", model="llama", prompt=["Say"]), CTX)
    assert orjson.loads(sent.calls.last.request.content)["messages"][0]["content"] == "Say"


@pytest.mark.parametrize("field", ["num_retries", "fallbacks", "timeout", "drop_params"])
@pytest.mark.parametrize("kind", ["embeddings", "completions"])
def test_litellm_settings_cannot_come_from_a_route_request(kind: str, field: str) -> None:
    """A field litellm would read as its own setting is refused on these routes too."""
    text = {"input": "a"} if kind == "embeddings" else {"prompt": "a"}
    with pytest.raises(ForbiddenParameter) as caught:
        provider("llama").route_kwargs(route(kind, model="llama", **text, **{field: 1}))
    assert caught.value.param == field


@respx.mock
async def test_an_overflow_on_the_litellm_road_is_an_overflow() -> None:
    """Ollama's too-long-input error is ContextWindowExceeded, as on chat."""
    respx.post(f"{OLLAMA}/api/chat").respond(
        400, json={"error": "the input length exceeds the context length"}
    )
    with pytest.raises(ContextWindowExceeded):
        await provider("llama").send(route("completions", model="llama", prompt="x " * 9), CTX)


@respx.mock
@pytest.mark.parametrize(
    ("status", "error"), [(404, UpstreamError), (422, UpstreamRejected), (500, UpstreamError)]
)
async def test_upstream_failures_are_mapped_once(status: int, error: type[Exception]) -> None:
    """An embeddings failure goes through the provider's one mapping of errors."""
    respx.post("http://litellm.test/v1/embeddings").respond(
        status, json={"error": {"message": "nope", "type": "x"}}
    )
    with pytest.raises(error, match="nope"):
        await provider("via").send(route("embeddings", model="via", input="a"), CTX)


# -- how the other providers reach litellm's road ------------------------------------------


class Recording:
    """A fallback that records the route requests it forwards."""

    name = "anthropic"

    def __init__(self) -> None:
        self.sent: list[RouteRequest] = []

    async def complete(self, request: object, ctx: RequestContext) -> ChatResponse:
        raise AssertionError("not a conversation")

    async def send(self, request: RouteRequest, ctx: RequestContext) -> ChatResponse:
        self.sent.append(request)
        return ChatResponse(body=orjson.dumps(text_completion("ok")))

    async def aclose(self) -> None:
        """Nothing to release."""


def claude() -> Any:
    return {e.model_name: e for e in settings_from(CONFIG).model_list}["claude"]


async def test_anthropic_embeddings_are_a_400_naming_model_and_route(client: Upstream) -> None:
    """Anthropic's API has no embeddings: a 400 that says so, and litellm is never asked."""
    fallback = Recording()
    anthropic = AnthropicProvider(claude(), client, fallback)
    with pytest.raises(RouteNotServed) as raised:
        await anthropic.send(route("embeddings", model="claude", input="a"), CTX)
    assert "'claude'" in raised.value.message
    assert "anthropic's API has no /v1/embeddings" in raised.value.message
    assert raised.value.http_status() == 400
    assert fallback.sent == []


async def test_anthropic_completions_take_litellms_road(client: Upstream) -> None:
    """A legacy completion to Anthropic goes to the fallback (litellm's text completion)."""
    fallback = Recording()
    anthropic = AnthropicProvider(claude(), client, fallback)
    await anthropic.send(route("completions", model="claude", prompt="Hi"), CTX)
    assert [r.route for r in fallback.sent] == ["completions"]


@respx.mock
async def test_the_translated_provider_completes_text_through_litellm(client: Upstream) -> None:
    """TranslatedProvider has no text completion config: litellm's own call sends it."""
    sent = respx.post("https://api.anthropic.com/v1/messages").respond(
        200,
        json={
            "id": "msg_1", "type": "message", "role": "assistant", "model": "claude-sonnet-4-5",
            "content": [{"type": "text", "text": "Paris"}], "stop_reason": "end_turn",
            "stop_sequence": None, "usage": {"input_tokens": 12, "output_tokens": 3},
        },
    )  # fmt: skip
    translated = TranslatedProvider(claude(), client)
    try:
        answer = await translated.send(route("completions", model="claude", prompt="Hi"), CTX)
    finally:
        await translated.aclose()
    assert answer.json()["choices"][0]["text"] == "Paris"
    assert orjson.loads(sent.calls.last.request.content)["messages"] == [
        {"role": "user", "content": [{"type": "text", "text": "Hi"}]}
    ]


async def test_a_deferred_provider_builds_then_forwards() -> None:
    """The first route request builds the provider (its module imported), then forwards."""
    built: list[ScriptedProvider] = []

    def build() -> Provider:
        built.append(ScriptedProvider([ChatResponse(body=orjson.dumps(embeddings([[1.0]])))]))
        return built[-1]

    stand_in = DeferredProvider("p", "json", build)
    request = route("embeddings", model="m", input="a")
    answer = await stand_in.send(request, CTX)
    assert answer.json()["data"][0]["embedding"] == [1.0]
    assert built[0].sent == [request]


async def test_a_gemini_embedding_takes_litellms_road(client: Upstream) -> None:
    """Gemini's API has embeddings: its own translation hands them to litellm's road."""
    from providers.gemini import GeminiProvider

    entry = settings_from(
        "model_list:\n  - model_name: gem\n    litellm_params:\n"
        "      {model: gemini/text-embedding-004, api_key: g-key}\n"
    ).model_list[0]
    fallback = Recording()
    await GeminiProvider(entry, client, fallback).send(
        route("embeddings", model="gem", input="a"), CTX
    )
    assert [r.route for r in fallback.sent] == ["embeddings"]


async def test_a_transport_failure_is_an_upstream_error() -> None:
    """An unreachable Ollama on /api/embed is a 502 naming the provider."""
    with respx.mock:
        respx.post(f"{OLLAMA}/api/embed").mock(side_effect=httpx.ConnectError("refused"))
        with pytest.raises(UpstreamError):
            await provider("llama").send(route("embeddings", model="llama", input="a"), CTX)
