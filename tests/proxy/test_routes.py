"""`/v1/embeddings` and `/v1/completions` through the app: the same keys, tenants, model
allow-lists, limits, logs and errors as chat; bodies checked in OpenAI's shape; model modes;
the routes each model serves on `/v1/models`; the 404 of the OpenAI routes overspill does not
serve."""

from __future__ import annotations

import gzip
import logging
from typing import Any

import orjson
import pytest

from kernel.errors import ContextWindowExceeded, JsonTooDeep, UpstreamError
from kernel.types import ChatResponse, RouteRequest
from providers.fake import (
    ScriptedProvider,
    embeddings,
    json_response,
    stream_response,
    text_completion,
)
from tests.conftest import AppClient, settings_from

CONFIG = """
model_list:
  - model_name: local
    litellm_params: {model: openai/smollm2, api_base: "http://upstream.test/v1"}
    model_info: {mode: chat}
  - model_name: embed
    litellm_params: {model: openai/smollm2-embed, api_base: "http://upstream.test/v1"}
    model_info: {mode: embedding}
  - model_name: anything
    litellm_params: {model: openai/unknown-model, api_base: "http://upstream.test/v1"}
  - model_name: big-embed
    litellm_params: {model: openai/text-embedding-3-small, api_key: sk-x}
router_settings:
  model_group_alias: {vectors: embed}
general_settings:
  master_key: sk-master
  max_body_bytes: 4000
  client_keys:
    - {name: app, key: sk-app, models: [embed]}
"""
VECTORS = ChatResponse(body=orjson.dumps(embeddings([[0.5, 1.5]])))
TEXT = ChatResponse(body=orjson.dumps(text_completion(" Paris")))


def error_of(response: Any) -> dict[str, Any]:
    payload = response.json()
    assert set(payload["error"]) == {"message", "type", "param", "code"}
    return payload["error"]  # type: ignore[no-any-return]


def client_for(app_client: AppClient, key: str = "sk-master", **groups: ScriptedProvider) -> Any:
    providers = {name: [groups.get(name) or ScriptedProvider([VECTORS])] for name in
                 ("local", "embed", "anything", "big-embed")}  # fmt: skip
    return app_client(providers, settings=settings_from(CONFIG, env={}), key=key)


@pytest.mark.parametrize("path", ["/v1/embeddings", "/embeddings"])
async def test_embeddings_reach_the_model_as_sent(app_client: AppClient, path: str) -> None:
    """The deployment named by `model` gets the client's bytes; its answer comes back."""
    embed = ScriptedProvider([VECTORS])
    client = client_for(app_client, embed=embed)
    raw = b'{"model":"embed","input":["a","b"],"encoding_format":"float","x_vendor":1}'
    response = await client.post(path, content=raw)
    assert response.status_code == 200
    assert response.json()["data"][0]["embedding"] == [0.5, 1.5]
    (sent,) = embed.sent
    assert (sent.route, sent.model, sent.raw) == ("embeddings", "embed", raw)
    assert len(response.headers["x-request-id"]) == 32


@pytest.mark.parametrize("path", ["/v1/completions", "/completions"])
async def test_completions_reach_the_model_as_sent(app_client: AppClient, path: str) -> None:
    """A legacy completion is forwarded to its model and answered as the upstream did."""
    local = ScriptedProvider([TEXT])
    client = client_for(app_client, local=local)
    response = await client.post(path, json={"model": "local", "prompt": "The capital is"})
    assert response.json()["choices"][0]["text"] == " Paris"
    assert [r.route for r in local.sent] == ["completions"]
    assert local.requests == []  # no conversation reached the layers


async def test_a_completions_stream_is_relayed(app_client: AppClient) -> None:
    """A streamed completion is SSE, event by event, as the deployment primed it."""
    events = [b'data: {"choices":[{"text":"Par","index":0}]}\n\n', b"data: [DONE]\n\n"]
    client = client_for(app_client, local=ScriptedProvider([stream_response(events)]))
    body = {"model": "local", "prompt": "x", "stream": True}
    response = await client.post("/v1/completions", json=body)
    assert response.headers["content-type"].startswith("text/event-stream")
    assert response.content == b"".join(events)


