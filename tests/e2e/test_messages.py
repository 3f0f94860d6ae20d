"""Anthropic's Messages API through `overspill serve` against the real local model, read by the
real Anthropic SDK: translated through chat completions (`local`), and sent to llama-server's
own Messages API (`local-native`, `messages_api: native`)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import anthropic
import pytest

from tests.e2e.conftest import MASTER_KEY, Served

pytestmark = pytest.mark.e2e

MODELS = ["local", "local-native"]
WEATHER: Any = [
    {
        "name": "get_weather",
        "description": "The weather in a city",
        "input_schema": {
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
        },
    }
]


@pytest.fixture
def sdk(messaging: Served) -> Iterator[anthropic.Anthropic]:
    """The real Anthropic SDK pointed at overspill (no retries), closed after the test."""
    client = anthropic.Anthropic(
        base_url=messaging.base_url, api_key=MASTER_KEY, max_retries=0, timeout=600
    )
    yield client
    client.close()


@pytest.mark.parametrize("model", MODELS)
def test_a_message_and_its_stream(sdk: anthropic.Anthropic, model: str) -> None:
    """messages.create answers with text and usage; messages.stream's deltas add up to the
    final message's text."""
    message = sdk.messages.create(
        model=model,
        max_tokens=8,
        system="Answer in one word.",
        extra_body={"temperature": 0},
        messages=[{"role": "user", "content": "What is the capital of France?"}],
    )
    assert message.content
    assert message.content[0].type == "text"
    assert message.stop_reason in ("end_turn", "max_tokens")
    assert 0 < message.usage.input_tokens + (message.usage.cache_read_input_tokens or 0) < 200
    with sdk.messages.stream(
        model=model,
        max_tokens=8,
        extra_body={"temperature": 0},
        messages=[{"role": "user", "content": "Count to five."}],
    ) as stream:
        texts = list(stream.text_stream)
        final = stream.get_final_message()
    assert texts
    assert final.content[0].type == "text"
    assert final.content[0].text == "".join(texts)
    assert final.usage.output_tokens <= 8


@pytest.mark.parametrize("model", MODELS)
def test_a_tool_result_reaches_the_model(sdk: anthropic.Anthropic, model: str) -> None:
    """A tool_use and its tool_result sent back reach the model as one tool exchange."""
    messages: Any = [
        {"role": "user", "content": "What is the weather in Paris?"},
        {
            "role": "assistant",
            "content": [
                {
                    "type": "tool_use",
                    "id": "toolu_1",
                    "name": "get_weather",
                    "input": {"city": "Paris"},
                }
            ],
        },
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "toolu_1", "content": "Sunny, 22 C"}
            ],
        },
    ]
    message = sdk.messages.create(
        model=model, max_tokens=12, tools=WEATHER, messages=messages, extra_body={"temperature": 0}
    )
    assert message.stop_reason in ("end_turn", "max_tokens", "tool_use")
    assert message.usage.input_tokens + (message.usage.cache_read_input_tokens or 0) > 20


@pytest.mark.parametrize("model", MODELS)
def test_count_tokens(sdk: anthropic.Anthropic, model: str) -> None:
    """count_tokens answers a count (the server's own on the native road, overspill's
    calibrated estimate otherwise) that grows with the prompt."""
    short = sdk.messages.count_tokens(model=model, messages=[{"role": "user", "content": "Hi"}])
    long = sdk.messages.count_tokens(
        model=model, messages=[{"role": "user", "content": "Hi there " * 50}]
    )
    assert 0 < short.input_tokens < long.input_tokens


def test_the_models_list_reads_whole_in_anthropics_sdk(sdk: anthropic.Anthropic) -> None:
    """models.list and models.retrieve give Anthropic's fields: type, display name, creation
    time, the window as max_input_tokens; the page says it is the only one."""
    page = sdk.models.list()
    assert page.has_more is False
    local = next(model for model in page.data if model.id == "local")
    assert (local.type, local.display_name) == ("model", "local")
    assert local.created_at.year >= 2025
    assert local.max_input_tokens is not None
    assert local.max_input_tokens > 0
    assert sdk.models.retrieve("local").max_input_tokens == local.max_input_tokens


def test_the_models_list_pages_in_anthropics_sdk(sdk: anthropic.Anthropic) -> None:
    """models.list(limit=1) is a page of one saying whether more follow, and the SDK's
    auto-pagination (after_id = the last id) walks every model once, in the listing's order."""
    every = [model.id for model in sdk.models.list().data]
    first = sdk.models.list(limit=1)
    assert [model.id for model in first.data] == every[:1]
    assert first.has_more is (len(every) > 1)
    assert [model.id for model in sdk.models.list(limit=1)] == every


def test_claude_model_names_reach_the_local_model(sdk: anthropic.Anthropic) -> None:
    """A Claude model name is served by the `claude-*` deployment."""
    message = sdk.messages.create(
        model="claude-haiku-4-5", max_tokens=4, messages=[{"role": "user", "content": "Hi"}]
    )
    assert message.model == "claude-haiku-4-5"


def test_bad_input_is_an_anthropic_400(sdk: anthropic.Anthropic) -> None:
    """A tool_result without its tool_use is refused in Anthropic's shape."""
    with pytest.raises(anthropic.BadRequestError) as caught:
        sdk.messages.create(
            model="local",
            max_tokens=4,
            messages=[
                {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_x"}]}
            ],
        )
    assert caught.value.body["error"]["type"] == "invalid_request_error"  # type: ignore[index]
    assert "toolu_x" in caught.value.message


def test_a_system_prompt_over_the_window_is_prompt_too_long(sdk: anthropic.Anthropic) -> None:
    """A system prompt the 2048-token window cannot hold is never cut: Anthropic's
    `prompt is too long` 400, naming the system prompt's size."""
    with pytest.raises(anthropic.BadRequestError) as caught:
        sdk.messages.create(
            model="local",
            max_tokens=8,
            system="apples " * 2500,
            messages=[{"role": "user", "content": "hi"}],
        )
    assert caught.value.message.find("prompt is too long:") >= 0
    assert "system prompt (" in caught.value.message
