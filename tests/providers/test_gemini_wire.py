"""Gemini's API written by overspill: requests, answers and stream events, against litellm's."""

from __future__ import annotations

import contextlib
import copy
import re
from typing import Any, cast

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from litellm.llms.gemini.chat.transformation import GoogleAIStudioGeminiConfig
from litellm.llms.vertex_ai.gemini.transformation import transform_request_body
from litellm.llms.vertex_ai.gemini.vertex_and_google_ai_studio_gemini import ModelResponseIterator
from litellm.types.utils import ModelResponse
from litellm.utils import get_optional_params

from kernel.errors import InvalidChatRequest
from providers import gemini_wire as wire
from providers.model_info import known_system_messages
from proxy.http import parse_chat_request
from tests.providers.fuzzing import JsonShapes
from tests.reliability import examples

MODELS = ["gemini-2.5-flash", "gemini-3.1-pro-preview"]
CALL = {"id": "call_1", "type": "function", "function": {"name": "get", "arguments": '{"a": 1}'}}
SIGNED = {**CALL, "id": "call_2__thought__c2ln"}
TOOL = {
    "type": "function",
    "function": {
        "name": "get",
        "description": "d",
        "parameters": {
            "type": "object",
            "properties": {
                "a": {"type": "integer", "description": "x", "enum": [1, 2]},
                "b": {"type": "string", "enum": ["", "x"], "format": "uri"},
                "c": {"type": "array"},
                "d": {"type": "object", "properties": {}, "required": []},
                "e": {"items": {"type": "number"}, "type": "array", "minItems": 1},
            },
            "required": ["a"],
            "additionalProperties": False,
            "$schema": "http://json-schema.org/draft-07/schema#",
        },
        "strict": True,
    },
}
BARE_TOOL = {"type": "function", "function": {"name": "now"}}
PNG = "data:image/png;base64,iVBORw0KGgo="

CHATS: list[dict[str, Any]] = [
    {"messages": [{"role": "user", "content": "hi"}]},
    {
        "messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hi"}],
        "max_tokens": 5,
        "temperature": 0.2,
        "top_p": 0.9,
        "top_k": 3,
    },
    {
        "messages": [
            {"role": "developer", "content": [{"type": "text", "text": "S"}]},
            {"role": "system", "content": "T"},
            {"role": "user", "content": "hi"},
        ],
        "stop": "END",
        "user": "u1",
        "max_completion_tokens": 7,
        "seed": 3,
        "n": 2,
    },
    {
        "messages": [{"role": "user", "content": "hi"}],
        "stop": ["a", "b"],
        "presence_penalty": 0.5,
        "frequency_penalty": 0.1,
    },
    {
        "messages": [
            {"role": "user", "content": "weather?"},
            {"role": "assistant", "content": None, "tool_calls": [CALL, SIGNED]},
            {"role": "tool", "tool_call_id": "call_1", "content": "sunny"},
            {
                "role": "tool",
                "tool_call_id": "call_2__thought__c2ln",
                "content": [{"type": "text", "text": '{"rain": true}'}],
            },
            {"role": "user", "content": "and now?"},
            {"role": "assistant", "content": "Let me check.", "tool_calls": [CALL]},
            {"role": "tool", "tool_call_id": "call_1", "content": "[1, 2]"},
        ],
        "tools": [TOOL, BARE_TOOL],
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
    {
        "messages": [
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "look"},
                    {"type": "text", "text": ""},
                    {"type": "image_url", "image_url": {"url": PNG, "detail": "auto"}},
                ],
            },
            {"role": "user", "content": [{"type": "image_url", "image_url": PNG}]},
        ]
    },
    {"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": PNG}]}]},
    {
        "messages": [
            {"role": "user", "content": "a"},
            {"role": "user", "content": "b"},
            {"role": "assistant", "content": "c", "reasoning_content": "thinking"},
            {"role": "assistant", "content": [{"type": "text", "text": "c2"}]},
            {"role": "user", "content": "d"},
            {"role": "assistant", "content": ""},
        ],
        "stream": True,
        "temperature": None,
    },
    {"messages": [{"role": "system", "content": "only a system message"}]},
]


