"""Ollama end to end: `overspill serve` → the fake Ollama (its real `/api/chat` behaviour,
silent truncation included) → the real llama-server with SmolLM2, through the OpenAI SDK.

The fake runs in this process under uvicorn on a loopback port, in forwarding mode: it counts
with llama-server's `/tokenize`, truncates like Ollama, and generates with the real model. It
starts with smollm2 loaded at 2048 tokens (what `/api/ps` reports) and a server default of 2048,
the window llama-server runs with.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from openai.types.chat import ChatCompletionMessageParam

from tests.e2e.conftest import MASTER_KEY, WINDOW, Served, serve
from tests.e2e.test_overflow_recovery import conversation
from tests.fakes.ollama import FakeModel, FakeOllama, serve_in_thread

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="session")
def fake_ollama(llama_server: str) -> Iterator[str]:
    """The fake Ollama in front of the real llama-server; yields its root URL."""
    model = FakeModel("smollm2:latest", trained_ctx=8192, loaded_ctx=WINDOW)
    fake = FakeOllama([model], server_default=WINDOW, forward=llama_server.removesuffix("/v1"))
    with serve_in_thread(fake) as url:
        yield url


def on_the_fake(fake_ollama: str, extra: str) -> str:
    """A config whose model `local` is smollm2 on the fake Ollama, plus `extra` top-level YAML."""
    return f"""
model_list:
  - model_name: local
    litellm_params:
      model: ollama_chat/smollm2
      api_base: {fake_ollama}
      timeout: 120
    ollama:
      max_num_ctx: {WINDOW}
general_settings:
  master_key: {MASTER_KEY}
  max_body_bytes: 200000
  store: {{path: store}}
{extra}"""


@pytest.fixture(scope="session")
def behind_ollama(fake_ollama: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    """overspill serve with its default layers (no middleware key) and `local` on the fake."""
    config = on_the_fake(fake_ollama, "")
    yield from serve(config, tmp_path_factory.mktemp("ollama"), fake_ollama)


@pytest.fixture(scope="session")
def no_preflight(fake_ollama: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    """overspill serve with only `overflow_recovery`: no `ollama_window` pre-flight at all."""
    config = on_the_fake(fake_ollama, "middleware: [overflow_recovery]\n")
    yield from serve(config, tmp_path_factory.mktemp("no-preflight"), fake_ollama)


def stats(served: Served) -> dict[str, Any]:
    """The fake Ollama's record of what it received and whether it truncated."""
    answer = httpx.get(served.upstream + "/_fake/stats", timeout=10)
    answer.raise_for_status()
    result: dict[str, Any] = answer.json()
    return result


def ask_thirty_turns_in(served: Served, conversation_id: str) -> tuple[int, httpx.Headers]:
    """A 30-turn conversation (past the window) and its question; the status and headers."""
    question: ChatCompletionMessageParam = {"role": "user", "content": "What is the vault code?"}
    raw = served.client().chat.completions.with_raw_response.create(
        model="local",
        messages=[*conversation(30), question],
        max_tokens=16,
        temperature=0,
        extra_headers={"X-Conversation-Id": conversation_id},
    )
    return raw.status_code, raw.headers


def test_num_ctx_reaches_ollama_options_and_headers_report_it(behind_ollama: Served) -> None:
    """A short chat reaches /api/chat with options.num_ctx from /api/ps; headers say so."""
    before = stats(behind_ollama)["chats"]
    raw = behind_ollama.client().chat.completions.with_raw_response.create(
        model="local",
        messages=[{"role": "user", "content": "What is the capital of France?"}],
        max_tokens=8,
        temperature=0,
    )
    completion = raw.parse()
    assert raw.status_code == 200
    assert completion.choices[0].message.content
    assert raw.headers["x-overspill-num-ctx"] == str(WINDOW)
    assert raw.headers["x-overspill-num-ctx-source"] == "ps"
    assert int(raw.headers["x-overspill-tokens-available"]) == WINDOW * 3 // 4 - 512
    assert 0 < int(raw.headers["x-overspill-tokens-used"]) < 100
    seen = stats(behind_ollama)
    assert seen["counting"] == "llama-server /tokenize"
    request = seen["requests"][before]
    assert request["options"]["num_ctx"] == WINDOW
    assert request["options"]["num_predict"] == 8
    assert request["truncate"] is False
    assert completion.usage is not None
    assert completion.usage.prompt_tokens == request["prompt_eval_count"]


