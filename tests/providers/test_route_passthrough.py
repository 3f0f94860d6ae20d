"""Embeddings and legacy completions over the byte passthrough (respx as the upstream), and the
router that spreads them over a model's deployments."""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
import orjson
import pytest
import respx

from kernel.errors import (
    ContextWindowExceeded,
    RouteNotServed,
    UpstreamBadResponse,
    UpstreamError,
    UpstreamRateLimited,
)
from kernel.types import ChatResponse, RequestContext, RouteRequest
from providers.fake import ScriptedProvider, embeddings, text_completion
from providers.openai_compat import OpenAICompatProvider
from providers.router import Router
from providers.transport import HttpxUpstream
from proxy.surfaces.routes import parse_route_request
from tests.conftest import sample, settings_from
from tests.providers.conftest import chunks_of
from tests.providers.test_openai_compat import LLAMA_OVERFLOW

BASE = "http://upstream.test/v1"
CTX = RequestContext("rid", "tenant")
SSE = {"content-type": "text/event-stream"}


def _provider(client: httpx.AsyncClient, upstream_model: str = "local") -> OpenAICompatProvider:
    settings = settings_from(
        "model_list:\n  - model_name: local\n    litellm_params:\n"
        f"      {{model: openai/{upstream_model}, api_base: '{BASE}', api_key: sk-upstream}}\n"
    )
    return OpenAICompatProvider(settings.model_list[0], HttpxUpstream(client))


@pytest.fixture
async def client() -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient() as made:
        yield made


def request(route: str, raw: bytes) -> RouteRequest:
    return parse_route_request(route, raw)


def completion_events(*texts: str, done: bool = True) -> bytes:
    """A legacy completion's SSE stream, as llama-server and OpenAI write it."""
    events = [
        b"data: "
        + orjson.dumps({"object": "text_completion", "choices": [{"index": 0, "text": t}]})
        for t in texts
    ]
    if done:
        events.append(b"data: [DONE]")
    return b"\n\n".join(events) + b"\n\n"


@respx.mock
async def test_an_embeddings_request_is_forwarded_byte_for_byte(
    client: httpx.AsyncClient,
) -> None:
    """Same model name upstream: the client's own bytes go out, the upstream's come back."""
    answer = orjson.dumps(embeddings([[0.5, -1.0]])) + b"\n"
    route = respx.post(f"{BASE}/embeddings").respond(
        200, content=answer, headers={"x-ratelimit-remaining-requests": "9"}
    )
    raw = b'{"model": "local",  "input": ["a", "b"], "dimensions": 2, "x_vendor": {"k": 1}}'
    response = await _provider(client).send(request("embeddings", raw), CTX)
    sent = route.calls.last.request
    assert sent.content == raw
    assert sent.headers["authorization"] == "Bearer sk-upstream"
    assert response.body == answer
    assert response.headers == {"x-ratelimit-remaining-requests": "9"}


@respx.mock
async def test_the_upstream_model_name_is_written_in(client: httpx.AsyncClient) -> None:
    """Another model name upstream: the body is the client's with `model` rewritten."""
    route = respx.post(f"{BASE}/completions").respond(200, json=text_completion("x"))
    raw = b'{"model":"local","prompt":"Once","max_tokens":3,"echo":true}'
    await _provider(client, "smollm2").send(request("completions", raw), CTX)
    assert orjson.loads(route.calls.last.request.content) == {
        **orjson.loads(raw),
        "model": "smollm2",
    }


@respx.mock
async def test_a_completions_stream_is_relayed_to_its_done(client: httpx.AsyncClient) -> None:
    """A legacy completions stream comes back event by event, ending with [DONE]."""
    stream = completion_events("Once", " upon")
    respx.post(f"{BASE}/completions").respond(200, content=stream, headers=SSE)
    raw = b'{"model":"local","prompt":"Tell","stream":true}'
    response = await _provider(client).send(request("completions", raw), CTX)
    events = await chunks_of(response)
    assert [e["choices"][0]["text"] for e in events[:-1] if isinstance(e, dict)] == [
        "Once",
        " upon",
    ]
    assert events[-1] == "[DONE]"


@respx.mock
async def test_a_completions_stream_cut_before_done_is_an_error(
    client: httpx.AsyncClient,
) -> None:
    """A stream that ends without [DONE] fails the relay instead of ending silently."""
    respx.post(f"{BASE}/completions").respond(
        200, content=completion_events("Once", done=False), headers=SSE
    )
    raw = b'{"model":"local","prompt":"Tell","stream":true}'
    response = await _provider(client).send(request("completions", raw), CTX)
    assert response.stream is not None
    with pytest.raises(UpstreamBadResponse, match=r"before \[DONE\]"):
        async for _ in response.stream:
            pass