def litellm_body(chat: dict[str, Any], model: str) -> dict[str, Any]:
    """What litellm's Gemini translation sends for the chat request."""
    chat = copy.deepcopy(chat)
    config = GoogleAIStudioGeminiConfig()
    messages = config.translate_developer_role_to_system_role(messages=chat.pop("messages"))
    chat.pop("stream", None)
    optional = get_optional_params(model=model, custom_llm_provider="gemini", **chat)
    optional.pop("stream", None)
    body = transform_request_body(
        messages=messages,
        model=model,
        optional_params=optional,
        custom_llm_provider="gemini",
        litellm_params={},
        cached_content=None,
    )
    written: dict[str, Any] = orjson.loads(orjson.dumps(body))
    return written


def own_body(chat: dict[str, Any], model: str = MODELS[0], drop: bool = False) -> dict[str, Any]:
    request = parse_chat_request(orjson.dumps({"model": "g", **chat}))
    return wire.request_body(
        request.body,
        request.messages,
        model,
        system_instruction=known_system_messages(f"gemini/{model}"),
        drop_params=drop,
    )


@pytest.mark.parametrize("model", MODELS)
@pytest.mark.parametrize("chat", CHATS, ids=range(len(CHATS)))
def test_request_is_written_as_litellm_writes_it(chat: dict[str, Any], model: str) -> None:
    """For the requests chat clients send, the generateContent body equals litellm's."""
    assert own_body(chat, model) == litellm_body(chat, model)


@pytest.mark.parametrize(
    ("model", "newer"),
    [
        ("gemini-2.5-flash", False),
        ("gemini-2.0-flash-lite", False),
        ("gemini-flash-latest", True),
        ("gemini-pro", False),
        ("gemini-3-pro-preview", True),
        ("gemini-3.5-flash", True),
        ("gemma-3-27b-it", False),
    ],
)
def test_gemini_3_is_recognised_as_litellm_does(model: str, newer: bool) -> None:
    """Call ids, signatures, the API version and the penalties follow litellm's model rule."""
    assert wire.gemini_3_or_newer(model) is newer
    version = "/v1alpha/" if newer else "/v1beta/"
    assert version in wire.url(model, None, stream=False)


def test_a_system_message_for_a_model_without_system_instructions_is_litellms() -> None:
    """A model litellm's map does not say takes system messages: litellm writes them."""
    chat = {"messages": [{"role": "system", "content": "S"}, {"role": "user", "content": "x"}]}
    request = parse_chat_request(orjson.dumps({"model": "g", **chat}))
    why = wire.leaves(request.body, request.messages, system_instruction=False, drop_params=False)
    assert why is not None
    assert "system" in why
    assert (
        wire.leaves(request.body, request.messages, system_instruction=True, drop_params=False)
        is None
    )


@pytest.mark.parametrize(
    ("chat", "reason"),
    [
        ({"response_format": {"type": "json_object"}}, "response_format"),
        ({"reasoning_effort": "low"}, "reasoning_effort"),
        ({"web_search_options": {}}, "web_search_options"),
        ({"safety_settings": []}, "safety_settings"),
        ({"cached_content": "c"}, "cached_content"),
        (
            {
                "messages": [
                    {"role": "user", "content": [{"type": "file", "file": {"file_data": "x"}}]}
                ]
            },
            "type 'file'",
        ),
        (
            {
                "messages": [
                    {
                        "role": "user",
                        "content": [{"type": "image_url", "image_url": "https://x.test/a.png"}],
                    }
                ]
            },
            "a URL",
        ),
        (
            {
                "messages": [
                    {
                        "role": "user",
                        "content": [
                            {"type": "image_url", "image_url": {"url": PNG, "detail": "high"}}
                        ],
                    }
                ]
            },
            "detail",
        ),
        ({"tools": [{"type": "web_search"}]}, "tools[0]"),
        (
            {
                "tools": [
                    {
                        "type": "function",
                        "function": {"name": "f", "parameters": {"anyOf": [{"type": "string"}]}},
                    }
                ]
            },
            "anyOf",
        ),
        (
            {
                "tools": [
                    {
                        "type": "function",
                        "function": {"name": "f", "parameters": {"type": ["string", "null"]}},
                    }
                ]
            },
            "single type",
        ),
        ({"messages": [{"role": "function", "name": "f", "content": "x"}]}, "role 'function'"),
        ({"stream": True, "n": 2}, "n with stream"),
    ],
)
def test_what_litellm_alone_writes_is_left_to_it(chat: dict[str, Any], reason: str) -> None:
    """JSON mode, reasoning, grounding, files, image URLs, rich schemas go to litellm."""
    base: dict[str, Any] = {"messages": [{"role": "user", "content": "hi"}]}
    request = parse_chat_request(orjson.dumps({"model": "g", **base, **chat}))
    why = wire.leaves(request.body, request.messages, system_instruction=True, drop_params=False)
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
        (
            {
                "messages": [
                    {"role": "assistant", "tool_calls": [{"function": {"arguments": "[1"}}]}
                ]
            },
            "messages[0].tool_calls[0].function.arguments",
        ),
    ],
)
def test_malformed_request_names_what_to_fix(chat: dict[str, Any], where: str) -> None:
    """A message, tool or parameter in the wrong shape is a 400 that says where."""
    with pytest.raises(InvalidChatRequest) as caught:
        wire.request_body(
            chat, chat["messages"], MODELS[0], system_instruction=True, drop_params=False
        )
    assert where in caught.value.message