async def test_a_failure_mid_stream_ends_with_an_error_event(app_client: AppClient) -> None:
    """After the first byte, an upstream failure is OpenAI's error event, never a silent end."""
    events = [b'data: {"choices":[{"text":"Par","index":0}]}\n\n']
    failing = stream_response(events, error=UpstreamError("connection reset"))
    client = client_for(app_client, local=ScriptedProvider([failing]))
    response = await client.post("/v1/completions", json={"model": "local", "prompt": "x", "stream": True})  # fmt: skip
    last = response.content.split(b"\n\n")[-2]
    assert orjson.loads(last[6:])["error"]["message"] == "connection reset"


async def test_an_over_long_prompt_is_context_length_exceeded(app_client: AppClient) -> None:
    """The upstream's overflow is a 400 naming `prompt`, with the sizes in headers."""
    overflow = ContextWindowExceeded(
        "request (2727 tokens) exceeds 2048", requested=2727, limit=2048
    )
    client = client_for(app_client, local=ScriptedProvider([overflow]))
    response = await client.post("/v1/completions", json={"model": "local", "prompt": "long"})
    assert response.status_code == 400
    error = error_of(response)
    assert (error["code"], error["param"]) == ("context_length_exceeded", "prompt")
    assert response.headers["x-overspill-requested-tokens"] == "2727"
    assert response.headers["x-overspill-window"] == "2048"


BAD_BODIES = [
    ("embeddings", {"model": "embed"}, "input", "'input' is required"),
    ("embeddings", {"model": "embed", "input": 3}, "input", "got 3"),
    ("embeddings", {"model": "embed", "input": []}, "input", "(not empty)"),
    ("embeddings", {"model": "embed", "input": ["a", 1]}, "input", "'input[1]' must be a string like the items before it"),
    ("embeddings", {"model": "embed", "input": [1, -2]}, "input", "'input[1]' must be a token id"),
    ("embeddings", {"model": "embed", "input": [[1], []]}, "input", "'input[1]' must be a non-empty array of token ids"),
    ("embeddings", {"model": "embed", "input": [[1], [2, "a"]]}, "input", "'input[1][1]' must be a token id (an integer of 0 or more), got 'a'"),
    ("embeddings", {"model": "embed", "input": [True]}, "input", "input[0]"),
    ("embeddings", {"model": "embed", "input": "a", "encoding_format": "hex"}, "encoding_format", '"float" or "base64"'),
    ("embeddings", {"model": "embed", "input": "a", "dimensions": 0}, "dimensions", "a positive integer"),
    ("embeddings", {"model": "embed", "input": "a", "user": 5}, "user", "a string"),
    ("embeddings", {"model": "embed", "input": "a", "stream": True}, "stream", "answered whole"),
    ("embeddings", {"input": "a"}, "model", "'model' is required"),
    ("completions", {"model": "local"}, "prompt", "'prompt' is required"),
    ("completions", {"model": "local", "prompt": {"text": "a"}}, "prompt", "got an object"),
    ("completions", {"model": "local", "prompt": "a", "max_tokens": -1}, "max_tokens", "an integer of 0 or more"),
    ("completions", {"model": "local", "prompt": "a", "max_tokens": 1.5}, "max_tokens", "got 1.5"),
    ("completions", {"model": "local", "prompt": "a", "stream": "yes"}, "stream", "true or false"),
    ("completions", {"model": "local", "prompt": "a", "echo": 1}, "echo", "true or false"),
    ("completions", {"model": "local", "prompt": "a", "logprobs": True}, "logprobs", "an integer"),
    ("completions", {"model": "local", "prompt": "a", "n": 0}, "n", "a positive integer"),
    ("completions", {"model": "local", "prompt": "a", "stop": ["a", 2]}, "stop", "a string or an array of strings"),
    ("completions", {"model": "local", "prompt": "a", "temperature": "hot"}, "temperature", "a number"),
    ("completions", {"model": "local", "prompt": "a", "suffix": []}, "suffix", "a string"),
    ("completions", {"model": "local", "prompt": "a", "stream": True, "stream_options": {"include_usage": "y"}}, "stream_options.include_usage", "true or false"),
    ("completions", {"model": "local", "prompt": "a", "logit_bias": [1]}, "logit_bias", "an object"),
]  # fmt: skip


