"""The HTTP surface: OpenAI-shaped answers and errors, streams, auth, limits, health, models."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, MutableMapping
from typing import Any

import httpx
import orjson
import pytest

from kernel.errors import (
    ContextWindowExceeded,
    UpstreamError,
    UpstreamRateLimited,
    UpstreamRejected,
    UpstreamTimeout,
)
from kernel.store import DiskHistoryStore
from kernel.types import ChatRequest, ChatResponse, RequestContext
from providers.fake import ScriptedProvider, json_response, sse_events, stream_response
from proxy.app import create_app
from proxy.system import build_system
from tests.conftest import AppClient, settings_from

USER = {"role": "user", "content": "hi"}
CHAT = {"model": "local", "messages": [USER]}


def error_of(response: Any) -> dict[str, Any]:
    payload = response.json()
    assert set(payload["error"]) == {"message", "type", "param", "code"}
    return payload["error"]  # type: ignore[no-any-return]


async def test_json_chat_passes_the_upstream_answer(app_client: AppClient) -> None:
    """A non-stream answer comes back as the upstream sent it, with a request id."""
    client = app_client({"local": [ScriptedProvider([json_response("hello", prompt_tokens=7)])]})
    response = await client.post("/v1/chat/completions", json=CHAT)
    assert response.status_code == 200
    assert response.json()["choices"][0]["message"]["content"] == "hello"
    assert response.json()["usage"]["prompt_tokens"] == 7
    assert len(response.headers["x-request-id"]) == 32


async def test_client_request_id_is_kept(app_client: AppClient) -> None:
    """A well-formed x-request-id from the client is echoed; a malformed one is replaced."""
    client = app_client({"local": [ScriptedProvider([json_response("x")])]})
    kept = await client.post("/v1/chat/completions", json=CHAT, headers={"x-request-id": "abc-1"})
    assert kept.headers["x-request-id"] == "abc-1"
    replaced = await client.post(
        "/v1/chat/completions", json=CHAT, headers={"x-request-id": "a b\x01"}
    )
    assert replaced.headers["x-request-id"] != "a b\x01"


async def test_stream_relays_events_and_done(app_client: AppClient) -> None:
    """A streamed answer is SSE, event by event, ending with [DONE]."""
    events = sse_events(["Hel", "lo"])
    client = app_client({"local": [ScriptedProvider([stream_response(events)])]})
    response = await client.post("/v1/chat/completions", json={**CHAT, "stream": True})
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/event-stream")
    assert response.content == b"".join(events)


async def test_failure_after_first_byte_ends_with_an_error_event(app_client: AppClient) -> None:
    """A mid-stream upstream failure is an SSE error event, never a silent normal end."""
    events = sse_events(["a"])[:-1]
    failing = stream_response(events, error=UpstreamError("connection reset by upstream"))
    client = app_client({"local": [ScriptedProvider([failing])]})
    response = await client.post("/v1/chat/completions", json={**CHAT, "stream": True})
    assert response.content.startswith(events[0])
    last = response.content.split(b"\n\n")[-2]
    assert (
        orjson.loads(last[len(b"data: ") :])["error"]["message"] == "connection reset by upstream"
    )
    assert b"[DONE]" not in response.content


@pytest.mark.reliability("streams")
@pytest.mark.parametrize("unfinished", [b'data: {"cho', b"data: {}\n", b"data: {}\r\n"])
async def test_an_error_event_starts_on_an_event_boundary(
    app_client: AppClient, unfinished: bytes
) -> None:
    """A stream whose last bytes stop mid-event still ends with a parseable error event."""
    events = [sse_events(["a"])[0], unfinished]
    failing = stream_response(events, error=UpstreamError("cut"))
    client = app_client({"local": [ScriptedProvider([failing])]})
    response = await client.post("/v1/chat/completions", json={**CHAT, "stream": True})
    head, _, error = response.content.rpartition(b'data: {"error"')
    assert head.endswith((b"\n\n", b"\r\n\n")), response.content
    assert orjson.loads(b'{"error"' + error)["error"]["message"] == "cut"


@pytest.mark.parametrize(
    ("error", "status", "code"),
    [
        (ContextWindowExceeded("This model's maximum context length is 2048 tokens"), 400, "context_length_exceeded"),
        (UpstreamRateLimited("slow down", retry_after="7"), 429, "rate_limit_exceeded"),
        (UpstreamTimeout("upstream did not answer"), 504, "upstream_timeout"),
        (UpstreamError("upstream openai failed (500): boom"), 502, "upstream_error"),
        (UpstreamRejected("bad tool schema", upstream_status=422), 422, "upstream_rejected"),
    ],
)  # fmt: skip
async def test_upstream_errors_map_to_fitting_statuses(
    app_client: AppClient, error: Exception, status: int, code: str
) -> None:
    """Each upstream failure has its status, OpenAI error body and the provider's message."""
    client = app_client({"local": [ScriptedProvider([error])]})
    for stream in (False, True):
        response = await client.post("/v1/chat/completions", json={**CHAT, "stream": stream})
        assert response.status_code == status
        body = error_of(response)
        assert body["code"] == code
        assert body["message"] == str(error)
    if status == 429:
        assert response.headers["retry-after"] == "7"