@pytest.mark.parametrize("url", ["notaurl", "ftp://x.test/a.png", "file:///etc/passwd"])
def test_an_image_url_gemini_cannot_take_is_a_400_before_any_road(url: str) -> None:
    """An image URL that is not http(s), gs:// or data: is the client's 400 naming the part
    (litellm, which URLs go to, failed on it in its own code)."""
    part = {"type": "image_url", "image_url": {"url": url}}
    request = parse_chat_request(
        orjson.dumps({"model": "g", "messages": [{"role": "user", "content": [part]}]})
    )
    with pytest.raises(InvalidChatRequest) as caught:
        wire.leaves(request.body, request.messages, system_instruction=True, drop_params=False)
    assert caught.value.message == (
        "messages[0].content[0].image_url.url must be an http(s), gs:// or data: URL"
    )


def test_unsupported_parameters_are_named_or_dropped() -> None:
    """logit_bias and store are refused naming both; with drop_params they are left out."""
    chat = {"messages": [{"role": "user", "content": "hi"}], "logit_bias": {"1": 1}, "store": True}
    with pytest.raises(wire.UnsupportedParameter, match="logit_bias, store") as caught:
        own_body(chat)
    assert caught.value.param == "logit_bias"
    assert own_body(chat, drop=True) == own_body({"messages": chat["messages"]})


def test_nulls_are_defaults_not_features() -> None:
    """A null response_format or logit_bias is absent, as litellm reads it: no fallback, no
    refusal."""
    chat = {"messages": [{"role": "user", "content": "hi"}]}
    nulls = {**chat, "response_format": None, "logit_bias": None, "temperature": None}
    assert own_body(nulls) == own_body(chat) == litellm_body(nulls, MODELS[0])


def parsed_answer(payload: dict[str, Any]) -> dict[str, Any]:
    """litellm's chat.completion for a Gemini answer."""
    config = GoogleAIStudioGeminiConfig()
    made = config._transform_google_generate_content_to_openai_model_response(
        completion_response=copy.deepcopy(payload),
        model_response=ModelResponse(),
        model=MODELS[0],
        logging_obj=cast(Any, _Logging()),
        raw_response=cast(Any, None),
    )
    return dumped(made)


def dumped(made: object) -> dict[str, Any]:
    """A litellm response object as a dict."""
    out: dict[str, Any] = cast(Any, made).model_dump()
    return out


class _Logging:
    optional_params: dict[str, Any] = {}  # noqa: RUF012  # read by litellm, never written


def usage_fields(usage: dict[str, Any]) -> dict[str, Any]:
    """The usage figures both report (litellm adds per-modality details)."""
    return {
        "prompt_tokens": usage["prompt_tokens"],
        "completion_tokens": usage["completion_tokens"],
        "total_tokens": usage["total_tokens"],
        "cached": (usage.get("prompt_tokens_details") or {}).get("cached_tokens"),
        "reasoning": (usage.get("completion_tokens_details") or {}).get("reasoning_tokens"),
    }


