"""The Responses API through `overspill serve` against the real local model, read by the real
OpenAI SDK: translated through chat completions (`local`), and sent to llama-server's own
Responses API (`local-native`, `responses_api: native`)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import openai
import pytest

from tests.e2e.conftest import MASTER_KEY, WINDOW, Served, serve

pytestmark = pytest.mark.e2e

MODELS = ["local", "local-native"]


def responses_config(llama_server: str) -> str:
    """The default layers before the real llama-server, by both roads."""
    return f"""
model_list:
  - model_name: local
    litellm_params: {{model: openai/smollm2-135m, api_base: {llama_server}, timeout: 300}}
    context: {{window: {WINDOW}}}
  - model_name: local-native
    litellm_params: {{model: openai/smollm2-135m, api_base: {llama_server}, timeout: 300}}
    responses_api: native
    context: {{window: {WINDOW}}}
general_settings:
  master_key: {MASTER_KEY}
  max_body_bytes: 400000
  store: {{path: store}}
"""


@pytest.fixture(scope="module")
def responding(llama_server: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    """overspill serve with its default layers and both roads to the Responses API."""
    yield from serve(
        responses_config(llama_server), tmp_path_factory.mktemp("responses"), llama_server
    )


@pytest.mark.parametrize("model", MODELS)
def test_a_response_and_its_continuation(responding: Served, model: str) -> None:
    """responses.create answers; a second turn by previous_response_id sees the first."""
    client = responding.client()
    first = client.responses.create(
        model=model,
        input="What is the capital of France?",
        instructions="Answer in one word.",
        max_output_tokens=8,
        temperature=0,
    )
    assert first.status in ("completed", "incomplete")
    assert first.output_text
    assert first.usage is not None
    assert 0 < first.usage.input_tokens < 200
    second = client.responses.create(
        model=model,
        input="And of Spain?",
        previous_response_id=first.id,
        max_output_tokens=8,
        temperature=0,
    )
    assert second.output_text
    assert second.usage is not None
    assert second.usage.input_tokens > first.usage.input_tokens  # the first turn came along
    assert client.responses.retrieve(second.id).output_text == second.output_text


@pytest.mark.parametrize("model", MODELS)
def test_a_streamed_response(responding: Served, model: str) -> None:
    """The SDK's stream helper assembles the deltas into the completed response."""
    client = responding.client()
    deltas: list[str] = []
    with client.responses.stream(
        model=model, input="Count to five.", max_output_tokens=12, temperature=0
    ) as stream:
        for event in stream:
            if event.type == "response.output_text.delta":
                deltas.append(event.delta)
        final = stream.get_final_response()
    assert deltas
    assert final.output_text == "".join(deltas)
    assert final.usage is not None
    assert final.usage.output_tokens <= 12


def test_a_function_call_output_reaches_the_model(responding: Served) -> None:
    """A function call and its output sent as items reach the model as a tool exchange."""
    client = responding.client()
    items: Any = [
        {"role": "user", "content": "What is the weather in Paris?"},
        {
            "type": "function_call",
            "call_id": "call_1",
            "name": "get_weather",
            "arguments": '{"city":"Paris"}',
        },
        {"type": "function_call_output", "call_id": "call_1", "output": "Sunny, 22 C"},
    ]
    tools: Any = [
        {
            "type": "function",
            "name": "get_weather",
            "description": "The weather in a city",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string"}},
                "required": ["city"],
            },
        }
    ]
    answer = client.responses.create(
        model="local", input=items, tools=tools, max_output_tokens=16, temperature=0
    )
    assert answer.status in ("completed", "incomplete")
    assert answer.usage is not None
    assert answer.usage.input_tokens > 20


def test_bad_input_is_a_clear_400(responding: Served) -> None:
    """Malformed items are refused in OpenAI's shape with the field's path."""
    client = responding.client()
    with pytest.raises(openai.BadRequestError) as caught:
        client.responses.create(model="local", input=[{"type": "message", "role": "robot"}])  # type: ignore[list-item]
    assert caught.value.param is not None
    assert caught.value.param.startswith("input[0]")


def test_an_unknown_previous_response_is_not_found(responding: Served) -> None:
    """A previous_response_id nobody stored is a 404."""
    with pytest.raises(openai.NotFoundError):
        responding.client().responses.create(
            model="local", input="hi", previous_response_id="resp_doesnotexist"
        )


def test_a_prompt_over_the_window_is_context_length_exceeded(responding: Served) -> None:
    """One message over the whole window cannot be helped: 400 context_length_exceeded."""
    with pytest.raises(openai.BadRequestError) as caught:
        responding.client().responses.create(
            model="local", input="tell me about apples " * 1200, max_output_tokens=8
        )
    assert caught.value.code == "context_length_exceeded"
