"""The wiring: overspill's own calls go through the model layers, with the real window."""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
import pytest

from kernel.errors import ContextWindowExceeded
from kernel.store import DiskHistoryStore
from providers.fake import ScriptedProvider, json_response
from providers.ollama import OllamaWindows
from proxy.system import System, build_system
from tests.conftest import settings_from
from tests.fakes.ollama import FakeModel, FakeOllama

CONFIG = """
model_list:
  - model_name: local
    litellm_params: {model: ollama_chat/smollm2, api_base: "http://ollama.test"}
"""


@pytest.fixture
async def ollama() -> AsyncIterator[OllamaWindows]:
    """Window discovery against the fake Ollama: smollm2 loaded with 2048 tokens."""
    fake = FakeOllama([FakeModel(trained_ctx=8192, loaded_ctx=2048)], server_default=4096)
    client = httpx.AsyncClient(transport=httpx.ASGITransport(app=fake.app))
    yield OllamaWindows(client)
    await client.aclose()


def system(store: DiskHistoryStore, ollama: OllamaWindows, fake: ScriptedProvider) -> System:
    return build_system(
        settings_from(CONFIG), providers={"local": [fake]}, store=store, ollama=ollama
    )


async def test_an_extraction_call_to_ollama_carries_num_ctx(
    store: DiskHistoryStore, ollama: OllamaWindows
) -> None:
    """overspill's own call to an Ollama model is sent with the window Ollama runs with."""
    fake = ScriptedProvider([json_response("- notes")])
    call = system(store, ollama, fake).internal("local")
    result = await call([{"role": "user", "content": "condense this"}], max_tokens=64)
    assert result.text == "- notes"
    (sent,) = fake.requests
    assert sent.body["num_ctx"] == 2048
    assert sent.body["temperature"] == 0


async def test_an_extraction_prompt_ollama_would_cut_is_stopped_first(
    store: DiskHistoryStore, ollama: OllamaWindows
) -> None:
    """The pre-flight applies to overspill's own calls: nothing is sent that Ollama would cut."""
    fake = ScriptedProvider([json_response("- notes")])
    call = system(store, ollama, fake).internal("local")
    prompt = [{"role": "user", "content": "word " * 1500}]
    with pytest.raises(ContextWindowExceeded) as caught:
        await call(prompt, max_tokens=64)
    assert caught.value.limit == 2048
    assert fake.requests == []


async def test_the_conversation_layers_never_see_overspills_own_calls(
    store: DiskHistoryStore, ollama: OllamaWindows
) -> None:
    """An internal call is not spliced, recovered or given documents: only model layers act."""
    fake = ScriptedProvider([json_response("- notes")])
    built = system(store, ollama, fake)
    assert built.pipeline.names == (
        "documents", "history_splice", "overflow_recovery", "ollama_window",
    )  # fmt: skip
    messages = [{"role": "user", "content": f"turn {i}"} for i in range(30)]
    await built.internal("local")(messages, max_tokens=8)
    assert fake.requests[0].messages == tuple(messages)
