"""Anthropic's Messages API written by overspill: requests, answers and stream events."""

from __future__ import annotations

import contextlib
from typing import Any

import httpx
import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kernel.errors import InvalidChatRequest
from providers import anthropic_wire as wire
from providers.translated import TranslatedProvider, build_provider
from providers.transport import HttpxUpstream
from proxy.http import parse_chat_request
from tests.conftest import settings_from
from tests.providers.fuzzing import JsonShapes
from tests.reliability import examples

MODEL = "claude-sonnet-4-5"
CALL = {"id": "call_1", "type": "function", "function": {"name": "get", "arguments": '{"a": 1}'}}
TOOL = {
    "type": "function",
    "function": {
        "name": "get",
        "description": "d",
        "parameters": {"type": "object", "properties": {"a": {"type": "integer"}}},
    },
}
PNG = "data:image/png;base64,iVBORw0KGgo="

CHATS: list[dict[str, Any]] = [
    {"messages": [{"role": "user", "content": "hi"}]},
    {
        "messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hi"}],
        "max_tokens": 5,
        "temperature": 0.2,
        "top_p": 0.9,
    },
    {
        "messages": [
            {
                "role": "system",
                "content": [{"type": "text", "text": "S", "cache_control": {"type": "ephemeral"}}],
            },
            {"role": "user", "content": "hi"},
        ]
    },
    {
        "messages": [{"role": "user", "content": "hi"}],
        "stop": "END",
        "user": "u1",
        "max_completion_tokens": 7,
    },
    {"messages": [{"role": "user", "content": "hi"}], "stop": ["a", "b"], "top_k": 3},
    {
        "messages": [
            {"role": "user", "content": "weather?"},
            {"role": "assistant", "content": None, "tool_calls": [CALL, {**CALL, "id": "call_2"}]},
            {"role": "tool", "tool_call_id": "call_1", "content": "sunny"},
            {
                "role": "tool",
                "tool_call_id": "call_2",
                "content": [{"type": "text", "text": "rain"}],
            },
            {"role": "user", "content": "and now?"},
            {"role": "assistant", "content": "Let me check.", "tool_calls": [CALL]},
            {"role": "tool", "tool_call_id": "call_1", "content": "snow"},
        ],
        "tools": [TOOL],
    },
    {
        "messages": [{"role": "user", "content": "hi"}],
        "tools": [TOOL],
        "tool_choice": "required",
        "parallel_tool_calls": False,
    },
    {
        "messages": [{"role": "user", "content": "hi"}],
        "tools": [TOOL],
        "tool_choice": {"type": "function", "function": {"name": "get"}},
    },
    {"messages": [{"role": "user", "content": "hi"}], "tools": [TOOL], "tool_choice": "none"},
    {"messages": [{"role": "user", "content": "hi"}], "tools": [TOOL], "tool_choice": "auto"},
    {
        "messages": [
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "look"},
                    {"type": "image_url", "image_url": {"url": PNG}},
                    {"type": "image_url", "image_url": "https://x.test/a.jpg"},
                ],
            }
        ]
    },
    {
        "messages": [
            {"role": "user", "content": "a"},
            {"role": "user", "content": "b"},
            {"role": "assistant", "content": "c"},
            {"role": "user", "content": "d"},
        ],
        "stream": True,
    },
]


def litellm_body(chat: dict[str, Any]) -> dict[str, Any]:
    """What litellm's Anthropic translation sends for the chat request."""
    config = "model_list:\n  - model_name: c\n    litellm_params: {model: anthropic/claude-sonnet-4-5, api_key: k}\n"
    provider = build_provider(
        settings_from(config).model_list[0], HttpxUpstream(httpx.AsyncClient())
    )
    assert isinstance(provider, TranslatedProvider)
    written = provider.translation.write(parse_chat_request(orjson.dumps({"model": "c", **chat})))
    sent: dict[str, Any] = orjson.loads(written.body)
    for tool in sent.get("tools", []):
        tool.pop("type", None)  # litellm adds "custom", the default for a client tool
    return sent


def own_body(chat: dict[str, Any], drop_params: bool = False) -> dict[str, Any]:
    request = parse_chat_request(orjson.dumps({"model": "c", **chat}))
    return wire.request_body(
        request.body, request.messages, MODEL, max_tokens=64000, drop_params=drop_params
    )


@pytest.mark.parametrize("chat", CHATS, ids=range(len(CHATS)))
def test_request_is_written_as_litellm_writes_it(chat: dict[str, Any]) -> None:
    """For the requests chat clients send, the Messages body equals litellm's."""
    assert own_body(chat) == litellm_body(chat)


