"""The wiring: overspill's own calls go through the model layers, with the real window."""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
import pytest

from kernel.errors import ContextWindowExceeded, UpstreamError
from kernel.store import DiskHistoryStore
from kernel.types import ChatRequest
from providers.fake import ScriptedProvider, json_response
from providers.ollama import OllamaWindows
from proxy.system import System, build_system
from tests.conftest import sample, settings_from
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
        "documents", "observation_masking", "history_splice", "overflow_recovery",
        "ollama_window",
    )  # fmt: skip
    messages = [{"role": "user", "content": f"turn {i}"} for i in range(30)]
    await built.internal("local")(messages, max_tokens=8)
    assert fake.requests[0].messages == tuple(messages)


WARM_CONFIG = """
model_list:
  - model_name: local
    litellm_params: {model: openai/local, api_base: "http://127.0.0.1:8080/v1"}
  - model_name: cloud
    litellm_params: {model: openai/gpt-4o, api_key: sk-test}
  - model_name: forced
    litellm_params: {model: openai/gpt-4o, api_key: sk-test}
    context: {warm_cache: true}
  - model_name: never
    litellm_params: {model: openai/local, api_base: "http://127.0.0.1:8080/v1"}
    context: {warm_cache: false}
"""


def warm_system(store: DiskHistoryStore, fakes: dict[str, ScriptedProvider]) -> System:
    providers = {name: [fake] for name, fake in fakes.items()}
    return build_system(settings_from(WARM_CONFIG), providers=providers, store=store)


def primer(stream: bool = True) -> ChatRequest:
    """A client's streamed request with tools, as a growth would warm it."""
    body = {
        "model": "local",
        "messages": [{"role": "user", "content": "hi"}],
        "stream": stream,
        "stream_options": {"include_usage": True},
        "max_completion_tokens": 500,
        "n": 2,
        "tools": [{"type": "function", "function": {"name": "f", "parameters": {}}}],
        "tool_choice": "required",
        "temperature": 0.3,
    }
    return ChatRequest("local", ({"role": "user", "content": "hi"},), stream, body)


async def test_a_warm_up_sends_the_prompt_for_one_token(store: DiskHistoryStore) -> None:
    """A warm-up keeps what shapes the prompt (tools, sampling) and asks for one token, once,
    not streamed."""
    fake = ScriptedProvider([json_response("x")])
    built = warm_system(store, {"local": fake})
    warmed = sample("overspill_cache_warmups_total", model="local", result="warmed")
    assert await built.internal.warm(primer(), built.entries["local"]) == "warmed"
    (sent,) = fake.requests
    assert not sent.stream
    assert sent.body["max_tokens"] == 1
    for gone in ("stream", "stream_options", "max_completion_tokens", "n", "tool_choice"):
        assert gone not in sent.body
    assert sent.body["tools"] == primer().body["tools"]
    assert sent.body["temperature"] == 0.3
    assert sample("overspill_cache_warmups_total", model="local", result="warmed") == warmed + 1


async def test_warm_ups_follow_context_warm_cache(store: DiskHistoryStore) -> None:
    """`auto` warms a self-hosted model only; `true` and `false` decide for any model."""
    fakes = {name: ScriptedProvider([json_response("x")]) for name in ("cloud", "forced", "never")}
    built = warm_system(store, fakes)
    results = {name: await built.internal.warm(primer(), built.entries[name]) for name in fakes}
    assert results == {"cloud": "skipped", "forced": "warmed", "never": "skipped"}
    assert [len(fake.requests) for fake in fakes.values()] == [0, 1, 0]


async def test_a_failed_warm_up_is_counted_not_raised(store: DiskHistoryStore) -> None:
    """An upstream error while warming is logged and counted; the growth it follows stands."""
    fake = ScriptedProvider([UpstreamError("the model is loading", provider="openai")])
    built = warm_system(store, {"local": fake})
    failed = sample("overspill_cache_warmups_total", model="local", result="failed")
    assert await built.internal.warm(primer(), built.entries["local"]) == "failed"
    assert sample("overspill_cache_warmups_total", model="local", result="failed") == failed + 1
