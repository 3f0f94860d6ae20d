"""A Responses request's fields as chat completion parameters, and the response's echo of them."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from kernel.errors import InvalidChatRequest, UnsupportedTool
from proxy.http import parse_chat_request
from proxy.surfaces import responses_wire as wire
from tests.providers.fuzzing import JsonShapes
from tests.proxy.surfaces.sdk import valid_response

TOOL = {
    "type": "function",
    "name": "get",
    "description": "d",
    "parameters": {"type": "object", "properties": {"a": {"type": "integer"}}},
    "strict": True,
}
CHAT_TOOL = {
    "type": "function",
    "function": {
        "name": "get",
        "description": "d",
        "parameters": {"type": "object", "properties": {"a": {"type": "integer"}}},
        "strict": True,
    },
}
SCHEMA = {"type": "object", "properties": {"x": {"type": "string"}}}


def refused(body: dict[str, Any]) -> InvalidChatRequest:
    with pytest.raises(InvalidChatRequest) as caught:
        wire.chat_params(body)
    return caught.value


def test_every_translated_field_has_its_chat_form() -> None:
    """max_output_tokens, temperature, top_p, user, tools, tool_choice, parallel_tool_calls,
    text.format, reasoning.effort, top_logprobs and stream, each in chat's terms."""
    body = {
        "model": "m",
        "input": "hi",
        "max_output_tokens": 64,
        "temperature": 0.2,
        "top_p": 0.9,
        "user": "u1",
        "tools": [TOOL],
        "tool_choice": {"type": "function", "name": "get"},
        "parallel_tool_calls": False,
        "text": {
            "format": {"type": "json_schema", "name": "out", "schema": SCHEMA, "strict": True}
        },
        "reasoning": {"effort": "low", "summary": "auto"},
        "top_logprobs": 3,
        "stream": True,
    }
    assert wire.chat_params(body) == {
        "max_tokens": 64,
        "temperature": 0.2,
        "top_p": 0.9,
        "user": "u1",
        "tools": [CHAT_TOOL],
        "tool_choice": {"type": "function", "function": {"name": "get"}},
        "parallel_tool_calls": False,
        "response_format": {
            "type": "json_schema",
            "json_schema": {"name": "out", "schema": SCHEMA, "strict": True},
        },
        "reasoning_effort": "low",
        "logprobs": True,
        "top_logprobs": 3,
        "stream": True,
        "stream_options": {"include_usage": True},
    }


def test_the_parameters_make_a_chat_request_overspill_accepts() -> None:
    """The parameters with messages pass overspill's own chat request check."""
    params = wire.chat_params({"tools": [TOOL], "tool_choice": "required", "stream": True})
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], **params}
    assert parse_chat_request(orjson.dumps(body)).stream is True


def test_fields_of_overspill_or_of_the_response_produce_nothing() -> None:
    """store, metadata, previous_response_id, truncation, context_management, include,
    instructions, input, model, prompt_cache_key, service_tier and safety_identifier are no
    chat parameters; nor is a null (the API's default) or stream false."""
    body = {
        "store": False,
        "metadata": {"k": "v"},
        "previous_response_id": "resp_1",
        "truncation": "auto",
        "context_management": [{"type": "compaction", "compact_threshold": 1000}],
        "include": ["reasoning.encrypted_content"],
        "instructions": "be brief",
        "input": [{"role": "user", "content": "x"}],
        "model": "m",
        "prompt_cache_key": "k",
        "service_tier": "flex",
        "safety_identifier": "s",
        "temperature": None,
        "stream": False,
    }
    assert wire.chat_params(body) == {}


def test_tool_choice_and_parallel_calls_need_tools() -> None:
    """Without tools, tool_choice and parallel_tool_calls are left out (chat servers refuse
    them alone), though still checked."""
    assert wire.chat_params({"tool_choice": "none", "parallel_tool_calls": True}) == {}
    assert refused({"tool_choice": "sometimes"}).param == "tool_choice"