def test_empty_assistant_text_is_left_out_not_invented() -> None:
    """An assistant turn with "" and tool calls sends only the tool_use block (litellm puts
    a made-up sentence there)."""
    chat = {
        "messages": [
            {"role": "user", "content": "x"},
            {"role": "assistant", "content": "", "tool_calls": [CALL]},
        ]
    }
    assert own_body(chat)["messages"][1]["content"] == [
        {"type": "tool_use", "id": "call_1", "name": "get", "input": {"a": 1}}
    ]


def test_developer_messages_are_system_text() -> None:
    """OpenAI's developer role is system text (litellm refuses it)."""
    chat = {
        "messages": [{"role": "developer", "content": "dev"}, {"role": "user", "content": "hi"}]
    }
    body = own_body(chat)
    assert body["system"] == [{"type": "text", "text": "dev"}]
    assert [m["role"] for m in body["messages"]] == ["user"]


def test_message_cache_control_goes_on_its_last_block() -> None:
    """A message's own cache_control marks its last content block, where Anthropic reads it."""
    control = {"type": "ephemeral"}
    chat = {
        "messages": [
            {
                "role": "user",
                "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}],
                "cache_control": control,
            }
        ]
    }
    blocks = own_body(chat)["messages"][0]["content"]
    assert blocks == [
        {"type": "text", "text": "a"},
        {"type": "text", "text": "b", "cache_control": control},
    ]


@pytest.mark.parametrize(
    ("chat", "reason"),
    [
        ({"response_format": {"type": "json_object"}}, "response_format"),
        ({"reasoning_effort": "low"}, "reasoning_effort"),
        (
            {
                "messages": [
                    {"role": "user", "content": [{"type": "file", "file": {"file_data": "x"}}]}
                ]
            },
            "type 'file'",
        ),
        ({"tools": [{"type": "web_search_20250305", "name": "web_search"}]}, "tools[0]"),
        (
            {
                "messages": [
                    {"role": "assistant", "content": "x", "thinking_blocks": [{"type": "thinking"}]}
                ]
            },
            "thinking_blocks",
        ),
        ({"messages": [{"role": "function", "name": "f", "content": "x"}]}, "role 'function'"),
    ],
)
def test_what_litellm_alone_writes_is_left_to_it(chat: dict[str, Any], reason: str) -> None:
    """Documents, thinking, JSON mode, server tools and legacy roles go to litellm's translation,
    said before translating, with what of the request is litellm's."""
    base: dict[str, Any] = {"messages": [{"role": "user", "content": "hi"}]}
    request = parse_chat_request(orjson.dumps({"model": "c", **base, **chat}))
    why = wire.leaves(request.body, request.messages, drop_params=False)
    assert why is not None
    assert reason in why


@pytest.mark.parametrize(
    ("chat", "where"),
    [
        (
            {
                "messages": [
                    {
                        "role": "user",
                        "content": [{"type": "image_url", "image_url": {"url": "ftp://x"}}],
                    }
                ]
            },
            "messages[0].content[0].image_url.url",
        ),
        (
            {
                "messages": [
                    {
                        "role": "user",
                        "content": [
                            {"type": "image_url", "image_url": {"url": "data:image/png,abc"}}
                        ],
                    }
                ]
            },
            "data:<media type>;base64",
        ),
        (
            {"messages": [{"role": "user", "content": "x"}, {"role": "tool", "content": "r"}]},
            "messages[1].tool_call_id",
        ),
    ],
)
def test_malformed_request_names_what_to_fix(chat: dict[str, Any], where: str) -> None:
    """A message, tool or parameter in the wrong shape is a 400 that says where."""
    with pytest.raises(InvalidChatRequest) as caught:
        wire.request_body(chat, chat["messages"], MODEL, max_tokens=10, drop_params=False)
    assert where in caught.value.message


def test_unsupported_parameters_are_named_or_dropped() -> None:
    """n and seed are refused naming both; with drop_params they are left out."""
    chat = {"messages": [{"role": "user", "content": "hi"}], "n": 2, "seed": 1}
    with pytest.raises(wire.UnsupportedParameter, match="n, seed") as caught:
        own_body(chat)
    assert caught.value.param == "n"
    assert "n" not in own_body(chat, drop_params=True)


def test_null_parameters_are_absent() -> None:
    """A null response_format or logit_bias is absent, as litellm reads it: no fallback, no
    refusal, nothing sent."""
    chat = {"messages": [{"role": "user", "content": "hi"}]}
    assert own_body({**chat, "response_format": None, "logit_bias": None}) == own_body(chat)


