"""Anthropic's Messages requests in chat terms (proxy/surfaces/messages_wire.py): the
conversation, the parameters, the checks, and what only Anthropic runs."""

from __future__ import annotations

from typing import Any

import pytest

from kernel.conversation import chain, derived_id
from kernel.errors import InvalidChatRequest, UnsupportedItem, UnsupportedTool
from middleware.condensing.split import units
from proxy.surfaces.messages_wire import TOOL_ERROR, read_request

TOOLS = [
    {
        "name": "Read",
        "description": "Read a file",
        "input_schema": {"type": "object", "properties": {"file_path": {"type": "string"}}},
    }
]


def body(messages: list[Any], **fields: Any) -> dict[str, Any]:
    return {"model": "claude-sonnet-4-5", "max_tokens": 64, "messages": messages, **fields}


def agent_turn(call_id: str = "toolu_1", text: str = "Reading.") -> list[dict[str, Any]]:
    """An assistant's text and tool_use, then the user's tool_result and a note."""
    return [
        {
            "role": "assistant",
            "content": [
                {"type": "thinking", "thinking": "I should read it.", "signature": "sig"},
                {"type": "text", "text": text},
                {"type": "tool_use", "id": call_id, "name": "Read", "input": {"file_path": "a.py"}},
            ],
        },
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": call_id, "content": "print('hi')"},
                {"type": "text", "text": "go on"},
            ],
        },
    ]


def test_a_claude_code_turn_becomes_chat_messages() -> None:
    """System blocks join into one system message; tool_use becomes tool_calls beside its text,
    a tool_result a tool message before the user's own text; thinking is counted, not sent."""
    made = read_request(
        body(
            [{"role": "user", "content": "Fix a.py"}, *agent_turn()],
            system=[
                {"type": "text", "text": "You are Claude Code."},
                {"type": "text", "text": "Be brief.", "cache_control": {"type": "ephemeral"}},
            ],
            tools=TOOLS,
        ),
        native=False,
    )
    assert made.messages == (
        {"role": "system", "content": "You are Claude Code.\n\nBe brief."},
        {"role": "user", "content": "Fix a.py"},
        {
            "role": "assistant",
            "content": "Reading.",
            "tool_calls": [
                {
                    "id": "toolu_1",
                    "type": "function",
                    "function": {"name": "Read", "arguments": '{"file_path":"a.py"}'},
                },
            ],
        },
        {"role": "tool", "tool_call_id": "toolu_1", "content": "print('hi')"},
        {"role": "user", "content": "go on"},
    )
    assert made.thinking == ("I should read it.",)
    assert made.params["tools"][0]["function"]["name"] == "Read"
    assert made.params["max_tokens"] == 64


def test_a_call_and_its_result_are_one_unit_for_the_split() -> None:
    """The split's units keep the assistant's tool_calls with their tool messages."""
    made = read_request(body([{"role": "user", "content": "go"}, *agent_turn()]), native=False)
    assert units(made.messages) == [(0, 1), (1, 3), (3, 4)]


def test_cache_markers_do_not_change_the_conversation() -> None:
    """Moving cache_control markers (and a block list for a string) changes no chat message,
    so the prefix chain and the derived id hold from turn to turn."""
    first = [
        {
            "role": "user",
            "content": [{"type": "text", "text": "hi", "cache_control": {"type": "ephemeral"}}],
        }
    ]
    second = [{"role": "user", "content": "hi"}]
    a = read_request(body(first), native=False).messages
    b = read_request(body(second), native=False).messages
    assert a == b
    assert chain(a, 1, "v") == chain(b, 1, "v")
    assert derived_id("t", a) == derived_id("t", b)


def test_an_error_result_says_so() -> None:
    """is_error is written into the tool message's text (chat has no field for it)."""
    turn = agent_turn()
    turn[1]["content"][0]["is_error"] = True
    made = read_request(body([{"role": "user", "content": "go"}, *turn]), native=False)
    assert made.messages[2]["content"] == TOOL_ERROR + "print('hi')"


