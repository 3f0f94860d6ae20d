"""Wildcard model names and model_group_alias, routed for real: the app, the router and the
real OpenAI-wire provider, with the upstream answered in-process."""

from __future__ import annotations

import gc
import os
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from kernel.services import Services
from kernel.spending import Spend
from kernel.store import DiskHistoryStore
from middleware.condensing.ladder import ladder_for
from middleware.layers.overflow_recovery import OverflowRecovery
from middleware.pipeline import LAYERS
from proxy import logs, server, system
from proxy.app import create_app
from proxy.cli import CONFIG_ENV
from proxy.system import build_system
from tests.conftest import running, settings_from

CONFIG = """
model_list:
  - model_name: local
    litellm_params: {model: openai/smollm2, api_base: "http://local.test/v1"}
  - model_name: "openai/*"
    litellm_params: {model: "openai/*", api_base: "http://openai.test/v1", api_key: sk-up}
  - model_name: "team/*"
    litellm_params: {model: "openai/*", api_base: "http://team-a.test/v1"}
  - model_name: "team/*"
    litellm_params: {model: "openai/*", api_base: "http://team-b.test/v1"}
  - model_name: "keyless/*"
    litellm_params: {model: "openai/*", api_key: os.environ/UNSET_KEY}
router_settings:
  model_group_alias:
    fast: local
    quiet: {model: local, hidden: true}
    mini: openai/gpt-4o-mini
general_settings:
  master_key: sk-master
"""
CATCH_ALL = """
model_list:
  - model_name: "*"
    litellm_params: {model: "openai/*", api_base: "http://any.test/v1"}
"""

Upstream = list[tuple[str, dict[str, Any]]]
Make = Callable[..., httpx.AsyncClient]


def answer(request: httpx.Request) -> httpx.Response:
    body = orjson.loads(request.content)
    return httpx.Response(
        200,
        json={
            "id": "c1",
            "object": "chat.completion",
            "model": body["model"],
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": "hi"},
                    "finish_reason": "stop",
                }
            ],
            "usage": {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4},
        },
    )


@pytest.fixture
async def upstream_and_app(store: DiskHistoryStore) -> AsyncIterator[tuple[Upstream, Make]]:
    """A client for the app built from a config whose upstreams answer in-process, and the
    (url, body) of every request they received."""
    seen: Upstream = []

    def handle(request: httpx.Request) -> httpx.Response:
        seen.append((str(request.url), orjson.loads(request.content)))
        return answer(request)

    upstreams = httpx.AsyncClient(transport=httpx.MockTransport(handle))
    clients: list[httpx.AsyncClient] = []

    def make(text: str = CONFIG) -> httpx.AsyncClient:
        built = build_system(settings_from(text), client=upstreams, store=store)
        client = httpx.AsyncClient(
            transport=httpx.ASGITransport(app=create_app(built)),
            base_url="http://o.test",
            headers={"authorization": "Bearer sk-master"},
        )
        clients.append(client)
        return client

    yield seen, make
    for client in clients:
        await client.aclose()
    await upstreams.aclose()


async def chat(client: httpx.AsyncClient, model: str) -> httpx.Response:
    body = {"model": model, "messages": [{"role": "user", "content": "hello"}]}
    return await client.post("/v1/chat/completions", json=body)


async def test_a_wildcard_serves_a_matching_name(upstream_and_app: tuple[Upstream, Make]) -> None:
    """`openai/*` serves `openai/gpt-4o`: the upstream is asked for `gpt-4o` at its api_base."""
    seen, make = upstream_and_app
    response = await chat(make(), "openai/gpt-4o")
    assert response.status_code == 200, response.text
    assert seen == [("http://openai.test/v1/chat/completions", seen[0][1])]
    assert seen[0][1]["model"] == "gpt-4o"


async def test_a_catch_all_serves_any_name(upstream_and_app: tuple[Upstream, Make]) -> None:
    """`model_name: "*"` with `model: "openai/*"` sends any name as it came."""
    seen, make = upstream_and_app
    client = make(CATCH_ALL)
    assert (await chat(client, "qwen2.5-coder")).status_code == 200
    assert (await chat(client, "qwen2.5-coder")).status_code == 200
    assert [body["model"] for _, body in seen] == ["qwen2.5-coder", "qwen2.5-coder"]


async def test_deployments_of_a_wildcard_take_turns(
    upstream_and_app: tuple[Upstream, Make],
) -> None:
    """Two entries with one pattern share each name's requests, like any model group."""
    seen, make = upstream_and_app
    client = make()
    for _ in range(2):
        assert (await chat(client, "team/m")).status_code == 200
    assert sorted(url for url, _ in seen) == [
        "http://team-a.test/v1/chat/completions",
        "http://team-b.test/v1/chat/completions",
    ]


async def test_an_exact_name_wins_over_a_pattern(upstream_and_app: tuple[Upstream, Make]) -> None:
    """A configured model_name is served by its own deployment even when a pattern matches."""
    seen, make = upstream_and_app
    both = (
        CATCH_ALL
        + '  - {model_name: local, litellm_params: {model: openai/m, api_base: "http://local.test/v1"}}\n'
    )
    assert (await chat(make(both), "local")).status_code == 200
    assert seen[0][0] == "http://local.test/v1/chat/completions"