@pytest.mark.parametrize(
    ("headers", "message"),
    [({}, "missing API key"), ({"authorization": "Bearer sk-wrong"}, "invalid API key")],
)
async def test_keys_are_required(
    app_client: AppClient, headers: dict[str, str], message: str
) -> None:
    """With a master key, a missing or wrong key is a 401 and the provider is not called."""
    fake = ScriptedProvider([json_response("x")])
    client = app_client({"local": [fake]}, key=None)
    response = await client.post("/v1/chat/completions", json=CHAT, headers=headers)
    assert response.status_code == 401
    assert message in error_of(response)["message"]
    assert fake.requests == []
    assert (await client.get("/v1/models", headers=headers)).status_code == 401


async def test_models_take_the_key_anthropics_clients_send(app_client: AppClient) -> None:
    """/v1/models and /v1/models/{model} accept the key in `x-api-key`, as the API routes do
    (the Anthropic SDK's `models.list` sends it there); a wrong one is still a 401."""
    client = app_client({"local": [ScriptedProvider([json_response("x")])]}, key=None)
    listed = await client.get("/v1/models", headers={"x-api-key": "sk-master"})
    assert listed.status_code == 200
    one = await client.get("/v1/models/local", headers={"x-api-key": "sk-master"})
    assert one.json()["id"] == "local"
    assert (await client.get("/v1/models", headers={"x-api-key": "sk-no"})).status_code == 401


async def test_unknown_model_lists_the_configured_names(app_client: AppClient) -> None:
    """An unknown model is a 404 model_not_found naming every configured model."""
    client = app_client({"local": [ScriptedProvider([json_response("x")])]})
    response = await client.post("/v1/chat/completions", json={**CHAT, "model": "gpt-9"})
    assert response.status_code == 404
    error = error_of(response)
    assert error["code"] == "model_not_found"
    assert "available models: local, other" in error["message"]


async def test_body_over_the_limit_is_413(app_client: AppClient) -> None:
    """A body larger than general_settings.max_body_bytes is refused before parsing."""
    settings = settings_from(
        "model_list:\n  - {model_name: local, litellm_params: {model: openai/a}}\n"
        "general_settings: {max_body_bytes: 100}\n"
    )
    client = app_client(
        {"local": [ScriptedProvider([json_response("x")])]}, settings=settings, key=None
    )
    big = {**CHAT, "messages": [{"role": "user", "content": "x" * 200}]}
    response = await client.post("/v1/chat/completions", json=big)
    assert response.status_code == 413
    assert "general_settings.max_body_bytes" in error_of(response)["message"]


async def test_unset_secret_makes_only_that_model_unavailable(store: DiskHistoryStore) -> None:
    """A model whose env secret is unset answers 503 naming the variable; others still work."""
    text = (
        "model_list:\n"
        "  - {model_name: ok, litellm_params: {model: openai/a, api_base: 'http://a.test/v1'}}\n"
        "  - {model_name: keyless, litellm_params: {model: openai/b, api_key: os.environ/B_KEY}}\n"
    )
    app = create_app(build_system(settings_from(text), store=store))

    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://t"
    ) as client:
        response = await client.post("/v1/chat/completions", json={**CHAT, "model": "keyless"})
        assert response.status_code == 503
        assert "B_KEY" in error_of(response)["message"]
        ready = (await client.get("/health/readiness")).json()
        assert ready["unavailable_models"] == {"keyless": "environment variable(s) unset: B_KEY"}


async def test_an_api_base_that_is_no_url_makes_only_that_model_unavailable(
    store: DiskHistoryStore,
) -> None:
    """A model whose api_base is no http(s) URL answers 503 naming the setting (it was a
    "cannot reach upstream" naming none), and readiness lists it; the others still work."""
    text = (
        "model_list:\n"
        "  - {model_name: ok, litellm_params: {model: openai/a, api_base: 'http://a.test/v1'}}\n"
        "  - {model_name: bare, litellm_params: {model: openai/b, api_base: 'localhost:11434'}}\n"
    )
    app = create_app(build_system(settings_from(text), store=store))
    said = "litellm_params.api_base is not an http(s) URL with a host"
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://t"
    ) as client:
        response = await client.post("/v1/chat/completions", json={**CHAT, "model": "bare"})
        assert (response.status_code, error_of(response)["code"]) == (503, "model_unavailable")
        assert said in error_of(response)["message"]
        ready = (await client.get("/health/readiness")).json()
        assert list(ready["unavailable_models"]) == ["bare"]
        assert said in ready["unavailable_models"]["bare"]


