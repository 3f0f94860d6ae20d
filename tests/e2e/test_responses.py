"""The Responses API through `overspill serve` against the real local model, read by the real
OpenAI SDK: translated through chat completions (`local`), and sent to llama-server's own
Responses API (`local-native`, `responses_api: native`)."""

from __future__ import annotations

from typing import Any

import openai
import pytest

from tests.e2e.conftest import Served

pytestmark = pytest.mark.e2e

MODELS = ["local", "local-native"]


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
    """The streamed deltas add up to the text of the response its last event carries
    (`response.incomplete` when max_output_tokens cut it, as OpenAI's API ends it)."""
    client = responding.client()
    events = list(
        client.responses.create(
            model=model, input="Count to five.", max_output_tokens=12, temperature=0, stream=True
        )
    )
    deltas = [e.delta for e in events if e.type == "response.output_text.delta"]
    last = events[-1]
    assert last.type in ("response.completed", "response.incomplete")
    assert events[0].type == "response.created"
    assert deltas
    assert last.response.output_text == "".join(deltas)
    assert last.response.usage is not None
    assert last.response.usage.output_tokens <= 12
    if model == "local":  # llama-server's own stream does not number its events
        assert [e.sequence_number for e in events] == list(range(len(events)))


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


def test_instructions_over_the_window_are_context_length_exceeded(responding: Served) -> None:
    """Instructions are never condensed: when they alone outgrow the window nothing can be
    done, and the answer is 400 context_length_exceeded."""
    with pytest.raises(openai.BadRequestError) as caught:
        responding.client().responses.create(
            model="local", instructions="apples " * 2500, input="hi", max_output_tokens=8
        )
    assert caught.value.code == "context_length_exceeded"