async def test_a_name_no_pattern_matches_is_not_found(
    upstream_and_app: tuple[Upstream, Make],
) -> None:
    """A name no model_name or pattern matches is a 404 that lists what is configured."""
    seen, make = upstream_and_app
    response = await chat(make(), "anthropic/claude")
    assert response.status_code == 404
    assert response.json()["error"]["code"] == "model_not_found"
    assert "openai/*" in response.json()["error"]["message"]
    assert seen == []


async def test_a_wildcard_with_an_unset_secret_is_unavailable(
    upstream_and_app: tuple[Upstream, Make],
) -> None:
    """A matching pattern whose variable is unset answers 503 naming the variable, not 404."""
    _, make = upstream_and_app
    response = await chat(make(), "keyless/gpt-4o")
    assert response.status_code == 503
    assert response.json()["error"]["code"] == "model_unavailable"
    assert "UNSET_KEY" in response.json()["error"]["message"]


async def test_aliases_are_served_by_their_target(upstream_and_app: tuple[Upstream, Make]) -> None:
    """Visible and hidden aliases both route to the target's deployment; an alias whose
    target only a wildcard serves works too (the upstream is asked for the target's model)."""
    seen, make = upstream_and_app
    client = make()
    for alias in ("fast", "quiet", "mini"):
        assert (await chat(client, alias)).status_code == 200
    assert [(url, body["model"]) for url, body in seen] == [
        ("http://local.test/v1/chat/completions", "smollm2"),
        ("http://local.test/v1/chat/completions", "smollm2"),
        ("http://openai.test/v1/chat/completions", "gpt-4o-mini"),
    ]


async def test_models_lists_aliases_and_wildcards_like_litellm(
    upstream_and_app: tuple[Upstream, Make],
) -> None:
    """/v1/models lists the configured names (patterns as written), visible aliases (not
    hidden ones), and each pattern's known chat models from litellm's map, with windows."""
    _, make = upstream_and_app
    data = (await make().get("/v1/models")).json()["data"]
    listed = {m["id"]: m["context_window"] for m in data}
    assert {"local", "openai/*", "team/*", "fast", "mini"} <= set(listed)
    assert "quiet" not in listed
    assert listed["openai/gpt-4o"] == 128000
    assert not any(name.startswith("openai/text-embedding") for name in listed)
    assert len(listed) == len(data)


async def test_wildcard_names_are_bounded(
    upstream_and_app: tuple[Upstream, Make], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Past the limit the oldest name a wildcard served is forgotten; asking for it again
    still works (it is rebuilt)."""
    monkeypatch.setattr(system, "MAX_WILDCARD_NAMES", 2)
    seen, make = upstream_and_app
    client = make()
    for name in ("openai/a", "openai/b", "openai/c", "openai/a"):
        assert (await chat(client, name)).status_code == 200
    assert [body["model"] for _, body in seen] == ["a", "b", "c", "a"]
    state = client._transport.app.state.overspill  # type: ignore[attr-defined]
    assert "openai/b" not in state.system.entries
    assert "fast" in state.system.entries  # aliases are never forgotten


async def test_environment_variables_are_set_before_providers_are_built(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The server sets `environment_variables:` in its process (litellm reads them)."""
    config = tmp_path / "config.yaml"
    config.write_text(
        "environment_variables: {OVERSPILL_TEST_REGION: eu-west-1}\n" + CATCH_ALL, encoding="utf-8"
    )
    monkeypatch.setenv("OVERSPILL_TEST_REGION", "unset")  # restored after the test
    monkeypatch.setenv(CONFIG_ENV, str(config))
    monkeypatch.setattr(logs, "configure", lambda *levels: None)
    monkeypatch.setattr(gc, "freeze", lambda: None)
    app = server.app_from_env()
    async with running(app):
        assert os.environ["OVERSPILL_TEST_REGION"] == "eu-west-1"


async def test_condensing_can_call_a_name_a_wildcard_serves(store: DiskHistoryStore) -> None:
    """The layers find the deployment of a wildcard-served name (its condensing ladder and
    overspill's own call to it), once a request has asked for it."""
    captured: list[Services] = []

    def capture(services: Services) -> OverflowRecovery:
        captured.append(services)
        return OverflowRecovery(services)

    upstreams = httpx.AsyncClient(transport=httpx.MockTransport(answer))
    built = build_system(
        settings_from(CATCH_ALL),
        client=upstreams,
        store=store,
        registry={**LAYERS, OverflowRecovery.name: capture},
    )
    entry = built.expand("qwen2.5")
    assert entry is not None
    (services,) = captured
    rungs = await ladder_for(services, entry, scale=1.0, fallback_window=4096, spend=Spend("t"))
    assert [rung.name for rung in rungs] == ["qwen2.5"]
    result = await rungs[0].complete([{"role": "user", "content": "condense"}], max_tokens=8)
    assert result.text == "hi"
    await built.aclose()
    await upstreams.aclose()