async def test_models_lists_names_and_windows(app_client: AppClient) -> None:
    """/v1/models is OpenAI's list format with each model's context window."""
    client = app_client({"local": [ScriptedProvider([json_response("x")])]})
    payload = (await client.get("/v1/models")).json()
    assert payload["object"] == "list"
    assert [(m["id"], m["object"], m["context_window"]) for m in payload["data"]] == [
        ("local", "model", 2048),
        ("other", "model", None),
    ]


FIVE_MODELS = "model_list:\n" + "".join(
    f"  - model_name: m{n}\n    litellm_params: {{model: openai/m{n}, api_base: 'http://u.test/v1'}}\n"
    for n in range(1, 6)
)


@pytest.mark.parametrize(
    ("query", "ids", "more"),
    [
        ("", ["m1", "m2", "m3", "m4", "m5"], False),
        ("?limit=2", ["m1", "m2"], True),
        ("?limit=2&after_id=m2", ["m3", "m4"], True),
        ("?limit=2&after_id=m4", ["m5"], False),
        ("?limit=2&before_id=m5", ["m3", "m4"], True),
        ("?limit=2&before_id=m3", ["m1", "m2"], False),
        ("?after_id=m1", ["m2", "m3", "m4", "m5"], False),
    ],
)
async def test_models_page_as_anthropics_api_does(
    app_client: AppClient, query: str, ids: list[str], more: bool
) -> None:
    """`limit`, `after_id` and `before_id` choose a page, with `has_more`, `first_id` and
    `last_id` saying where it stands (the Anthropic SDK pages `models.list` so); without
    them every model is on one page."""
    client = app_client(settings=settings_from(FIVE_MODELS), key=None)
    payload = (await client.get(f"/v1/models{query}")).json()
    assert [m["id"] for m in payload["data"]] == ids
    assert (payload["has_more"], payload["first_id"], payload["last_id"]) == (more, ids[0], ids[-1])


@pytest.mark.parametrize(
    ("query", "param", "said"),
    [
        ("?limit=0", "limit", "limit must be a whole number from 1 to 1000, got '0'"),
        ("?limit=x", "limit", "got 'x'"),
        ("?after_id=nope", "after_id", "after_id 'nope' is not a model /v1/models lists"),
        ("?after_id=m1&before_id=m3", "before_id", "give after_id or before_id, not both"),
    ],
)
async def test_a_bad_page_is_a_400_naming_the_parameter(
    app_client: AppClient, query: str, param: str, said: str
) -> None:
    """A limit out of range, an id not listed, or both directions at once: a 400 naming it."""
    client = app_client(settings=settings_from(FIVE_MODELS), key=None)
    response = await client.get(f"/v1/models{query}")
    assert response.status_code == 400
    assert error_of(response)["param"] == param
    assert said in error_of(response)["message"]


async def test_health_never_needs_a_key(app_client: AppClient) -> None:
    """Liveness (under LiteLLM's name too) and readiness answer without auth and without
    calling a model."""
    fake = ScriptedProvider([json_response("x")])
    client = app_client({"local": [fake]}, key=None)
    assert (await client.get("/health/liveness")).json() == {"status": "alive"}
    assert (await client.get("/health/liveliness")).json() == {"status": "alive"}  # LiteLLM's
    ready = await client.get("/health/readiness")
    assert ready.json()["status"] == "ready"
    assert fake.requests == []


async def test_unknown_routes_are_openai_shaped(app_client: AppClient) -> None:
    """404 and 405 come back in OpenAI's error shape."""
    client = app_client({"local": [ScriptedProvider([json_response("x")])]})
    assert error_of(await client.get("/v1/nothing"))["code"] == "not_found"
    wrong = await client.get("/v1/chat/completions")
    assert wrong.status_code == 405
    assert error_of(wrong)["code"] == "method_not_allowed"


async def test_a_bug_is_a_500_with_the_request_id(
    app_client: AppClient, caplog: pytest.LogCaptureFixture
) -> None:
    """An unexpected exception is logged and answered 500 in OpenAI's shape, not a crash."""
    client = app_client({"local": [ScriptedProvider([RuntimeError("bug")])]})
    with caplog.at_level(logging.ERROR):
        response = await client.post("/v1/chat/completions", json=CHAT)
    assert response.status_code == 500
    assert response.headers["x-request-id"] in error_of(response)["message"]


