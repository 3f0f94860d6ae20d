"""The Responses API's response object, written from a whole chat completion."""

from __future__ import annotations

import re
from typing import Any

from proxy.surfaces import responses_wire as wire
from tests.proxy.surfaces.sdk import valid_response

BODY = {"model": "local", "input": "hi"}
CALL = {"id": "call_1", "type": "function", "function": {"name": "get", "arguments": '{"a":1}'}}
USAGE = {
    "prompt_tokens": 20,
    "completion_tokens": 7,
    "total_tokens": 27,
    "prompt_tokens_details": {"cached_tokens": 16},
    "completion_tokens_details": {"reasoning_tokens": 3},
}


def shell(body: dict[str, Any] | None = None) -> dict[str, Any]:
    return wire.response_shell(
        body or BODY, response_id="resp_1", created_at=1700000000, previous_response_id=None
    )


def completion(message: dict[str, Any], finish: str = "stop", **extra: Any) -> dict[str, Any]:
    choice = {"index": 0, "message": {"role": "assistant", **message}, "finish_reason": finish}
    return {"object": "chat.completion", "choices": [choice], "usage": USAGE, **extra}


def answer(message: dict[str, Any], finish: str = "stop", **extra: Any) -> dict[str, Any]:
    """from_chat's response, checked by the SDK's Response model."""
    response = wire.from_chat(completion(message, finish, **extra), shell())
    valid_response(response)
    return response


def test_ids_look_like_openais() -> None:
    """A prefix, an underscore and 48 hex digits, fresh each time, with or without the
    underscore given."""
    ids = {wire.new_id("resp"), wire.new_id("resp_"), wire.new_id("resp")}
    assert len(ids) == 3
    assert all(re.fullmatch(r"resp_[0-9a-f]{48}", found) for found in ids)


def test_the_shell_has_the_apis_defaults() -> None:
    """Before its output: status in_progress, the client's model name, and the API's default
    for every echo field the request left out."""
    found = shell()
    valid_response(found)
    assert found == {
        "id": "resp_1",
        "object": "response",
        "created_at": 1700000000,
        "status": "in_progress",
        "model": "local",
        "instructions": None,
        "max_output_tokens": None,
        "metadata": {},
        "parallel_tool_calls": True,
        "previous_response_id": None,
        "reasoning": {"effort": None, "summary": None},
        "store": True,
        "temperature": 1.0,
        "text": {"format": {"type": "text"}},
        "tool_choice": "auto",
        "tools": [],
        "top_p": 1.0,
        "truncation": "disabled",
        "user": None,
        "error": None,
        "incomplete_details": None,
        "output": [],
        "usage": None,
    }


def test_the_shell_echoes_the_request() -> None:
    """What the request set is echoed, and the chain's previous response id."""
    tool = {"type": "function", "name": "get", "parameters": {"type": "object"}}
    body = {
        "model": "local",
        "instructions": "be brief",
        "max_output_tokens": 50,
        "metadata": {"k": "v"},
        "parallel_tool_calls": False,
        "reasoning": {"effort": "low"},
        "store": False,
        "temperature": 0.5,
        "text": {"format": {"type": "json_object"}},
        "tool_choice": {"type": "function", "name": "get"},
        "tools": [tool],
        "top_p": 0.5,
        "truncation": "auto",
        "user": "u",
    }
    found = wire.response_shell(
        body, response_id="resp_2", created_at=1, previous_response_id="resp_1"
    )
    valid_response(found)
    assert found["previous_response_id"] == "resp_1"
    assert found["reasoning"] == {"effort": "low", "summary": None}
    assert {name: found[name] for name in body if name != "reasoning"} == {
        name: value for name, value in body.items() if name != "reasoning"
    }


def test_a_text_answer_is_one_completed_message() -> None:
    """The message's text is one output_text part with empty annotations; status completed."""
    response = answer({"content": "Hello."})
    assert response["status"] == "completed"
    assert response["incomplete_details"] is None
    [item] = response["output"]
    assert item["id"].startswith("msg_")
    assert {k: v for k, v in item.items() if k != "id"} == {
        "type": "message",
        "status": "completed",
        "role": "assistant",
        "content": [{"type": "output_text", "text": "Hello.", "annotations": [], "logprobs": []}],
    }
    assert valid_response(response).output_text == "Hello."


def test_usage_is_in_the_responses_apis_terms() -> None:
    """prompt → input tokens (cached from prompt_tokens_details), completion → output tokens
    (reasoning from completion_tokens_details), the total."""
    assert answer({"content": "x"})["usage"] == {
        "input_tokens": 20,
        "input_tokens_details": {"cached_tokens": 16, "cache_write_tokens": 0},
        "output_tokens": 7,
        "output_tokens_details": {"reasoning_tokens": 3},
        "total_tokens": 27,
    }