def test_max_tokens_defaults_to_the_given_value_and_nulls_are_defaults() -> None:
    """No max_tokens (or null ones) sends the deployment's default; null temperature is unset."""
    body = wire.request_body(
        {"max_tokens": None, "temperature": None},
        [{"role": "user", "content": "x"}],
        MODEL,
        max_tokens=321,
        drop_params=False,
    )
    assert body["max_tokens"] == 321
    assert "temperature" not in body


ANSWER: dict[str, Any] = {
    "id": "msg_1",
    "type": "message",
    "role": "assistant",
    "model": MODEL,
    "content": [
        {"type": "thinking", "thinking": "hmm", "signature": "sig"},
        {"type": "text", "text": "Let me."},
        {"type": "tool_use", "id": "toolu_1", "name": "get", "input": {"a": 1}},
    ],
    "stop_reason": "tool_use",
    "stop_sequence": None,
    "usage": {
        "input_tokens": 12,
        "output_tokens": 3,
        "cache_creation_input_tokens": 5,
        "cache_read_input_tokens": 7,
    },
}


def test_answer_is_a_chat_completion_with_tool_calls_and_usage() -> None:
    """Text, tool calls, reasoning and usage (cached tokens counted in prompt_tokens)."""
    out = wire.answer(ANSWER, created=1)
    message = out["choices"][0]["message"]
    assert message["content"] == "Let me."
    assert message["reasoning_content"] == "hmm"
    assert message["tool_calls"] == [
        {"id": "toolu_1", "type": "function", "function": {"name": "get", "arguments": '{"a":1}'}}
    ]
    assert out["choices"][0]["finish_reason"] == "tool_calls"
    assert out["usage"]["prompt_tokens"] == 24
    assert out["usage"]["total_tokens"] == 27
    assert out["usage"]["prompt_tokens_details"] == {"cached_tokens": 7, "cache_creation_tokens": 5}
    assert (out["id"], out["model"], out["object"]) == ("msg_1", MODEL, "chat.completion")


@pytest.mark.parametrize(
    ("reason", "finish"),
    [
        ("end_turn", "stop"),
        ("stop_sequence", "stop"),
        ("max_tokens", "length"),
        ("model_context_window_exceeded", "length"),
        ("refusal", "content_filter"),
        ("pause_turn", "stop"),
        ("something_new", "stop"),
    ],
)
def test_stop_reasons_become_finish_reasons(reason: str, finish: str) -> None:
    """Each stop_reason maps to OpenAI's finish_reason; a cut by the window is `length`."""
    answer = {**ANSWER, "content": [{"type": "text", "text": "x"}], "stop_reason": reason}
    assert wire.answer(answer, created=1)["choices"][0]["finish_reason"] == finish


def test_answer_without_a_content_list_is_not_an_answer() -> None:
    """A JSON object without a content list raises (the provider answers 502)."""
    with pytest.raises(ValueError, match="content"):
        wire.answer({"unexpected": True}, created=1)


def test_stream_counts_tool_calls_not_content_blocks() -> None:
    """Two tool_use blocks after a text block are tool calls 0 and 1, their arguments
    following; message_delta gives the finish reason and the output tokens."""
    events = wire.StreamEvents()
    start = {
        "type": "message_start",
        "message": {**ANSWER, "content": [], "usage": {"input_tokens": 9, "output_tokens": 1}},
    }
    seen = [
        events.delta(start),
        events.delta(
            {
                "type": "content_block_start",
                "index": 0,
                "content_block": {"type": "text", "text": ""},
            }
        ),
        events.delta(
            {
                "type": "content_block_delta",
                "index": 0,
                "delta": {"type": "text_delta", "text": "Hi"},
            }
        ),
        events.delta(
            {
                "type": "content_block_start",
                "index": 1,
                "content_block": {"type": "tool_use", "id": "t1", "name": "get", "input": {}},
            }
        ),
        events.delta(
            {
                "type": "content_block_delta",
                "index": 1,
                "delta": {"type": "input_json_delta", "partial_json": '{"a"'},
            }
        ),
        events.delta(
            {
                "type": "content_block_start",
                "index": 2,
                "content_block": {"type": "tool_use", "id": "t2", "name": "get", "input": {}},
            }
        ),
        events.delta(
            {
                "type": "content_block_delta",
                "index": 2,
                "delta": {"type": "input_json_delta", "partial_json": ": 2}"},
            }
        ),
        events.delta({"type": "content_block_stop", "index": 2}),
        events.delta(
            {
                "type": "message_delta",
                "delta": {"stop_reason": "tool_use"},
                "usage": {"output_tokens": 30},
            }
        ),
    ]
    assert seen[0] == ({"content": ""}, None)
    assert seen[1] == (None, None)
    assert seen[2] == ({"content": "Hi"}, None)
    assert seen[3][0] == {
        "tool_calls": [
            {
                "index": 0,
                "id": "t1",
                "type": "function",
                "function": {"name": "get", "arguments": ""},
            }
        ]
    }
    assert seen[4][0] == {"tool_calls": [{"index": 0, "function": {"arguments": '{"a"'}}]}
    assert seen[6][0] == {"tool_calls": [{"index": 1, "function": {"arguments": ": 2}"}}]}
    assert seen[7] == (None, None)
    assert seen[8] == ({}, "tool_calls")
    assert wire.usage_of(events.usage)["completion_tokens"] == 30
    assert wire.usage_of(events.usage)["prompt_tokens"] == 9
    assert events.id == "msg_1"


