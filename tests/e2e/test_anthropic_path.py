"""An `anthropic/...` model through a real `overspill serve`, before the Anthropic-wire mock
(scripts/mock_anthropic.py), with the real OpenAI SDK as the client: JSON, a stream, an error."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import openai
import pytest

from tests.e2e.conftest import MASTER_KEY, ROOT, Served, free_port, serve, stop

pytestmark = pytest.mark.e2e

TEXT = "".join(f"tok{i} " for i in range(20))


@pytest.fixture(scope="module")
def mock_anthropic(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The mock's base URL while it runs."""
    port = free_port()
    log = tmp_path_factory.mktemp("mock") / "mock.log"
    with log.open("wb") as sink:
        process = subprocess.Popen(
            [sys.executable, str(ROOT / "scripts" / "mock_anthropic.py"), "--port", str(port)],
            stdout=sink, stderr=subprocess.STDOUT,
        )  # fmt: skip
    try:
        _wait_listening(port, process, log)
        yield f"http://127.0.0.1:{port}"
    finally:
        stop(process)


def _wait_listening(port: int, process: subprocess.Popen[bytes], log: Path) -> None:
    """Poll the log until the mock says it listens (it prints once bound)."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"mock exited: {log.read_text()}")
        if "listening" in log.read_text():
            return
        time.sleep(0.05)  # polling a starting process, not a test sleep
    raise RuntimeError(f"mock not listening on {port}: {log.read_text()}")


@pytest.fixture(scope="module")
def served(mock_anthropic: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    """overspill serve with two `anthropic/` models on the mock (one always overflows)."""
    config = f"""
model_list:
  - model_name: claude
    litellm_params: {{model: anthropic/mock-model, api_base: "{mock_anthropic}", api_key: sk-mock}}
  - model_name: claude-full
    litellm_params: {{model: anthropic/overflow-model, api_base: "{mock_anthropic}", api_key: sk-mock}}
general_settings:
  master_key: {MASTER_KEY}
middleware: []
"""
    yield from serve(config, tmp_path_factory.mktemp("anthropic"), mock_anthropic)


def test_json_answer(served: Served) -> None:
    """A non-streaming answer arrives in OpenAI's shape, with Anthropic's usage mapped."""
    answer = served.client().chat.completions.create(
        model="claude",
        messages=[{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hi"}],
        max_tokens=20,
    )
    assert answer.choices[0].message.content == TEXT
    assert answer.choices[0].finish_reason == "stop"
    assert answer.usage is not None
    assert (answer.usage.prompt_tokens, answer.usage.completion_tokens) == (100, 20)


def test_streamed_answer(served: Served) -> None:
    """A streamed answer arrives as OpenAI chunks, whole, with usage when asked for."""
    stream = served.client().chat.completions.create(
        model="claude",
        messages=[{"role": "user", "content": "hi"}],
        max_tokens=20,
        stream=True,
        stream_options={"include_usage": True},
    )
    text, finish, usage = "", None, None
    for chunk in stream:
        if chunk.choices:
            text += chunk.choices[0].delta.content or ""
            finish = chunk.choices[0].finish_reason or finish
        if chunk.usage is not None:
            usage = chunk.usage
    assert text == TEXT
    assert finish == "stop"
    assert usage is not None
    assert usage.completion_tokens == 20


def test_overflow_error_body(served: Served) -> None:
    """Anthropic's "prompt is too long" 400 is OpenAI's context_length_exceeded."""
    with pytest.raises(openai.BadRequestError) as caught:
        served.client().chat.completions.create(
            model="claude-full", messages=[{"role": "user", "content": "hi"}], max_tokens=20
        )
    assert caught.value.code == "context_length_exceeded"
    assert "prompt is too long" in caught.value.message


def test_request_only_litellm_writes_is_answered_too(served: Served) -> None:
    """A request with response_format (left to litellm's translation, imported by this first
    such request in the running process) is answered like the others."""
    answer = served.client().chat.completions.create(
        model="claude",
        messages=[{"role": "user", "content": "hi"}],
        max_tokens=20,
        response_format={"type": "json_object"},
    )
    assert answer.choices[0].message.content == TEXT
    assert answer.usage is not None
    assert answer.usage.prompt_tokens == 100