def message_fields(message: dict[str, Any]) -> dict[str, Any]:
    calls = [
        {"id": c["id"], "name": c["function"]["name"], "arguments": c["function"]["arguments"]}
        for c in message.get("tool_calls") or []
    ]
    return {
        "content": message.get("content"),
        "reasoning": message.get("reasoning_content"),
        "calls": calls,
    }


USAGE = {
    "promptTokenCount": 12,
    "candidatesTokenCount": 3,
    "totalTokenCount": 25,
    "thoughtsTokenCount": 10,
    "cachedContentTokenCount": 4,
    "promptTokensDetails": [{"modality": "TEXT", "tokenCount": 12}],
}
ANSWERS: list[dict[str, Any]] = [
    {
        "candidates": [
            {
                "content": {
                    "role": "model",
                    "parts": [{"text": "hmm", "thought": True}, {"text": "Par"}, {"text": "is"}],
                },
                "finishReason": "STOP",
            }
        ],
        "usageMetadata": USAGE,
        "modelVersion": "gemini-2.5-flash-001@x",
        "responseId": "r1",
    },
    {
        "candidates": [
            {
                "content": {
                    "role": "model",
                    "parts": [
                        {"text": "Let me."},
                        {
                            "functionCall": {
                                "name": "get",
                                "args": {"a": "é", "b": [1]},
                                "id": "fc1",
                            },
                            "thoughtSignature": "c2ln",
                        },
                    ],
                },
                "finishReason": "STOP",
            }
        ],
        "usageMetadata": {"promptTokenCount": 5, "candidatesTokenCount": 2, "totalTokenCount": 7},
        "responseId": "r2",
    },
    {
        "candidates": [{"content": {"parts": [{"text": "cut"}]}, "finishReason": "MAX_TOKENS"}],
        "usageMetadata": {"promptTokenCount": 5, "candidatesTokenCount": 2, "totalTokenCount": 7},
    },
    {
        "candidates": [{"finishReason": "SAFETY"}],
        "usageMetadata": {"promptTokenCount": 5, "totalTokenCount": 5},
    },
    {
        "promptFeedback": {"blockReason": "OTHER"},
        "usageMetadata": {"promptTokenCount": 5, "totalTokenCount": 5},
    },
    {
        "candidates": [
            {"content": {"parts": [{"text": "a"}]}, "finishReason": "STOP", "index": 0},
            {"content": {"parts": [{"text": "b"}]}, "finishReason": "LANGUAGE", "index": 1},
        ],
        "usageMetadata": {
            "promptTokenCount": 5,
            "candidatesTokenCount": 2,
            "totalTokenCount": 7,
            "toolUsePromptTokenCount": 3,
        },
    },
]


@pytest.mark.parametrize("payload", ANSWERS, ids=range(len(ANSWERS)))
def test_answer_is_the_chat_completion_litellm_makes(payload: dict[str, Any]) -> None:
    """Text, reasoning, tool calls (native ids and signatures), finish reasons, filtered
    answers and usage equal litellm's (its random call ids aside)."""
    own = wire.answer(copy.deepcopy(payload), MODELS[0], created=1)
    theirs = parsed_answer(payload)
    assert own["model"] == theirs["model"]
    if payload.get("responseId"):
        assert own["id"] == theirs["id"]
    assert [c["finish_reason"] for c in own["choices"]] == [
        c["finish_reason"] for c in theirs["choices"]
    ]
    assert [c["index"] for c in own["choices"]] == [c["index"] for c in theirs["choices"]]
    assert [message_fields(c["message"]) for c in own["choices"]] == [
        message_fields(c["message"]) for c in theirs["choices"]
    ]
    assert usage_fields(own["usage"]) == usage_fields(theirs["usage"])


def test_a_call_without_a_native_id_gets_litellms_kind_of_id() -> None:
    """A function call Gemini sent without an id gets `call_` and 28 hex digits."""
    payload = {
        "candidates": [
            {
                "content": {"parts": [{"functionCall": {"name": "f", "args": {}}}]},
                "finishReason": "STOP",
            }
        ],
        "usageMetadata": {},
    }
    out = wire.answer(payload, MODELS[0], created=1)
    call = out["choices"][0]["message"]["tool_calls"][0]
    assert re.fullmatch(r"call_[0-9a-f]{28}", call["id"])
    assert out["choices"][0]["finish_reason"] == "tool_calls"
    assert out["choices"][0]["message"]["content"] is None