KEYS = [
    "type", "text", "index", "delta", "content_block", "input", "partial_json", "message",
    "usage", "id", "name", "content", "function", "arguments", "url", "cache_control",
    "stop_reason", "thinking", "input_tokens", "output_tokens", "parameters",
]  # fmt: skip
SHAPES = JsonShapes(KEYS)
json_values = SHAPES.any
shaped = SHAPES.shaped


parts = shaped(
    ["text", "image_url", "file"],
    text=json_values,
    image_url=shaped(["x"], url=st.sampled_from(["data:image/png;base64,x", "https://x.test/a", "data:,"])),
    cache_control=json_values,
)  # fmt: skip
calls = shaped(["function"], id=json_values, function=shaped(["x"], name=json_values, arguments=st.sampled_from(["{}", '{"a": 1}', "[", ""])))  # fmt: skip
messages = st.fixed_dictionaries(
    {"role": st.sampled_from(["system", "developer", "user", "assistant", "tool", "function"])},
    optional={
        "content": st.lists(parts, max_size=3) | json_values,
        "tool_calls": st.lists(calls, max_size=2) | json_values,
        "tool_call_id": json_values,
        "cache_control": json_values,
        "thinking_blocks": json_values,
    },
)
blocks = shaped(["text", "tool_use", "thinking"], text=json_values, input=json_values, id=json_values, name=json_values)  # fmt: skip
deltas = shaped(["text_delta", "input_json_delta", "thinking_delta", "signature_delta"], text=json_values, partial_json=json_values, thinking=json_values)  # fmt: skip
usages = st.dictionaries(st.sampled_from(["input_tokens", "output_tokens", "cache_read_input_tokens"]), json_values)  # fmt: skip
events = shaped(
    ["message_start", "content_block_start", "content_block_delta", "content_block_stop", "message_delta"],
    index=json_values,
    content_block=blocks,
    delta=deltas | st.fixed_dictionaries({}, optional={"stop_reason": json_values}),
    message=st.fixed_dictionaries({}, optional={"id": json_values, "model": json_values, "usage": usages}),
    usage=usages,
)  # fmt: skip
answers = st.fixed_dictionaries(
    {}, optional={"content": st.lists(blocks, max_size=4) | json_values, "usage": usages | json_values, "stop_reason": json_values}
) | json_values  # fmt: skip


@pytest.mark.reliability("fuzz")
@settings(max_examples=examples(200, 5000), deadline=None)
@given(
    chat=st.lists(messages, max_size=4),
    fields=st.dictionaries(
        st.sampled_from([*sorted(wire.TRANSLATED), "top_k"]),
        json_values | st.lists(shaped(["function"], function=json_values), max_size=2),
    ),
)
def test_any_request_is_written_or_refused_clearly(
    chat: list[dict[str, Any]], fields: dict[str, Any]
) -> None:
    """Whatever the messages and parameters hold, the check leaves the request to litellm or
    the translation writes JSON or refuses with a 400: never another exception (the check and
    the translation agree on what is litellm's)."""
    if wire.leaves(fields, chat, drop_params=False) is not None:
        return
    try:
        body = wire.request_body(fields, chat, MODEL, max_tokens=10, drop_params=False)
    except InvalidChatRequest:
        return
    orjson.dumps(body)


@pytest.mark.reliability("fuzz")
@settings(max_examples=examples(200, 5000), deadline=None)
@given(stream=st.lists(events, max_size=8), answer=answers)
def test_any_upstream_event_or_answer_is_read_without_crashing(
    stream: list[Any], answer: object
) -> None:
    """Stream events of any shape give deltas or nothing; an answer of any shape is a chat
    completion or a ValueError (the provider's 502)."""
    reader = wire.StreamEvents()
    for event in stream:
        if isinstance(event, dict):
            delta, finish = reader.delta(event)
            orjson.dumps([delta, finish, wire.usage_of(reader.usage)])
    with contextlib.suppress(ValueError):
        orjson.dumps(wire.answer(answer, created=1))
