"""`GET /health`: each deployment asked for one token on its own API, LiteLLM's answer shape,
the key's models only, api_base for the master key, 503 for a model with none healthy, the
checks counted in the caller's usage."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import orjson
import pytest
import respx

from kernel.errors import UpstreamError, UpstreamTimeout
from kernel.types import ChatRequest, ChatResponse, Provider, RequestContext
from providers.fake import (
    ScriptedProvider,
    completion,
    embeddings,
    json_response,
    text_completion,
)
from proxy import health
from proxy.keys import Caller
from tests.conftest import AppClient, settings_from

CONFIG = """
model_list:
  - model_name: local
    litellm_params: {model: openai/smollm2, api_base: "http://first.test/v1"}
    model_info: {mode: chat}
  - model_name: local
    litellm_params: {model: openai/smollm2, api_base: "http://second.test/v1"}
    model_info: {mode: chat}
  - model_name: embed
    litellm_params: {model: openai/smollm2-embed, api_base: "http://upstream.test/v1"}
    model_info: {mode: embedding}
  - model_name: text
    litellm_params: {model: openai/smollm2-text, api_base: "http://upstream.test/v1"}
    model_info: {mode: completion}
  - model_name: hosted
    litellm_params: {model: openai/gpt-4o-mini, api_key: os.environ/HOSTED_KEY}
  - model_name: images
    litellm_params: {model: openai/dall-e-3, api_base: "http://upstream.test/v1"}
    model_info: {mode: image_generation}
  - model_name: "openai/*"
    litellm_params: {model: "openai/*", api_base: "http://upstream.test/v1"}
  - model_name: "hosted_vllm/*"
    litellm_params: {model: "hosted_vllm/*", api_base: "http://vllm.test/v1"}
    model_info: {health_check_model: hosted_vllm/qwen}
  - model_name: slow
    litellm_params: {model: openai/slow, api_base: "http://slow.test/v1"}
    model_info: {mode: chat, health_check_timeout: 0.05}
router_settings:
  model_group_alias: {vectors: embed}
general_settings:
  master_key: sk-master
  client_keys:
    - {name: app, key: sk-app, models: [embed]}