def test_a_result_without_its_call_is_refused() -> None:
    """A tool_result whose tool_use_id no earlier tool_use has is a 400 naming the field."""
    messages = [{"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_x"}]}]
    with pytest.raises(InvalidChatRequest) as caught:
        read_request(body(messages), native=False)
    assert caught.value.param == "messages[0].content[0].tool_use_id"
    assert "toolu_x" in caught.value.message


@pytest.mark.parametrize(
    ("fields", "param"),
    [
        ({"max_tokens": None}, "max_tokens"),
        ({"max_tokens": 0}, "max_tokens"),
        ({"messages": []}, "messages"),
        ({"messages": [{"role": "robot", "content": "x"}]}, "messages[0].role"),
        (
            {"messages": [{"role": "user", "content": [{"type": "hologram"}]}]},
            "messages[0].content[0].type",
        ),
        ({"messages": [{"role": "user", "content": ""}]}, "messages[0].content"),
        (
            {
                "messages": [
                    {
                        "role": "user",
                        "content": [{"type": "text", "text": "see"}, {"type": "image"}],
                    }
                ]
            },
            "messages[0].content[1].source",
        ),
        (
            {
                "messages": [
                    {
                        "role": "user",
                        "content": [{"type": "image", "source": {"type": "url", "url": "x.png"}}],
                    }
                ]
            },
            "messages[0].content[0].source.url",
        ),
        ({"system": 3}, "system"),
        ({"tools": [{"name": "x"}]}, "tools[0].input_schema"),
        ({"tool_choice": {"type": "sometimes"}}, "tool_choice"),
        ({"stop_sequences": "END"}, "stop_sequences"),
        ({"temperature": "hot"}, "temperature"),
        ({"temperature": 1.5}, "temperature"),
        ({"top_p": -0.1}, "top_p"),
        ({"top_k": 2.5}, "top_k"),
        ({"thinking": True}, "thinking"),
        ({"thinking": {"type": "enabled"}}, "thinking.budget_tokens"),
        ({"thinking": {"type": "enabled", "budget_tokens": 512}}, "thinking.budget_tokens"),
    ],
)
def test_bad_fields_are_named(fields: dict[str, Any], param: str) -> None:
    """Each malformed field is a 400 whose param is its path."""
    given = body([{"role": "user", "content": "hi"}])
    given.update(fields)
    if given["max_tokens"] is None:
        del given["max_tokens"]
    with pytest.raises(InvalidChatRequest) as caught:
        read_request(given, native=False)
    assert caught.value.param == param


@pytest.mark.parametrize(
    "thinking",
    [
        {"type": "enabled", "budget_tokens": 1024},
        {"type": "adaptive", "display": "omitted"},
        {"type": "disabled"},
        {"type": "between_tools"},
    ],
)
def test_thinking_anthropic_takes_is_taken_and_not_sent_to_chat(thinking: dict[str, Any]) -> None:
    """Each thinking setting Anthropic's API takes is taken; a chat upstream is sent none."""
    read = read_request(body([{"role": "user", "content": "hi"}], thinking=thinking), native=False)
    assert "thinking" not in read.params


def test_what_only_anthropic_runs_is_refused_for_other_models() -> None:
    """Server tools, their blocks and MCP servers are refused unless the upstream speaks the
    Messages API itself."""
    search = [{"type": "web_search_20250305", "name": "web_search"}]
    with pytest.raises(UnsupportedTool):
        read_request(body([{"role": "user", "content": "hi"}], tools=search), native=False)
    with pytest.raises(UnsupportedItem):
        read_request(body([{"role": "user", "content": "hi"}], mcp_servers=[{}]), native=False)
    used = [
        {"role": "user", "content": "hi"},
        {
            "role": "assistant",
            "content": [{"type": "server_tool_use", "id": "s", "name": "web_search", "input": {}}],
        },
    ]
    with pytest.raises(UnsupportedItem):
        read_request(body(used), native=False)
    native = read_request(body(used, tools=search), native=True)
    assert native.messages[-1]["content"].startswith("[server_tool_use web_search")
    assert "tools" not in native.params