@pytest.mark.reliability("input")
@pytest.mark.parametrize(("route", "body", "param", "says"), BAD_BODIES)
async def test_bad_bodies_are_400s_naming_the_field(
    app_client: AppClient, route: str, body: dict[str, Any], param: str, says: str
) -> None:
    """A body OpenAI's API would refuse is a 400 in its shape naming the field; nothing sent."""
    embed, local = ScriptedProvider([VECTORS]), ScriptedProvider([TEXT])
    client = client_for(app_client, embed=embed, local=local)
    response = await client.post(f"/v1/{route}", json=body)
    assert response.status_code == 400, response.text
    error = error_of(response)
    assert (error["type"], error["param"]) == ("invalid_request_error", param)
    assert says in error["message"]
    assert embed.sent == local.sent == []


@pytest.mark.reliability("input")
@pytest.mark.parametrize("raw", [b"", b"{", b"[1]", b'"text"', b"\xff\xfe"])
@pytest.mark.parametrize("route", ["embeddings", "completions"])
async def test_bodies_that_are_not_a_json_object_are_400s(
    app_client: AppClient, route: str, raw: bytes
) -> None:
    """Empty, cut or non-object bodies are 400s that say what a body must be."""
    response = await client_for(app_client).post(f"/v1/{route}", content=raw)
    assert response.status_code == 400
    assert "request body" in error_of(response)["message"]


@pytest.mark.reliability("secrets")
@pytest.mark.parametrize(
    "field", [{"api_base": "http://evil.test"}, {"api_key": "k"}, {"extra_body": {"aws_region_name": "x"}}]
)  # fmt: skip
@pytest.mark.parametrize("route", ["embeddings", "completions"])
async def test_connection_fields_are_refused(
    app_client: AppClient, route: str, field: dict[str, Any]
) -> None:
    """A body may not choose where overspill sends traffic or with which credentials."""
    text = {"input": "a"} if route == "embeddings" else {"prompt": "a"}
    body = {"model": "embed" if route == "embeddings" else "local", **text, **field}
    response = await client_for(app_client).post(f"/v1/{route}", json=body)
    assert response.status_code == 400
    assert error_of(response)["code"] == "forbidden_parameter"


@pytest.mark.reliability("tenants")
async def test_keys_and_allow_lists_hold_on_these_routes(app_client: AppClient) -> None:
    """No key is a 401; a client key limited to `embed` embeds but cannot complete text."""
    anonymous = client_for(app_client, key="")
    assert (await anonymous.post("/v1/embeddings", json={"model": "embed", "input": "a"})).status_code == 401  # fmt: skip
    app = client_for(app_client, key="sk-app")
    allowed = await app.post("/v1/embeddings", json={"model": "embed", "input": "a"})
    assert allowed.status_code == 200
    refused = await app.post("/v1/completions", json={"model": "local", "prompt": "a"})
    assert refused.status_code == 403
    assert error_of(refused)["code"] == "model_not_allowed"
    wrong = await app.post("/v1/completions", json={"model": "embed", "prompt": "a"})
    assert error_of(wrong)["code"] == "route_not_served"
    assert "Models that serve it" not in error_of(wrong)["message"]  # none the key may use


async def test_an_unknown_model_is_model_not_found(app_client: AppClient) -> None:
    """A model overspill does not know is a 404 listing the configured ones."""
    unknown = await client_for(app_client).post(
        "/v1/embeddings", json={"model": "nope", "input": "a"}
    )
    assert (unknown.status_code, error_of(unknown)["code"]) == (404, "model_not_found")


@pytest.mark.reliability("input")
async def test_the_body_limit_holds(app_client: AppClient) -> None:
    """A body over max_body_bytes is a 413, whatever the route."""
    body = {"model": "embed", "input": ["x" * 100] * 50}
    response = await client_for(app_client).post("/v1/embeddings", json=body)
    assert (response.status_code, error_of(response)["code"]) == (413, "payload_too_large")


@pytest.mark.parametrize(
    ("path", "body"),
    [
        (
            "/v1/chat/completions",
            {"model": "local", "messages": [{"role": "user", "content": "a"}]},
        ),
        ("/v1/embeddings", {"model": "embed", "input": "a"}),
    ],
)
async def test_a_compressed_body_is_refused_naming_its_encoding(
    app_client: AppClient, path: str, body: dict[str, object]
) -> None:
    """A body sent with Content-Encoding (gzip) is a 415 saying to send it uncompressed, not
    a JSON error about invalid UTF-8."""
    packed = gzip.compress(orjson.dumps(body))
    response = await client_for(app_client).post(
        path,
        content=packed,
        headers={"content-type": "application/json", "content-encoding": "gzip"},
    )
    assert (response.status_code, error_of(response)["code"]) == (
        415,
        "unsupported_content_encoding",
    )
    assert "Content-Encoding: gzip" in error_of(response)["message"]
    assert "uncompressed" in error_of(response)["message"]