def test_answer_without_candidates_is_not_an_answer() -> None:
    """A JSON object without candidates (nor a blocked prompt) raises (the provider's 502)."""
    with pytest.raises(ValueError, match="candidates"):
        wire.answer({"unexpected": True}, MODELS[0], created=1)


STREAM: list[dict[str, Any]] = [
    {
        "candidates": [{"content": {"role": "model", "parts": [{"text": "Hi"}]}}],
        "usageMetadata": {"promptTokenCount": 9, "totalTokenCount": 9},
        "modelVersion": "gemini-2.5-flash",
        "responseId": "s1",
    },
    {
        "candidates": [
            {
                "content": {
                    "parts": [
                        {
                            "functionCall": {"name": "get", "args": {"a": 1}},
                            "thoughtSignature": "c2ln",
                        },
                        {"functionCall": {"name": "get", "args": {"a": 2}}},
                    ]
                }
            }
        ],
        "responseId": "s1",
    },
    {
        "candidates": [{"content": {"parts": [{"text": ""}]}, "finishReason": "STOP"}],
        "usageMetadata": {"promptTokenCount": 9, "candidatesTokenCount": 4, "totalTokenCount": 13},
        "responseId": "s1",
    },
]


def test_stream_gives_the_deltas_and_usage_litellm_gives() -> None:
    """Each event's text and tool calls (numbered across the stream, signatures in their ids)
    and the last usage equal litellm's parser's; the finish reason after tool calls is
    tool_calls, and the stream is complete only then."""
    events = wire.StreamEvents()
    parser = ModelResponseIterator(
        streaming_response=None, sync_stream=False, logging_obj=cast(Any, _Logging())
    )
    for number, event in enumerate(STREAM):
        delta, finish = events.delta(copy.deepcopy(event))
        chunk = parser.chunk_parser(copy.deepcopy(event))
        assert chunk is not None
        theirs = dumped(chunk)["choices"][0]
        assert events.finished is (number == len(STREAM) - 1)
        assert (delta or {}).get("content") == (theirs["delta"]["content"] or None)
        own_calls = [
            (c["index"], c["id"].partition("__thought__")[2], c["function"]["arguments"])
            for c in (delta or {}).get("tool_calls", [])
        ]
        their_calls = [
            (c["index"], c["id"].partition("__thought__")[2], c["function"]["arguments"])
            for c in theirs["delta"]["tool_calls"] or []
        ]
        assert own_calls == their_calls
        if number == len(STREAM) - 1:  # litellm's wrapper holds the reason until the end
            assert finish == theirs["finish_reason"] == "tool_calls"
    assert (events.id, events.model) == ("s1", "gemini-2.5-flash")
    assert events.usage is not None
    last = parser.chunk_parser(copy.deepcopy(STREAM[-1]))
    assert last is not None
    assert usage_fields(wire.usage_of(events.usage)) == usage_fields(dumped(last)["usage"])


def test_a_blocked_prompt_ends_the_stream_filtered() -> None:
    """promptFeedback.blockReason is a content_filter finish and a complete stream."""
    events = wire.StreamEvents()
    assert events.delta({"promptFeedback": {"blockReason": "SAFETY"}}) == ({}, "content_filter")
    assert events.finished


KEYS = [
    "role", "content", "parts", "text", "thought", "functionCall", "name", "args", "id",
    "thoughtSignature", "finishReason", "candidates", "usageMetadata", "promptTokenCount",
    "candidatesTokenCount", "totalTokenCount", "promptFeedback", "blockReason", "index",
]  # fmt: skip
SHAPES = JsonShapes(KEYS)
json_values = SHAPES.any
shaped = SHAPES.shaped