@respx.mock
@pytest.mark.parametrize("stream", [False, True])
async def test_an_over_long_prompt_is_an_overflow_with_its_numbers(
    client: httpx.AsyncClient, stream: bool
) -> None:
    """llama-server's refusal of a prompt over its window is ContextWindowExceeded, sized."""
    respx.post(f"{BASE}/completions").respond(400, json=LLAMA_OVERFLOW)
    raw = orjson.dumps({"model": "local", "prompt": "word " * 3000, "stream": stream})
    with pytest.raises(ContextWindowExceeded) as raised:
        await _provider(client).send(request("completions", raw), CTX)
    assert (raised.value.requested, raised.value.limit) == (2727, 2048)


@respx.mock
async def test_a_server_without_embeddings_is_an_upstream_error(
    client: httpx.AsyncClient,
) -> None:
    """llama-server started without --embeddings answers 501: a 502 that quotes it."""
    respx.post(f"{BASE}/embeddings").respond(
        501,
        json={
            "error": {
                "code": 501,
                "message": "This server does not support embeddings. Start it with `--embeddings`",
                "type": "not_supported_error",
            }
        },
    )
    with pytest.raises(UpstreamError, match="--embeddings") as raised:
        await _provider(client).send(request("embeddings", b'{"model":"local","input":"a"}'), CTX)
    assert raised.value.http_status() == 502


@respx.mock
async def test_an_answer_that_is_not_json_is_a_bad_response(client: httpx.AsyncClient) -> None:
    """A 200 HTML page on /embeddings is a 502 that says what was expected."""
    respx.post(f"{BASE}/embeddings").respond(
        200, content=b"<html>hi</html>", headers={"content-type": "text/html"}
    )
    with pytest.raises(UpstreamBadResponse, match="embeddings list"):
        await _provider(client).send(request("embeddings", b'{"model":"local","input":"a"}'), CTX)


# -- the router ----------------------------------------------------------------------------

EMBED = RouteRequest("embeddings", "m", False, {"model": "m", "input": "a"}, b"{}")
VECTORS = ChatResponse(body=orjson.dumps(embeddings([[1.0]])))


async def test_route_requests_take_turns_and_fail_over() -> None:
    """Deployments share a model's route requests, and a failed one passes to the next."""
    a, b = ScriptedProvider([VECTORS]), ScriptedProvider([VECTORS])
    router = Router({"m": [a, b]})
    for _ in range(4):
        await router.send(EMBED, RequestContext("r", "t"))
    assert (len(a.sent), len(b.sent)) == (2, 2)
    down, up = ScriptedProvider([UpstreamRateLimited("slow")]), ScriptedProvider([VECTORS])
    ctx = RequestContext("r", "t")
    assert (await Router({"m": [down, up]}).send(EMBED, ctx)).body == VECTORS.body
    assert ctx.notes == {"failover": "1"}


async def test_a_route_overflow_is_not_retried_elsewhere() -> None:
    """An overflow on one deployment would be the same on the next: raised at once."""
    first = ScriptedProvider([ContextWindowExceeded("too long")])
    second = ScriptedProvider([VECTORS])
    with pytest.raises(ContextWindowExceeded):
        await Router({"m": [first, second]}).send(EMBED, RequestContext("r", "t"))
    assert second.sent == []


async def test_route_calls_are_measured_like_chat_calls() -> None:
    """Each route call counts as an upstream call of its provider and model, with its time."""
    before = sample("overspill_upstream_calls_total", provider="measured", model="m")
    await Router({"m": [ScriptedProvider([VECTORS], name="measured")]}).send(
        EMBED, RequestContext("r", "t")
    )
    assert sample("overspill_upstream_calls_total", provider="measured", model="m") == before + 1


class ChatOnly:
    """A provider that forwards conversations only (what a test stand-in may be)."""

    name = "chat-only"

    async def complete(self, request: object, ctx: RequestContext) -> ChatResponse:
        raise AssertionError("never called")

    async def aclose(self) -> None:
        """Nothing to release."""


async def test_a_provider_without_routes_refuses_them() -> None:
    """A deployment whose provider forwards no routes is a 400 naming the route."""
    with pytest.raises(RouteNotServed, match="/v1/embeddings"):
        await Router({"m": [ChatOnly()]}).send(EMBED, RequestContext("r", "t"))