def test_parameters_become_chat_parameters() -> None:
    """stop_sequences, sampling, tool_choice (parallel off), stream and output format."""
    made = read_request(
        body(
            [{"role": "user", "content": "hi"}],
            tools=TOOLS,
            stop_sequences=["END"],
            temperature=0.2,
            top_p=0.9,
            top_k=5,
            tool_choice={"type": "any", "disable_parallel_tool_use": True},
            stream=True,
            output_format={"type": "json_schema", "schema": {"type": "object"}},
            metadata={"user_id": "u"},
        ),
        native=False,
    )
    params = made.params
    assert params["stop"] == ["END"]
    assert (params["temperature"], params["top_p"], params["top_k"]) == (0.2, 0.9, 5)
    assert params["tool_choice"] == "required"
    assert params["parallel_tool_calls"] is False
    assert params["stream"] is True
    assert params["stream_options"] == {"include_usage": True}
    assert params["response_format"]["json_schema"]["schema"] == {"type": "object"}
    assert "metadata" not in params
    assert "user" not in params


def test_images_and_documents_become_parts() -> None:
    """A base64 image is a data URL part; a text document its text; a PDF a file part."""
    content = [
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AAA"}},
        {
            "type": "document",
            "title": "Notes",
            "source": {"type": "text", "media_type": "text/plain", "data": "n1"},
        },
        {
            "type": "document",
            "source": {"type": "base64", "media_type": "application/pdf", "data": "UERG"},
        },
        {"type": "text", "text": "What is in them?"},
    ]
    made = read_request(body([{"role": "user", "content": content}]), native=False)
    parts = made.messages[0]["content"]
    assert parts[0] == {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAA"}}
    assert parts[1] == {"type": "text", "text": "Document: Notes\nn1"}
    assert parts[2]["file"]["file_data"] == "data:application/pdf;base64,UERG"
    assert parts[3] == {"type": "text", "text": "What is in them?"}


def test_a_compaction_block_stands_for_what_came_before() -> None:
    """The messages before a compaction block are gone; its summary is a system message."""
    messages = [
        {"role": "user", "content": "old question"},
        {
            "role": "assistant",
            "content": [
                {"type": "compaction", "content": "Summary: old."},
                {"type": "text", "text": "Carrying on."},
            ],
        },
        {"role": "user", "content": "new question"},
    ]
    made = read_request(body(messages, system="Be kind."), native=False)
    assert [(m["role"], m["content"]) for m in made.messages] == [
        ("system", "Be kind."),
        ("system", "Summary: old."),
        ("assistant", "Carrying on."),
        ("user", "new question"),
    ]
    assert made.compacted == 1


def test_deferred_tools_load_when_a_tool_search_finds_them() -> None:
    """A defer_loading tool is sent only once a tool_reference in a result names it."""
    deferred = {**TOOLS[0], "name": "Lint", "defer_loading": True}
    plain = read_request(
        body([{"role": "user", "content": "hi"}], tools=[*TOOLS, deferred]), native=False
    )
    assert [t["function"]["name"] for t in plain.params["tools"]] == ["Read"]
    found = [
        {"role": "user", "content": "lint it"},
        {
            "role": "assistant",
            "content": [{"type": "tool_use", "id": "t1", "name": "Read", "input": {}}],
        },
        {
            "role": "user",
            "content": [
                {
                    "type": "tool_result",
                    "tool_use_id": "t1",
                    "content": [{"type": "tool_reference", "tool_name": "Lint"}],
                }
            ],
        },
    ]
    made = read_request(body(found, tools=[*TOOLS, deferred]), native=False)
    assert [t["function"]["name"] for t in made.params["tools"]] == ["Read", "Lint"]
    assert made.messages[-1]["content"] == "[tool loaded: Lint]"


def test_every_chat_message_remembers_its_blocks() -> None:
    """Each chat message maps back to the blocks it was written from (the native road)."""
    system = [{"type": "text", "text": "S", "cache_control": {"type": "ephemeral"}}]
    made = read_request(
        body([{"role": "user", "content": "go"}, *agent_turn()], system=system), native=False
    )
    origins = [made.origins[id(message)] for message in made.messages]
    assert [o.role for o in origins] == ["prompt", "user", "assistant", "user", "user"]
    assert origins[0].blocks == tuple(system)
    assert origins[2].blocks[0]["signature"] == "sig"  # the thinking block rides along
    assert origins[3].blocks[0]["type"] == "tool_result"
