"""`anthropic/...` and `gemini/...` models through a real `overspill serve`, each before its
wire's mock (tests/mocks/anthropic.py, tests/mocks/gemini.py), with the real OpenAI SDK as
the client: JSON, a stream, the overflow error, a request only litellm writes."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass

import openai
import pytest

from tests.e2e.conftest import MASTER_KEY, Served, run_mock, serve

pytestmark = pytest.mark.e2e

TEXT = "".join(f"tok{i} " for i in range(20))


@dataclass(frozen=True)
class Wire:
    """One provider's mock and models: `model` answers, `overflow-model` always overflows,
    `quota-model` is always over a token quota."""

    mock: str
    provider: str
    model: str
    base: str
    key: str
    overflow: str
    """What the provider's overflow message says."""


WIRES = {
    "anthropic": Wire(
        "anthropic", "anthropic", "mock-model", "", "sk-mock", "prompt is too long"
    ),
    "gemini": Wire(
        "gemini", "gemini", "gemini-2.5-flash", "/v1beta", "AIza-mock",
        "exceeds the maximum number of tokens",
    ),
}  # fmt: skip


@pytest.fixture(scope="module", params=sorted(WIRES))
def wire(request: pytest.FixtureRequest) -> Wire:
    """Each wire in turn."""
    return WIRES[request.param]


@pytest.fixture(scope="module")
def served(wire: Wire, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    """overspill serve with three models of one wire on its mock."""
    with contextlib.contextmanager(run_mock)(wire.mock, tmp_path_factory) as mock:
        base = mock + wire.base
        models = {"chat": wire.model, "chat-full": "overflow-model", "chat-quota": "quota-model"}
        entries = "".join(
            f"  - model_name: {name}\n    litellm_params: {{model: {wire.provider}/{model}, "
            f'api_base: "{base}", api_key: {wire.key}}}\n'
            for name, model in models.items()
        )
        config = f"model_list:\n{entries}general_settings:\n  master_key: {MASTER_KEY}\n"
        yield from serve(config + "middleware: []\n", tmp_path_factory.mktemp("own"), mock)


def test_json_answer(served: Served) -> None:
    """A non-streaming answer arrives in OpenAI's shape, with the provider's usage mapped."""
    answer = served.client().chat.completions.create(
        model="chat",
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
        model="chat",
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


def test_overflow_error_body(served: Served, wire: Wire) -> None:
    """The provider's overflow 400 is OpenAI's context_length_exceeded, its message kept."""
    with pytest.raises(openai.BadRequestError) as caught:
        served.client().chat.completions.create(
            model="chat-full", messages=[{"role": "user", "content": "hi"}], max_tokens=20
        )
    assert caught.value.code == "context_length_exceeded"
    assert wire.overflow in caught.value.message


def test_token_quota_is_a_rate_limit(served: Served) -> None:
    """A 429 about input tokens (a per-minute limit, a quota) is a 429, never an overflow."""
    with pytest.raises(openai.RateLimitError) as caught:
        served.client().chat.completions.create(
            model="chat-quota", messages=[{"role": "user", "content": "hi"}], max_tokens=20
        )
    assert caught.value.code != "context_length_exceeded"


def test_request_only_litellm_writes_is_answered_too(served: Served) -> None:
    """A request with response_format (left to litellm's translation, imported by this first
    such request in the running process) is answered like the others."""
    answer = served.client().chat.completions.create(
        model="chat",
        messages=[{"role": "user", "content": "hi"}],
        max_tokens=20,
        response_format={"type": "json_object"},
    )
    assert answer.choices[0].message.content == TEXT
    assert answer.usage is not None
    assert answer.usage.prompt_tokens == 100