"""
VECTORS = ChatResponse(body=orjson.dumps(embeddings([[0.5, 1.5]])))
TEXT = ChatResponse(body=orjson.dumps(text_completion(" pong")))


def providers(**given: ScriptedProvider) -> dict[str, list[Provider]]:
    """Every model's deployments, `local`'s two from `first` and `second`."""
    return {
        "local": [given.get("first") or ScriptedProvider([json_response("pong")]),
                  given.get("second") or ScriptedProvider([json_response("pong")])],
        "embed": [given.get("embed") or ScriptedProvider([VECTORS])],
        "text": [given.get("text") or ScriptedProvider([TEXT])],
        "hosted": [ScriptedProvider([json_response("never asked")])],
        "images": [ScriptedProvider([json_response("never asked")])],
        "slow": [Hanging()],
    }  # fmt: skip


class Hanging:
    """A deployment that never answers."""

    name = "hanging"

    async def complete(self, request: ChatRequest, ctx: RequestContext) -> ChatResponse:
        await asyncio.Event().wait()
        raise AssertionError("unreachable")

    async def aclose(self) -> None:
        """Nothing to release."""


def client(app_client: AppClient, key: str | None = "sk-master", **given: ScriptedProvider) -> Any:
    return app_client(providers(**given), settings=settings_from(CONFIG, env={}), key=key)


def by_base(endpoints: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {e.get("api_base", e["model_name"]): e for e in endpoints}


async def test_every_deployment_is_asked_once_on_its_own_api(app_client: AppClient) -> None:
    """Each deployment gets one call of its own kind, none failed over to another, within its
    `health_check_timeout`; a wildcard is checked with its `health_check_model`."""
    first = ScriptedProvider([UpstreamError("connection refused", upstream_status=None)])
    second, embed, text = (ScriptedProvider([json_response("pong")]),
                           ScriptedProvider([VECTORS]), ScriptedProvider([TEXT]))  # fmt: skip
    http = client(app_client, first=first, second=second, embed=embed, text=text)
    with respx.mock() as mock:
        vllm = mock.post("http://vllm.test/v1/chat/completions").mock(
            return_value=httpx.Response(200, json=completion("pong"))
        )
        response = await http.get("/health")
    assert response.status_code == 200
    body = response.json()
    healthy, unhealthy = by_base(body["healthy_endpoints"]), by_base(body["unhealthy_endpoints"])
    assert set(healthy) == {
        "http://second.test/v1",
        "http://upstream.test/v1",
        "http://vllm.test/v1",
    }
    assert (body["healthy_count"], body["unhealthy_count"]) == (4, 3)
    assert unhealthy["http://first.test/v1"]["error"] == "connection refused"
    assert unhealthy["http://first.test/v1"]["status"] == 502
    assert unhealthy["hosted"]["error"] == "environment variable(s) unset: HOSTED_KEY"
    assert unhealthy["http://slow.test/v1"]["error"] == "no answer within 0.05 seconds"
    assert unhealthy["http://slow.test/v1"]["status"] == 504
    assert healthy["http://vllm.test/v1"]["model_name"] == "hosted_vllm/qwen"
    assert orjson.loads(vllm.calls.last.request.content)["model"] == "qwen"
    assert [len(first.requests), len(second.requests)] == [1, 1]
    (asked,) = second.requests
    assert (asked.body["max_tokens"], asked.messages) == (1, ({"role": "user", "content": "ping"},))
    assert [(r.route, r.body) for r in embed.sent] == [
        ("embeddings", {"model": "embed", "input": "ping"})
    ]
    assert [(r.route, r.body["max_tokens"]) for r in text.sent] == [("completions", 1)]
    unchecked = {e["model_name"]: e["reason"] for e in body["unchecked_endpoints"]}
    assert unchecked["images"] == "mode 'image_generation': overspill serves none of its APIs"
    assert unchecked["openai/*"].startswith("a wildcard: GET /health?model=NAME")


async def test_one_model_is_checked_and_503_when_none_is_healthy(app_client: AppClient) -> None:
    """`?model=` checks that model's deployments alone; none healthy is a 503; an alias checks
    its target's; a name nothing serves is a 404 in OpenAI's shape."""
    failing = UpstreamTimeout("timed out after 120 s")
    first, second = ScriptedProvider([failing]), ScriptedProvider([failing])
    http = client(app_client, first=first, second=second)
    response = await http.get("/health", params={"model": "local"})
    assert response.status_code == 503
    assert response.json()["unhealthy_count"] == 2
    assert response.json()["healthy_endpoints"] == []
    alias = (await http.get("/health", params={"model": "vectors"})).json()
    assert [e["model_name"] for e in alias["healthy_endpoints"]] == ["embed"]
    missing = await http.get("/health", params={"model": "nope"})
    assert missing.status_code == 404
    assert missing.json()["error"]["code"] == "model_not_found"


async def test_a_client_key_checks_its_models_and_sees_no_api_base(app_client: AppClient) -> None:
    """A client key checks only the models it may use, without their api_base; a model it
    may not use is refused as the API routes refuse it; no key is a 401."""
    http = client(app_client, key="sk-app")
    body = (await http.get("/health")).json()
    assert body["healthy_endpoints"] == [
        {"model_name": "embed", "model": "openai/smollm2-embed", "seconds": pytest.approx(0, abs=5)}
    ]
    assert body["unhealthy_endpoints"] == body["unchecked_endpoints"] == []
    refused = await http.get("/health", params={"model": "local"})
    assert refused.status_code == 403
    anonymous = await client(app_client, key=None).get("/health")
    assert anonymous.status_code == 401


async def test_a_wildcard_name_is_checked_on_the_deployment_serving_it(
    app_client: AppClient,
) -> None:
    """`?model=openai/gpt-4o` asks the wildcard entry's deployment for the name it serves."""
    seen: list[dict[str, Any]] = []

    def answer(request: httpx.Request) -> httpx.Response:
        seen.append(orjson.loads(request.content))
        return httpx.Response(200, json=completion("pong"))

    with respx.mock() as mock:
        mock.post("http://upstream.test/v1/chat/completions").mock(side_effect=answer)
        response = await client(app_client).get("/health", params={"model": "openai/gpt-4o"})
    assert response.status_code == 200
    (checked,) = response.json()["healthy_endpoints"]
    assert (checked["model_name"], checked["model"]) == ("openai/gpt-4o", "openai/gpt-4o")
    assert [(body["model"], body["max_tokens"]) for body in seen] == [("gpt-4o", 1)]


async def test_the_checks_are_counted_in_the_callers_usage(app_client: AppClient) -> None:
    """Each check is one of overspill's own calls, in the usage of the key that asked."""
    http = client(app_client, key="sk-app")
    await http.get("/health")
    master = client(app_client)
    usage = (await master.get("/overspill/usage", params={"tenant": "app"})).json()
    assert [(row["model"], row["calls"]) for row in usage["data"]] == [("embed", 1)]


def test_deployments_are_numbered_as_the_router_groups_them() -> None:
    """An unusable deployment is skipped in the numbering, as build_providers skips it."""
    settings = settings_from(
        """
model_list:
  - {model_name: m, litellm_params: {model: openai/a, api_base: "http://a.test/v1"}}
  - {model_name: m, litellm_params: {model: openai/b, api_key: os.environ/UNSET_KEY}}
  - {model_name: m, litellm_params: {model: openai/c, api_base: "http://c.test/v1"}}
""",
        env={},
    )
    planned = health.planned(settings, Caller("t"), None, lambda name: [])
    assert [(d.entry.litellm_params.model, d.index) for d in planned] == [
        ("openai/a", 0), ("openai/b", None), ("openai/c", 1)
    ]  # fmt: skip
    assert planned[1].why == "environment variable(s) unset: UNSET_KEY"