schemas = st.recursive(
    st.fixed_dictionaries(
        {},
        optional={
            "type": st.sampled_from(["string", "array", "object", "integer"]) | json_values,
            "enum": json_values,
            "required": json_values,
            "format": st.sampled_from(["enum", "uri"]),
        },
    ),
    lambda inner: st.fixed_dictionaries(
        {}, optional={"properties": st.dictionaries(st.text(max_size=3), inner, max_size=2), "items": inner | json_values}
    ),
    max_leaves=6,
)  # fmt: skip
parts = shaped(
    ["text", "image_url", "file"],
    text=json_values,
    image_url=shaped(["x"], url=st.sampled_from(["data:image/png;base64,x", "https://x.test/a", "data:,"])),
)  # fmt: skip
calls = shaped(["function"], id=json_values, function=shaped(["x"], name=json_values, arguments=st.sampled_from(["{}", '{"a": 1}', "[", ""])))  # fmt: skip
messages = st.fixed_dictionaries(
    {"role": st.sampled_from(["system", "developer", "user", "assistant", "tool", "function"])},
    optional={
        "content": st.lists(parts, max_size=3) | json_values,
        "tool_calls": st.lists(calls, max_size=2) | json_values,
        "tool_call_id": json_values,
        "reasoning_content": json_values,
        "name": json_values,
    },
)
tools = shaped(["function"], function=st.fixed_dictionaries({"name": st.text(max_size=3)}, optional={"parameters": schemas | json_values, "description": json_values}))  # fmt: skip
answer_parts = st.fixed_dictionaries(
    {}, optional={"text": json_values, "thought": json_values, "thoughtSignature": json_values,
                  "functionCall": st.fixed_dictionaries({}, optional={"name": json_values, "args": json_values, "id": json_values}) | json_values}
)  # fmt: skip
candidates = st.fixed_dictionaries(
    {}, optional={"content": st.fixed_dictionaries({}, optional={"parts": st.lists(answer_parts, max_size=3) | json_values}) | json_values,
                  "finishReason": st.sampled_from(["STOP", "SAFETY", "MAX_TOKENS", "NEW"]) | json_values, "index": json_values}
)  # fmt: skip
usages = st.dictionaries(st.sampled_from(["promptTokenCount", "candidatesTokenCount", "totalTokenCount", "thoughtsTokenCount", "cachedContentTokenCount"]), json_values)  # fmt: skip
responses = st.fixed_dictionaries(
    {}, optional={"candidates": st.lists(candidates, max_size=2) | json_values, "usageMetadata": usages | json_values,
                  "promptFeedback": json_values, "responseId": json_values, "modelVersion": json_values}
) | json_values  # fmt: skip


IDS = ["call_1", "call_2__thought__c2ln", "fc_3"]
texts = st.sampled_from(["", "hi", "é", '{"a": 1}', "[1, 2]", " {x"])
user_parts = st.lists(
    st.fixed_dictionaries({"type": st.just("text"), "text": texts})
    | st.fixed_dictionaries({"type": st.just("image_url"), "image_url": st.just({"url": PNG})}),
    max_size=3,
)
valid_calls = st.lists(
    st.fixed_dictionaries(
        {
            "id": st.sampled_from(IDS),
            "type": st.just("function"),
            "function": st.fixed_dictionaries(
                {
                    "name": st.sampled_from(["get", "now"]),
                    "arguments": st.sampled_from(["", "{}", '{"a": [1]}']),
                }
            ),
        }
    ),
    min_size=1,
    max_size=2,
)
valid_messages = st.one_of(
    st.fixed_dictionaries(
        {"role": st.sampled_from(["user", "system", "developer"]), "content": texts | user_parts}
    ),
    st.fixed_dictionaries(
        {
            "role": st.just("assistant"),
            "content": st.none()
            | texts
            | st.lists(st.fixed_dictionaries({"type": st.just("text"), "text": texts}), max_size=2),
        },
        optional={"tool_calls": valid_calls, "reasoning_content": texts},
    ),
    st.fixed_dictionaries(
        {
            "role": st.just("tool"),
            "tool_call_id": st.sampled_from(IDS),
            "content": texts
            | st.lists(st.fixed_dictionaries({"type": st.just("text"), "text": texts}), max_size=2),
        }
    ),
)
valid_fields = st.fixed_dictionaries(
    {},
    optional={
        "temperature": st.sampled_from([0, 0.5, None]), "top_p": st.just(0.9), "top_k": st.just(4),
        "max_tokens": st.just(9), "stop": st.sampled_from(["x", ["a", "b"]]), "n": st.just(2),
        "seed": st.just(7), "presence_penalty": st.just(0.5), "user": st.just("u"),
        "tools": st.sampled_from([[TOOL], [TOOL, BARE_TOOL], []]),
        "tool_choice": st.sampled_from(["auto", "none", "required", {"type": "function", "function": {"name": "get"}}]),
    },
)  # fmt: skip