async def test_one_log_line_per_request_without_the_key(
    app_client: AppClient, caplog: pytest.LogCaptureFixture
) -> None:
    """Each request logs one structured line; the client's key never appears in logs."""
    client = app_client({"local": [ScriptedProvider([json_response("x")])]})
    with caplog.at_level(logging.INFO, logger="overspill.request"):
        await client.post("/v1/chat/completions", json=CHAT)
    (record,) = [r for r in caplog.records if r.name == "overspill.request"]
    assert record.__dict__["status"] == 200
    assert record.__dict__["model"] == "local"
    assert "sk-master" not in caplog.text


class Hanging:
    """A provider that waits until cancelled, recording the cancellation."""

    name = "hanging"

    def __init__(self) -> None:
        self.started = asyncio.Event()
        self.cancelled = False

    async def complete(self, request: ChatRequest, ctx: RequestContext) -> ChatResponse:
        self.started.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            self.cancelled = True
            raise
        raise AssertionError("unreachable")

    async def aclose(self) -> None:
        pass


def post_until_disconnect(
    app: Any, payload: dict[str, Any], disconnect: asyncio.Event
) -> tuple[asyncio.Future[None], list[MutableMapping[str, Any]]]:
    """POST to the app over raw ASGI; the client disconnects when `disconnect` is set."""
    messages = [{"type": "http.request", "body": orjson.dumps(payload), "more_body": False}]
    sent: list[MutableMapping[str, Any]] = []

    async def receive() -> dict[str, Any]:
        if messages:
            return messages.pop()
        await disconnect.wait()
        return {"type": "http.disconnect"}

    async def send(message: MutableMapping[str, Any]) -> None:
        sent.append(message)

    scope = {
        "type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST",
        "scheme": "http", "path": "/v1/chat/completions", "raw_path": b"/v1/chat/completions",
        "query_string": b"", "root_path": "", "server": ("t", 80), "client": ("c", 1),
        "headers": [(b"authorization", b"Bearer sk-master"), (b"content-type", b"application/json")],
    }  # fmt: skip
    return asyncio.ensure_future(app(scope, receive, send)), sent


async def test_client_disconnect_cancels_the_upstream_call(store: DiskHistoryStore) -> None:
    """When the client goes away, the pending upstream call is cancelled."""
    hanging = Hanging()
    app = create_app(build_system(settings_from(), providers={"local": [hanging]}, store=store))
    disconnect = asyncio.Event()
    call, _ = post_until_disconnect(app, CHAT, disconnect)
    await hanging.started.wait()
    disconnect.set()
    await call
    assert hanging.cancelled


async def test_documents_need_the_documents_layer(app_client: AppClient) -> None:
    """Documents sent to a proxy without the documents layer are refused, not silently dropped."""
    fake = ScriptedProvider([json_response("x")])
    without = settings_from().model_copy(update={"middleware": ("history_splice",)})
    client = app_client({"local": [fake]}, settings=without)
    response = await client.post(
        "/v1/chat/completions", json={**CHAT, "documents": [{"text": "x"}]}
    )
    assert response.status_code == 400
    assert error_of(response)["param"] == "documents"
    assert fake.requests == []


async def test_client_disconnect_mid_stream_closes_the_upstream(store: DiskHistoryStore) -> None:
    """A client that leaves during a stream stops the relay and closes the upstream stream."""
    closed = asyncio.Event()
    sent_first = asyncio.Event()

    async def endless() -> AsyncIterator[bytes]:
        try:
            while True:
                yield sse_events(["tick"])[0]
                sent_first.set()
                await asyncio.Event().wait()
        finally:
            closed.set()

    provider = ScriptedProvider([lambda request: ChatResponse(stream=endless())])
    app = create_app(build_system(settings_from(), providers={"local": [provider]}, store=store))
    disconnect = asyncio.Event()
    call, sent = post_until_disconnect(app, {**CHAT, "stream": True}, disconnect)
    await sent_first.wait()
    disconnect.set()
    await call
    assert closed.is_set()
    assert sent[0]["status"] == 200


async def test_what_only_overspill_reads_is_not_forwarded(app_client: AppClient) -> None:
    """metadata.conversation_id, `overspill` and the identity headers never reach the provider."""
    fake = ScriptedProvider([json_response("x")])
    client = app_client({"local": [fake]})
    body = {
        **CHAT,
        "metadata": {"conversation_id": "conv-1", "team": "blue"},
        "overspill": {"skip_history": True},
    }
    response = await client.post(
        "/v1/chat/completions", json=body, headers={"x-conversation-id": "conv-2"}
    )
    assert response.status_code == 200
    sent = orjson.loads(fake.requests[0].render("local"))
    assert sent["metadata"] == {"team": "blue"}
    assert "overspill" not in sent