async def test_each_request_logs_one_line_with_its_api(
    app_client: AppClient, caplog: pytest.LogCaptureFixture
) -> None:
    """The request's log line says which API was spoken, its model and status."""
    client = client_for(app_client)
    with caplog.at_level(logging.INFO, logger="overspill.request"):
        await client.post("/v1/embeddings", json={"model": "embed", "input": "a"})
    (record,) = [r for r in caplog.records if r.name == "overspill.request"]
    assert (record.api, record.model, record.status) == ("embeddings", "embed", 200)  # type: ignore[attr-defined]


# -- model modes -----------------------------------------------------------------------------


async def test_an_embedding_model_asked_to_chat_is_a_400_naming_its_route(
    app_client: AppClient,
) -> None:
    """`mode: embedding` refuses conversations and completions before any upstream call."""
    embed = ScriptedProvider([json_response("never")])
    client = client_for(app_client, embed=embed)
    chat = {"model": "embed", "messages": [{"role": "user", "content": "hi"}]}
    for path, body in (("/v1/chat/completions", chat), ("/v1/completions", {"model": "embed", "prompt": "a"})):  # fmt: skip
        response = await client.post(path, json=body)
        assert response.status_code == 400
        error = error_of(response)
        assert (error["code"], error["param"]) == ("route_not_served", "model")
        assert f"model 'embed' cannot serve {path}" in error["message"]
        assert "it serves /v1/embeddings" in error["message"]
    messages = {"model": "embed", "max_tokens": 5, "messages": [{"role": "user", "content": "hi"}]}
    response = await client.post("/v1/messages", json=messages)
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["type"] == "invalid_request_error"
    assert "model 'embed' cannot serve /v1/messages" in error["message"]
    assert embed.requests == []
    assert embed.sent == []


async def test_a_chat_model_asked_for_embeddings_names_the_models_that_embed(
    app_client: AppClient,
) -> None:
    """`mode: chat` refuses embeddings, and the 400 lists the models that serve them."""
    response = await client_for(app_client).post(
        "/v1/embeddings", json={"model": "local", "input": "a"}
    )
    message = error_of(response)["message"]
    assert response.status_code == 400
    assert "its model_info.mode is chat" in message
    assert "Models that serve it: anything, big-embed, embed, vectors" in message


async def test_a_model_of_unknown_mode_goes_upstream_on_every_route(
    app_client: AppClient,
) -> None:
    """No mode configured and none in litellm's map: the upstream decides."""
    anything = ScriptedProvider([VECTORS, TEXT])
    client = client_for(app_client, anything=anything)
    assert (await client.post("/v1/embeddings", json={"model": "anything", "input": "a"})).status_code == 200  # fmt: skip
    assert (await client.post("/v1/completions", json={"model": "anything", "prompt": "a"})).status_code == 200  # fmt: skip
    assert [r.route for r in anything.sent] == ["embeddings", "completions"]


async def test_litellms_map_gives_the_mode_when_config_does_not(app_client: AppClient) -> None:
    """`openai/text-embedding-3-small` is an embedding model by litellm's map: chat is a 400."""
    chat = {"model": "big-embed", "messages": [{"role": "user", "content": "hi"}]}
    response = await client_for(app_client).post("/v1/chat/completions", json=chat)
    assert response.status_code == 400
    assert (
        "litellm's model map gives it mode embedding (model_info.mode overrides)"
        in error_of(response)["message"]
    )


async def test_an_alias_is_refused_under_its_own_name(app_client: AppClient) -> None:
    """An alias of an embedding model asked to complete text is named as the client named it."""
    response = await client_for(app_client).post(
        "/v1/completions", json={"model": "vectors", "prompt": "a"}
    )
    assert "model 'vectors' cannot serve /v1/completions" in error_of(response)["message"]