def call_ids(message: dict[str, Any]) -> list[str]:
    """The tool call ids, litellm's random part left out (a native id and a signature kept)."""
    return [
        "call_" if re.fullmatch(r"call_[0-9a-f]{28}", c["id"].split("__thought__")[0]) else c["id"]
        for c in message.get("tool_calls") or []
    ]


counts = st.integers(0, 50)
valid_parts = st.lists(
    st.fixed_dictionaries({"text": texts}, optional={"thought": st.just(True)})
    | st.fixed_dictionaries(
        {
            "functionCall": st.fixed_dictionaries(
                {"name": st.just("get"), "args": st.just({"a": [1, "é"]})},
                optional={"id": st.just("fc1")},
            )
        },
        optional={"thoughtSignature": st.just("c2ln")},
    ),
    max_size=4,
)
valid_answers = st.fixed_dictionaries(
    {
        "candidates": st.lists(
            st.fixed_dictionaries({}, optional={"content": st.fixed_dictionaries({"role": st.just("model"), "parts": valid_parts}),
                                               "finishReason": st.sampled_from(["STOP", "MAX_TOKENS", "SAFETY", "LANGUAGE", "MALFORMED_FUNCTION_CALL", "NEW"])}),
            min_size=1, max_size=2,
        ),
        "usageMetadata": st.fixed_dictionaries(
            {"promptTokenCount": counts, "totalTokenCount": counts},
            optional={"candidatesTokenCount": counts, "thoughtsTokenCount": counts, "cachedContentTokenCount": counts, "toolUsePromptTokenCount": counts},
        ),
    },
    optional={"responseId": st.just("r"), "modelVersion": st.just("gemini-2.5-flash-001")},
)  # fmt: skip


@pytest.mark.reliability("fuzz")
@settings(max_examples=examples(100, 2000), deadline=None)
@given(payload=valid_answers)
def test_any_answer_reads_as_litellm_reads_it(payload: dict[str, Any]) -> None:
    """Generated Gemini answers (text, thoughts, calls with native ids and signatures, any
    finish reason, one or two candidates, any usage): overspill's chat.completion has
    litellm's content, reasoning, calls, finish reasons and token counts."""
    own = wire.answer(copy.deepcopy(payload), MODELS[0], created=1)
    theirs = parsed_answer(payload)
    assert (own["model"], len(own["choices"])) == (theirs["model"], len(theirs["choices"]))
    for mine, their in zip(own["choices"], theirs["choices"], strict=True):
        assert mine["finish_reason"] == their["finish_reason"]
        assert message_fields(mine["message"]) | {"calls": call_ids(mine["message"])} == (
            message_fields(their["message"]) | {"calls": call_ids(their["message"])}
        )
        arguments = [c["function"]["arguments"] for c in mine["message"].get("tool_calls") or []]
        assert arguments == [
            c["function"]["arguments"] for c in their["message"]["tool_calls"] or []
        ]
    assert usage_fields(own["usage"]) == usage_fields(theirs["usage"])


def stream_calls(delta: dict[str, Any] | None) -> list[tuple[int, str, str]]:
    """A delta's tool calls: (index, id without litellm's random part, arguments)."""
    return [
        (c["index"], call_ids({"tool_calls": [c]})[0], c["function"]["arguments"])
        for c in (delta or {}).get("tool_calls") or []
    ]


stream_events = st.lists(
    st.fixed_dictionaries(
        {"candidates": st.lists(st.fixed_dictionaries({"content": st.fixed_dictionaries({"parts": valid_parts})}), min_size=1, max_size=1)},
        optional={"usageMetadata": st.fixed_dictionaries({"promptTokenCount": counts, "totalTokenCount": counts}, optional={"candidatesTokenCount": counts, "thoughtsTokenCount": counts})},
    ),
    min_size=1,
    max_size=4,
)  # fmt: skip


