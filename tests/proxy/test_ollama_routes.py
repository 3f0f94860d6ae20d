"""Ollama in the HTTP surface: local models in /v1/models, the window refresh endpoint."""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
import orjson
import pytest

from kernel.store import DiskHistoryStore
from providers.fake import ScriptedProvider, json_response
from providers.ollama import OllamaWindows
from proxy.app import create_app
from proxy.system import build_system
from tests.conftest import settings_from
from tests.fakes.ollama import FakeModel, FakeOllama

CONFIG = """
model_list:
  - model_name: llama
    litellm_params: {model: ollama/smollm2:latest, api_base: "http://ollama.test"}
    ollama: {list_local_models: true}
general_settings: {master_key: sk-master}
"""


@pytest.fixture
def asked() -> list[str]:
    """What overspill asked the Ollama server: each request's path, and the model it named."""
    return []


@pytest.fixture
async def client(store: DiskHistoryStore, asked: list[str]) -> AsyncIterator[httpx.AsyncClient]:
    async def record(request: httpx.Request) -> None:
        named = orjson.loads(request.content).get("model", "") if request.content else ""
        asked.append(f"{request.url.path} {named}".strip())

    fake = FakeOllama(
        [
            FakeModel("smollm2:latest", loaded_ctx=2048),
            FakeModel("qwen:0.5b", modelfile_num_ctx=8192, trained_ctx=32768),
        ]
    )
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=fake.app), event_hooks={"request": [record]}
    ) as to_ollama:
        windows = OllamaWindows(to_ollama)
        app = create_app(
            build_system(
                settings_from(CONFIG),
                providers={"llama": [ScriptedProvider([json_response("x")])]},
                store=store,
                ollama=windows,
            )
        )
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(
            transport=transport, base_url="http://t", headers={"authorization": "Bearer sk-master"}
        ) as http:
            yield http


async def test_local_models_are_listed_with_their_windows(client: httpx.AsyncClient) -> None:
    """With list_local_models, /v1/models adds the server's models and the windows they run with."""
    data = (await client.get("/v1/models")).json()["data"]
    listed = {
        m["id"]: (m["context_window"], m["context_window_source"])
        for m in data
        if m["owned_by"] == "ollama"
    }
    assert listed == {"smollm2:latest": (2048, "ps"), "qwen:0.5b": (8192, "modelfile")}
    assert data[0]["id"] == "llama"


async def test_one_local_model_is_retrieved_asking_only_about_it(
    client: httpx.AsyncClient, asked: list[str]
) -> None:
    """`GET /v1/models/{model}` answers a local model as listed, asking Ollama about no other."""
    listed = (await client.get("/v1/models")).json()["data"]
    await client.post("/overspill/ollama/refresh")
    asked.clear()
    one = (await client.get("/v1/models/qwen:0.5b")).json()
    assert one == next(m for m in listed if m["id"] == "qwen:0.5b")
    assert "/api/tags" in asked
    assert [a for a in asked if a.startswith("/api/show")] == ["/api/show qwen:0.5b"]


async def test_window_refresh_needs_the_master_key(client: httpx.AsyncClient) -> None:
    """POST /overspill/ollama/refresh drops cached windows; only the master key may call it."""
    await client.get("/v1/models")
    refreshed = await client.post("/overspill/ollama/refresh")
    assert refreshed.json()["dropped"] >= 1
    refused = await client.post(
        "/overspill/ollama/refresh", headers={"authorization": "Bearer nope"}
    )
    assert refused.status_code == 401


def test_ollama_routes_are_rewritten_to_the_native_api(
    store: DiskHistoryStore, caplog: pytest.LogCaptureFixture
) -> None:
    """An `ollama/` deployment is served through `ollama_chat/`, with a warning."""
    app = create_app(build_system(settings_from(CONFIG), store=store))
    entry = app.state.overspill.system.entries["llama"]
    assert entry.litellm_params.model == "ollama_chat/smollm2:latest"
    assert "ollama/ routes lose num_ctx" in caplog.text