def test_usage_without_details_counts_zero() -> None:
    """A bare usage has zero cached and reasoning tokens and its own total."""
    response = wire.from_chat(
        {
            "choices": [{"message": {"content": "x"}}],
            "usage": {"prompt_tokens": 2, "completion_tokens": 1},
        },
        shell(),
    )
    assert response["usage"]["input_tokens_details"]["cached_tokens"] == 0
    assert response["usage"]["total_tokens"] == 3


def test_no_usage_is_none() -> None:
    """An answer without usage has usage None (the SDK allows it)."""
    response = wire.from_chat({"choices": [{"message": {"content": "x"}}]}, shell())
    assert valid_response(response).usage is None


def test_reasoning_comes_first_as_a_reasoning_item() -> None:
    """reasoning_content (or vLLM's and Ollama's `reasoning`) is a reasoning item before the
    message, its text as reasoning_text content."""
    for field in ("reasoning_content", "reasoning"):
        reasoning, message = answer({"content": "42", field: "Let me think."})["output"]
        assert reasoning["id"].startswith("rs_")
        assert reasoning["type"] == "reasoning"
        assert reasoning["summary"] == []
        assert reasoning["content"] == [{"type": "reasoning_text", "text": "Let me think."}]
        assert message["content"][0]["text"] == "42"


def test_tool_calls_are_function_call_items() -> None:
    """Each tool call is a function_call item with its call id, name and arguments; with no
    text there is no message item."""
    second = {**CALL, "id": "call_2", "function": {"name": "put", "arguments": "{}"}}
    response = answer({"content": None, "tool_calls": [CALL, second]}, "tool_calls")
    assert [item["type"] for item in response["output"]] == ["function_call", "function_call"]
    first = response["output"][0]
    assert first["id"].startswith("fc_")
    assert {k: v for k, v in first.items() if k != "id"} == {
        "type": "function_call",
        "status": "completed",
        "call_id": "call_1",
        "name": "get",
        "arguments": '{"a":1}',
    }


def test_text_with_tool_calls_is_a_message_then_the_calls() -> None:
    """Text said beside tool calls is a message item before them."""
    response = answer({"content": "Checking.", "tool_calls": [CALL]}, "tool_calls")
    assert [item["type"] for item in response["output"]] == ["message", "function_call"]


def test_a_length_stop_is_incomplete_for_max_output_tokens() -> None:
    """finish_reason length → status incomplete, reason max_output_tokens, the last item
    incomplete."""
    response = answer({"content": "The answer is"}, "length")
    assert response["status"] == "incomplete"
    assert response["incomplete_details"] == {"reason": "max_output_tokens"}
    assert response["output"][-1]["status"] == "incomplete"


def test_a_content_filter_stop_is_incomplete_for_content_filter() -> None:
    """finish_reason content_filter → status incomplete, reason content_filter."""
    response = answer({"content": ""}, "content_filter")
    assert response["incomplete_details"] == {"reason": "content_filter"}


def test_a_refusal_is_a_refusal_part() -> None:
    """The message's refusal is a refusal content part (no empty text beside it)."""
    [item] = answer({"content": None, "refusal": "I can't help with that."})["output"]
    assert item["content"] == [{"type": "refusal", "refusal": "I can't help with that."}]


def test_an_empty_answer_is_still_a_message() -> None:
    """No text and no calls: one message with empty text, so output is never empty."""
    [item] = answer({"content": None})["output"]
    assert item["content"][0]["text"] == ""


def test_text_parts_in_an_answer_are_joined() -> None:
    """An answer whose content is text parts (some servers) is their text."""
    parts = [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]
    assert valid_response(answer({"content": parts})).output_text == "ab"


def test_logprobs_are_kept_on_the_text() -> None:
    """The choice's token logprobs are the output_text's logprobs (bytes a list, always)."""
    logprobs = {
        "content": [
            {
                "token": "Hi",
                "logprob": -0.1,
                "bytes": [72, 105],
                "top_logprobs": [{"token": "Hi", "logprob": -0.1, "bytes": None}],
            }
        ]
    }
    message = {"role": "assistant", "content": "Hi"}
    chat = {"choices": [{"message": message, "finish_reason": "stop", "logprobs": logprobs}]}
    response = wire.from_chat(chat, shell())
    valid_response(response)
    assert response["output"][0]["content"][0]["logprobs"] == [
        {
            "token": "Hi",
            "bytes": [72, 105],
            "logprob": -0.1,
            "top_logprobs": [{"token": "Hi", "bytes": [], "logprob": -0.1}],
        }
    ]