@pytest.mark.reliability("fuzz")
@settings(max_examples=examples(100, 2000), deadline=None)
@given(stream=stream_events, reason=st.sampled_from(["STOP", "MAX_TOKENS", "SAFETY", "OTHER"]))
def test_any_stream_reads_as_litellm_reads_it(stream: list[dict[str, Any]], reason: str) -> None:
    """Generated streams (text, thoughts, calls with ids and signatures, the last event with
    a finish reason): each event's content, reasoning and tool calls (numbered across the
    stream) are litellm's parser's, and so are the finish reason and the last usage."""
    stream[-1]["candidates"][0]["finishReason"] = reason
    events = wire.StreamEvents()
    parser = ModelResponseIterator(
        streaming_response=None, sync_stream=False, logging_obj=cast(Any, _Logging())
    )
    finish = None
    for event in stream:
        delta, finish = events.delta(copy.deepcopy(event))
        chunk = parser.chunk_parser(copy.deepcopy(event))
        assert chunk is not None
        theirs = dumped(chunk)
        choice = theirs["choices"][0]
        assert (delta or {}).get("content") == (choice["delta"]["content"] or None)
        assert (delta or {}).get("reasoning_content") == choice["delta"].get("reasoning_content")
        assert stream_calls(delta) == stream_calls(choice["delta"])
    assert events.finished
    assert finish == choice["finish_reason"]
    usage = theirs.get("usage")
    if usage:
        assert usage_fields(wire.usage_of(events.usage or {})) == usage_fields(usage)


@pytest.mark.reliability("fuzz")
@settings(max_examples=examples(100, 2000), deadline=None)
@given(
    chat=st.lists(valid_messages, max_size=6), fields=valid_fields, model=st.sampled_from(MODELS)
)
def test_any_chat_clients_request_is_written_as_litellm_writes_it(
    chat: list[dict[str, Any]], fields: dict[str, Any], model: str
) -> None:
    """Generated requests of the shapes chat clients send (any order of turns, tool calls
    and results, signed ids, parameters): whatever overspill writes, litellm writes the same."""
    request = {"messages": chat, **fields}
    system = known_system_messages(f"gemini/{model}")
    try:
        parsed = parse_chat_request(orjson.dumps({"model": "g", **request}))
        if wire.leaves(parsed.body, parsed.messages, system_instruction=system, drop_params=False):
            return  # a system image: litellm's
        own = own_body(request, model)
    except InvalidChatRequest:
        return  # a tool result naming no call (litellm fails too)
    assert own == litellm_body(request, model)


@pytest.mark.reliability("fuzz")
@settings(max_examples=examples(200, 5000), deadline=None)
@given(
    chat=st.lists(messages, max_size=4),
    fields=st.dictionaries(
        st.sampled_from([*sorted(wire.TRANSLATED), "top_k"]),
        json_values | st.lists(tools, max_size=2),
    ),
    newer=st.booleans(),
)
def test_any_request_is_written_or_refused_clearly(
    chat: list[dict[str, Any]], fields: dict[str, Any], newer: bool
) -> None:
    """Whatever the messages and parameters hold, the check leaves the request to litellm or
    the translation writes JSON or refuses with a 400: never another exception (the check and
    the translation agree on what is litellm's)."""
    model = MODELS[newer]
    if wire.leaves(fields, chat, system_instruction=True, drop_params=False) is not None:
        return
    try:
        body = wire.request_body(fields, chat, model, system_instruction=True, drop_params=False)
    except InvalidChatRequest:
        return
    orjson.dumps(body)


@pytest.mark.reliability("fuzz")
@settings(max_examples=examples(200, 5000), deadline=None)
@given(stream=st.lists(responses, max_size=6), answer=responses)
def test_any_upstream_event_or_answer_is_read_without_crashing(
    stream: list[Any], answer: object
) -> None:
    """Stream events of any shape give deltas or nothing; an answer of any shape is a chat
    completion or a ValueError (the provider's 502)."""
    reader = wire.StreamEvents()
    for event in stream:
        if isinstance(event, dict):
            delta, finish = reader.delta(event)
            orjson.dumps([delta, finish, wire.usage_of(reader.usage or {})])
    with contextlib.suppress(ValueError):
        orjson.dumps(wire.answer(answer, MODELS[0], created=1))