@pytest.mark.parametrize("choice", ["auto", "none", "required"])
def test_tool_choice_modes_pass_as_they_are(choice: str) -> None:
    """auto, none and required are chat's modes too."""
    assert wire.chat_params({"tools": [TOOL], "tool_choice": choice})["tool_choice"] == choice


@pytest.mark.parametrize(
    "tool",
    [
        {"type": "web_search"},
        {"type": "file_search", "vector_store_ids": ["vs_1"]},
        {"type": "mcp", "server_label": "x"},
        {"type": "code_interpreter", "container": {"type": "auto"}},
        {"type": "custom", "name": "grammar"},
        {"type": "image_generation"},
    ],
)
def test_a_tool_only_openai_runs_is_refused_naming_it(tool: dict[str, Any]) -> None:
    """Any tool but a function tool is a 400 `unsupported_tool` at its place in tools."""
    error = refused({"tools": [TOOL, tool]})
    assert isinstance(error, UnsupportedTool)
    assert (error.code, error.param) == ("unsupported_tool", "tools[1]")
    assert repr(tool["type"]) in error.message


@pytest.mark.parametrize(
    "choice",
    [
        {"type": "allowed_tools", "mode": "auto", "tools": [{"type": "function", "name": "get"}]},
        {"type": "file_search"},
        {"type": "mcp", "server_label": "x"},
    ],
)
def test_tool_choices_only_openai_has_are_refused(choice: dict[str, Any]) -> None:
    """allowed_tools and built-in tool choices are a 400 `unsupported_tool` naming them."""
    error = refused({"tools": [TOOL], "tool_choice": choice})
    assert isinstance(error, UnsupportedTool)
    assert error.param == "tool_choice"
    assert repr(choice["type"]) in error.message


def test_text_formats_become_response_formats() -> None:
    """text → none, json_object → json_object, json_schema → chat's json_schema (description
    kept), verbosity → verbosity."""
    assert wire.chat_params({"text": {"format": {"type": "text"}}}) == {}
    assert wire.chat_params({"text": {"format": {"type": "json_object"}}}) == {
        "response_format": {"type": "json_object"}
    }
    text = {
        "format": {"type": "json_schema", "name": "n", "schema": SCHEMA, "description": "what"},
        "verbosity": "low",
    }
    assert wire.chat_params({"text": text}) == {
        "response_format": {
            "type": "json_schema",
            "json_schema": {"name": "n", "schema": SCHEMA, "description": "what"},
        },
        "verbosity": "low",
    }


def test_include_of_logprobs_asks_for_logprobs() -> None:
    """`include: [message.output_text.logprobs]` asks chat for logprobs."""
    assert wire.chat_params({"include": ["message.output_text.logprobs"]}) == {"logprobs": True}