def test_a_long_conversation_is_condensed_never_silently_truncated(behind_ollama: Served) -> None:
    """A conversation over the discovered window is condensed by overspill before it is sent
    (the window is known, so no call is refused); Ollama never drops a message on its own."""
    before = stats(behind_ollama)["chats"]
    status, headers = ask_thirty_turns_in(behind_ollama, "e2e-ollama")
    assert status == 200
    # condensed visibly: extracted, or (when the 135M model answers the extraction with nothing)
    # cut in the middle with a marker; never cut by Ollama
    assert headers["x-overspill-action"] in ("spliced+extracted", "truncated")
    assert headers["x-overspill-strategy"] in ("extract", "middle_cut")
    assert headers["x-overspill-num-ctx"] == str(WINDOW)
    assert int(headers["x-overspill-tokens-used"]) <= int(headers["x-overspill-tokens-available"])
    assert "x-overspill-warning" not in headers
    seen = stats(behind_ollama)
    chats = seen["requests"][before:]
    assert len(chats) >= 2  # at least one extraction call and the condensed request
    assert seen["truncated"] == 0
    assert all(c["dropped_messages"] == 0 and not c["shifted"] for c in chats)
    assert all(c["prompt_tokens"] <= c["num_ctx"] for c in chats)
    assert chats[-1]["options"]["num_ctx"] == WINDOW


def test_streams_carry_num_ctx_too(behind_ollama: Served) -> None:
    """A streamed answer arrives through NDJSON → SSE with num_ctx sent and reported."""
    before = stats(behind_ollama)["chats"]
    with behind_ollama.client().chat.completions.with_streaming_response.create(
        model="local",
        messages=[{"role": "user", "content": "Say hello."}],
        max_tokens=8,
        temperature=0,
        stream=True,
    ) as response:
        assert response.headers["x-overspill-num-ctx"] == str(WINDOW)
        text = "".join(
            chunk.choices[0].delta.content or "" for chunk in response.parse() if chunk.choices
        )
    assert text
    request = stats(behind_ollama)["requests"][before]
    assert request["stream"] is True
    assert request["options"]["num_ctx"] == WINDOW


def test_without_the_preflight_ollama_refuses_and_overspill_recovers(no_preflight: Served) -> None:
    """With no pre-flight, `truncate: false` turns Ollama's silent cut into a 400 that
    overflow_recovery detects and condenses: the answer is 200 and no message was dropped."""
    before = stats(no_preflight)["chats"]
    status, headers = ask_thirty_turns_in(no_preflight, "e2e-ollama-no-preflight")
    assert status == 200
    assert headers["x-overspill-action"] == "extracted"
    chats = stats(no_preflight)["requests"][before:]
    assert chats[0]["status"] == 400  # the refused original: Ollama said so instead of cutting
    assert all(c["truncate"] is False for c in chats)
    assert all(c["dropped_messages"] == 0 and not c["shifted"] for c in chats)
    assert chats[-1]["status"] == 200


def test_a_health_check_asks_ollama_with_the_window_it_runs(behind_ollama: Served) -> None:
    """`GET /health` asks the Ollama deployment for one token with the num_ctx it runs with,
    so the check never makes Ollama reload the model at another window."""
    before = stats(behind_ollama)["chats"]
    answer = behind_ollama.health()
    assert answer.status_code == 200
    (healthy,) = answer.json()["healthy_endpoints"]
    assert (healthy["model_name"], healthy["api_base"]) == ("local", behind_ollama.upstream)
    asked = stats(behind_ollama)["requests"][before:]  # background work may ask too
    assert [r["options"]["num_predict"] for r in asked].count(1) >= 1
    assert {r["options"].get("num_ctx") for r in asked} == {WINDOW}