async def test_models_list_the_routes_each_serves(app_client: AppClient) -> None:
    """`/v1/models` says which routes each model serves, by its mode."""
    listed = (await client_for(app_client).get("/v1/models")).json()["data"]
    routes = {m["id"]: m["routes"] for m in listed}
    assert routes["local"] == [
        "/v1/chat/completions",
        "/v1/responses",
        "/v1/messages",
        "/v1/completions",
    ]
    assert routes["embed"] == routes["vectors"] == routes["big-embed"] == ["/v1/embeddings"]
    assert routes["anything"] == [
        "/v1/chat/completions",
        "/v1/responses",
        "/v1/messages",
        "/v1/completions",
        "/v1/embeddings",
    ]


async def test_one_model_is_retrieved_as_it_is_listed(app_client: AppClient) -> None:
    """`GET /v1/models/{model}` (the SDK's `models.retrieve`) answers the listed object; a
    name not listed, or one the key may not use, is a 404 in OpenAI's shape."""
    client = client_for(app_client)
    listed = (await client.get("/v1/models")).json()["data"]
    one = (await client.get("/v1/models/embed")).json()
    same = next(m for m in listed if m["id"] == "embed")
    assert one == same
    assert (await client.get("/models/local")).json()["routes"][0] == "/v1/chat/completions"
    for key, name in (("sk-master", "nope"), ("sk-app", "local")):
        response = await client_for(app_client, key=key).get(f"/v1/models/{name}")
        assert response.status_code == 404
        assert (error_of(response)["code"], error_of(response)["param"]) == (
            "model_not_found",
            "model",
        )
    assert (await client_for(app_client, key="sk-app").get("/v1/models/embed")).status_code == 200


# -- the OpenAI routes overspill does not serve -------------------------------------------


@pytest.mark.parametrize(
    "path",
    ["/v1/images/generations", "/v1/audio/transcriptions", "/v1/moderations", "/v1/files",
     "/v1/batches", "/v1/fine_tuning/jobs", "/v1/vector_stores", "/moderations"],
)  # fmt: skip
async def test_other_openai_routes_are_404s_naming_the_served_ones(
    app_client: AppClient, path: str
) -> None:
    """OpenAI's other APIs are a 404 that says overspill does not serve them and what it does."""
    response = await client_for(app_client).post(path, json={"model": "local"})
    assert response.status_code == 404
    error = error_of(response)
    assert error["code"] == "not_found"
    assert "overspill does not serve OpenAI's" in error["message"]
    for served in ("POST /v1/chat/completions", "POST /v1/completions", "POST /v1/embeddings",
                   "GET /v1/models"):  # fmt: skip
        assert served in error["message"]


async def test_any_unknown_path_names_the_served_routes(app_client: AppClient) -> None:
    """A path that is no API at all is a 404 listing the API routes."""
    response = await client_for(app_client).get("/v2/chat")
    assert response.status_code == 404
    assert "overspill's API routes: " in error_of(response)["message"]
    assert "GET /v1/models/{model} (each" in error_of(response)["message"]
    assert "POST /v1/responses/input_tokens, " in error_of(response)["message"]
    assert "(each also without /v1)" in error_of(response)["message"]


@pytest.mark.parametrize("path", ["/health/live", "/health/readiness/details", "/health/services"])
async def test_a_health_path_not_served_names_the_health_routes(
    app_client: AppClient, path: str
) -> None:
    """A health path not served is a 404 naming the health routes overspill serves, not its
    API routes."""
    response = await client_for(app_client).get(path)
    assert response.status_code == 404
    message = error_of(response)["message"]
    assert "GET /health/liveness" in message
    assert "GET /health/readiness" in message
    assert "GET /health (each model deployment" in message
    assert "chat/completions" not in message


async def test_a_route_request_keeps_the_fields_it_was_sent_with() -> None:
    """RouteRequest renders the client's bytes for the same model, a rewrite for another."""
    request = RouteRequest("embeddings", "m", False, {"model": "m", "input": "a"}, b"RAW")
    assert request.render("m") == b"RAW"
    assert orjson.loads(request.render("up")) == {"model": "up", "input": "a"}


def test_a_body_too_deep_to_write_again_is_the_clients_error() -> None:
    """A field nested deeper than overspill can write is a 400 when the model is renamed."""
    deep = b"[" * 300 + b"]" * 300
    raw = b'{"model":"m","input":"a","logit_bias":' + deep + b"}"
    request = RouteRequest("embeddings", "m", False, orjson.loads(raw), raw)
    assert request.render("m") == raw
    with pytest.raises(JsonTooDeep):
        request.render("upstream-name")