ILL_TYPED: list[tuple[dict[str, Any], str, str]] = [
    ({"max_output_tokens": 0}, "max_output_tokens", "a positive integer"),
    ({"max_output_tokens": "5"}, "max_output_tokens", "got a string"),
    ({"temperature": True}, "temperature", "a number from 0 to 2, got true"),
    ({"top_p": "x"}, "top_p", "a number"),
    ({"user": 5}, "user", "a string"),
    ({"tools": [TOOL], "parallel_tool_calls": "yes"}, "parallel_tool_calls", "true or false"),
    ({"stream": 1}, "stream", "true or false"),
    ({"store": "no"}, "store", "true or false"),
    ({"instructions": ["x"]}, "instructions", "a string, got an array"),
    ({"previous_response_id": 5}, "previous_response_id", "a string"),
    ({"truncation": "middle"}, "truncation", "'auto' or 'disabled'"),
    ({"metadata": {"k": 1}}, "metadata", "an object of strings"),
    ({"include": "reasoning.encrypted_content"}, "include", "an array of strings"),
    ({"include": [5]}, "include", "an array of strings"),
    ({"top_logprobs": 21}, "top_logprobs", "from 0 to 20"),
    ({"tools": {"type": "function"}}, "tools", "an array of tools"),
    ({"tools": [5]}, "tools[0]", "a tool (an object with a 'type')"),
    ({"tools": [{"type": "function"}]}, "tools[0].name", "is required"),
    ({"tools": [{**TOOL, "parameters": "{}"}]}, "tools[0].parameters", "an object"),
    ({"tools": [{**TOOL, "strict": "yes"}]}, "tools[0].strict", "true or false"),
    ({"tools": [TOOL], "tool_choice": {"type": "function"}}, "tool_choice", "'auto', 'none'"),
    ({"text": "json"}, "text", "an object"),
    ({"text": {"format": {"type": "yaml"}}}, "text.format", "text, json_object or json_schema"),
    (
        {"text": {"format": {"type": "json_schema", "schema": SCHEMA}}},
        "text.format.name",
        "required",
    ),
    (
        {"text": {"format": {"type": "json_schema", "name": "n"}}},
        "text.format.schema",
        "JSON schema",
    ),
    ({"text": {"verbosity": "loud"}}, "text.verbosity", "got 'loud'"),
    ({"reasoning": "high"}, "reasoning", "an object"),
    ({"reasoning": {"effort": "extreme"}}, "reasoning.effort", "one of none, minimal, low"),
    ({"reasoning": {"summary": "all"}}, "reasoning.summary", "one of auto, concise, detailed"),
]


@pytest.mark.parametrize(("body", "param", "says"), ILL_TYPED)
def test_an_ill_typed_field_is_refused_naming_it(
    body: dict[str, Any], param: str, says: str
) -> None:
    """Each ill-typed field is a 400 whose param names it and whose message says what it must
    be."""
    error = refused(body)
    assert (error.param, error.status) == (param, 400)
    assert says in error.message


FIELDS = [
    "model", "instructions", "max_output_tokens", "metadata", "parallel_tool_calls", "reasoning",
    "store", "temperature", "text", "tool_choice", "tools", "top_p", "truncation", "user",
    "top_logprobs", "stream",
]  # fmt: skip
SHAPES = JsonShapes(["type", "name", "format", "effort", "summary", "schema", "verbosity", "k"])
PLAUSIBLE = {
    "model": st.just("m"),
    "tools": st.lists(st.just(TOOL) | st.just({"type": "function", "name": "f"}), max_size=2),
    "tool_choice": st.sampled_from(["auto", "none", {"type": "function", "name": "get"}]),
    "text": st.sampled_from(
        [
            {"format": {"type": "json_object"}},
            {"format": {"type": "json_schema", "name": "n", "schema": SCHEMA}},
        ]
    ),
    "reasoning": st.fixed_dictionaries(
        {}, optional={"effort": st.sampled_from(["low", "high"]), "summary": st.just("auto")}
    ),
    "metadata": st.dictionaries(st.text(max_size=3), st.text(max_size=3), max_size=2),
    "temperature": st.floats(0, 2),
    "max_output_tokens": st.integers(1, 100),
}


@given(
    st.fixed_dictionaries(
        {}, optional={name: PLAUSIBLE.get(name, st.nothing()) | SHAPES.any for name in FIELDS}
    )
)
def test_a_body_chat_params_accepts_has_a_response_the_sdk_reads(body: dict[str, Any]) -> None:
    """Whatever body chat_params accepts, the response shell echoing it is a Response the SDK
    reads (and an ill-typed body is a 400, never a crash)."""
    try:
        wire.chat_params(body)
    except InvalidChatRequest:
        return
    shell = wire.response_shell(
        {**body, "model": "m"}, response_id="resp_1", created_at=1, previous_response_id=None
    )
    valid_response(shell)
