"""The Responses API's input items: checked, turned into chat messages, and back."""

from __future__ import annotations

import copy
from typing import Any

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from kernel.errors import InvalidChatRequest, UnsupportedItem
from proxy.http import parse_chat_request
from proxy.surfaces import responses_wire as wire
from tests.providers.fuzzing import JsonShapes
from tests.proxy.surfaces.sdk import INPUT_ITEM

PNG = "data:image/png;base64,iVBORw0KGgo="
CALL = {"type": "function_call", "call_id": "call_1", "name": "get", "arguments": '{"a": 1}'}
OUTPUT = {"type": "function_call_output", "call_id": "call_1", "output": "sunny"}


def user(content: Any) -> dict[str, Any]:
    return {"type": "message", "role": "user", "content": content}


def assistant(content: Any) -> dict[str, Any]:
    return {"type": "message", "role": "assistant", "content": content}


def output_text(text: str) -> dict[str, Any]:
    return {"type": "output_text", "text": text, "annotations": []}


def refused(call: Any) -> InvalidChatRequest:
    with pytest.raises(InvalidChatRequest) as caught:
        call()
    return caught.value


def test_a_string_input_is_one_user_message() -> None:
    """A string is one user message item with the string as its content."""
    assert wire.check_input("hi") == ({"type": "message", "role": "user", "content": "hi"},)


def test_an_easy_message_gets_its_type_and_keeps_its_string() -> None:
    """A `{role, content}` message becomes `type: message`; its content string stays a string."""
    assert wire.check_input([{"role": "developer", "content": "be brief"}]) == (
        {"role": "developer", "content": "be brief", "type": "message"},
    )


def test_a_typed_item_is_kept_as_it_came() -> None:
    """An item that already has its type is the client's own object (no copy)."""
    item = {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "x"}]}
    assert wire.check_input([item])[0] is item


def test_an_untyped_item_with_only_an_id_is_an_item_reference() -> None:
    """`{id}` is the SDK's item reference (its type may be left out)."""
    assert wire.check_input([{"id": "msg_1"}]) == ({"id": "msg_1", "type": "item_reference"},)


def test_items_only_openai_runs_pass_the_check() -> None:
    """A built-in tool's item is valid input (a native upstream runs it); translating refuses."""
    item = {"type": "web_search_call", "id": "ws_1", "status": "completed", "action": {}}
    assert wire.check_input([item]) == (item,)


def test_the_path_names_where_the_input_came_from() -> None:
    """`where` prefixes every param path."""
    assert refused(lambda: wire.check_input(5, "instructions")).param == "instructions"


BAD_INPUTS: list[tuple[Any, str, str]] = [
    (5, "input", "a string or an array of input items, got 5"),
    (None, "input", "'input' is required"),
    ([5], "input[0]", "an input item (an object), got 5"),
    ([{"content": "x"}], "input[0].type", "needs a 'type' (one of message, function_call"),
    ([{"type": "bogus"}], "input[0].type", "got 'bogus'"),
    ([{"type": 5}], "input[0].type", "web_search_call"),
    ([{"type": ["message"]}], "input[0].type", "got an array"),
    ([{"role": "robot", "content": "x"}], "input[0].role", "one of user, assistant, system"),
    ([user(5)], "input[0].content", "a string or an array of content parts"),
    ([user([5])], "input[0].content[0]", "a content part (an object)"),
    ([user([{"type": "output_text", "text": "x"}])], "input[0].content[0].type", "input_text"),
    ([user([{"type": {"x": 1}}])], "input[0].content[0].type", "got an object"),
    ([user([{"type": "input_text"}])], "input[0].content[0].text", "is required"),
    ([user([{"type": "input_text", "text": 1}])], "input[0].content[0].text", "a string"),
    ([user([{"type": "input_image"}])], "input[0].content[0]", "'image_url' or 'file_id'"),
    (
        [user([{"type": "input_image", "image_url": PNG, "detail": "max"}])],
        "input[0].content[0].detail",
        "one of low, high, auto, original",
    ),
    ([user([{"type": "input_image", "image_url": 3}])], "input[0].content[0].image_url", "string"),
    (
        [user([{"type": "input_image", "image_url": "photo.png"}])],
        "input[0].content[0].image_url",
        "an http(s) URL or a data: URL, got 'photo.png'",
    ),
    ([user([{"type": "input_file", "filename": "a"}])], "input[0].content[0]", "'file_data'"),
    (
        [assistant([{"type": "input_image", "image_url": PNG}])],
        "input[0].content[0].type",
        "refusal",
    ),
    ([assistant([{"type": "refusal"}])], "input[0].content[0].refusal", "is required"),
    ([{**CALL, "arguments": {"a": 1}}], "input[0].arguments", "a string, got an object"),
    ([{"type": "function_call", "name": "f", "arguments": ""}], "input[0].call_id", "required"),
    ([{**OUTPUT, "output": 5}], "input[0].output", "a string or an array of content parts"),
    ([{**OUTPUT, "output": [{"type": "x"}]}], "input[0].output[0].type", "input_text"),
    ([{"type": "compaction"}], "input[0].encrypted_content", "is required"),
    ([{"type": "reasoning", "summary": "x"}], "input[0].summary", "an array"),
]


@pytest.mark.parametrize(("value", "param", "says"), BAD_INPUTS)
def test_bad_input_is_refused_naming_its_path(value: Any, param: str, says: str) -> None:
    """Each malformed input is a 400 whose param is the path and whose message says what to
    send."""
    error = refused(lambda: wire.check_input(value))
    assert (error.param, error.status) == (param, 400)
    assert says in error.message


KEYS = [
    "type", "role", "content", "text", "call_id", "name", "arguments", "output", "id",
    "image_url", "file_id", "file_data", "file_url", "detail", "summary", "encrypted_content",
]  # fmt: skip
SHAPES = JsonShapes(KEYS)
PART = SHAPES.shaped(
    ["input_text", "input_image", "input_file", "output_text", "refusal", "x"],
    text=st.text(max_size=3),
    image_url=st.just(PNG),
    file_id=st.just("file_1"),
    detail=st.sampled_from(["auto", "low", "bad"]),
)
ITEM_ROLES = st.sampled_from(["user", "assistant", "system", "developer", "tool"])
ITEM = SHAPES.shaped(
    ["message", "function_call", "function_call_output", "reasoning", "compaction", "mcp_call"],
    role=ITEM_ROLES,
    content=st.text(max_size=3) | st.lists(PART, max_size=3),
    call_id=st.just("call_1"),
    name=st.just("f"),
    arguments=st.just("{}"),
    output=st.text(max_size=3) | st.lists(PART, max_size=2),
    summary=st.just([]),
    encrypted_content=st.just("x"),
)


@given(st.lists(ITEM, max_size=4) | SHAPES.any)
def test_any_json_input_is_accepted_or_refused_as_invalid(value: Any) -> None:
    """Whatever JSON comes as `input`, the check answers items or a 400, never a crash; what it
    accepts translates, or is refused as a 400 too."""
    try:
        items = wire.check_input(value)
        wire.to_messages(items)
    except InvalidChatRequest as error:
        refusal = error
    else:
        assert all(isinstance(item["type"], str) for item in items)
        return
    assert refusal.param is not None


TEXT_PART = st.fixed_dictionaries(
    {"type": st.sampled_from(["input_text", "output_text", "refusal"]), "text": st.text(max_size=3)}
)
EASY = st.fixed_dictionaries(
    {"role": ITEM_ROLES, "content": st.text(max_size=3) | st.lists(TEXT_PART | PART, max_size=2)},
    optional={"type": st.just("message") | SHAPES.any},
)
CALLS = st.fixed_dictionaries(
    {"type": st.sampled_from(["function_call", "function_call_output"])},
    optional={
        name: st.just("x") | SHAPES.any for name in ("call_id", "name", "arguments", "output")
    },
)


def agree(item: Any) -> None:
    quick = wire._quick(item)
    if quick is not None:
        assert quick == wire._check_item(item, "input[0]")


@pytest.mark.parametrize("role", ["user", "assistant", "system", "developer", "tool", None])
@pytest.mark.parametrize("kind", ["input_text", "output_text", "refusal", "input_image", None])
@pytest.mark.parametrize("typed", [True, False])
def test_the_quick_check_agrees_on_every_text_message(role: Any, kind: Any, typed: bool) -> None:
    """For each role and text part type, the fast pass for the usual items accepts only what
    the full check accepts, normalised the same."""
    for content in ("x", [{"type": kind, "text": "x"}], [{"type": kind, "text": 1}]):
        agree({"role": role, "content": content} | ({"type": "message"} if typed else {}))


@given(EASY | CALLS | ITEM)
def test_the_quick_check_agrees_on_any_item(item: Any) -> None:
    """On any item, the fast pass accepts only what the full check accepts."""
    agree(item)


def messages_of(*items: dict[str, Any], instructions: str | None = None) -> list[dict[str, Any]]:
    """The chat messages of items that first pass the input check."""
    return wire.to_messages(wire.check_input(list(items)), instructions)


def test_instructions_come_first_as_a_system_message() -> None:
    """`instructions` is the first message, a system message."""
    assert messages_of(user("hi"), instructions="be brief") == [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": "hi"},
    ]


def test_developer_messages_are_system_messages() -> None:
    """Many chat servers refuse the developer role, so it is sent as system."""
    message = {"type": "message", "role": "developer", "content": "rules"}
    assert messages_of(message) == [{"role": "system", "content": "rules"}]


def test_a_single_text_part_is_plain_text() -> None:
    """One input_text part becomes the message's string content."""
    assert messages_of(user([{"type": "input_text", "text": "hi"}])) == [
        {"role": "user", "content": "hi"}
    ]


def test_images_and_files_become_chat_parts() -> None:
    """input_text, input_image (url, or file_id as a file part; detail kept, else auto) and
    input_file become chat's text, image_url and file parts."""
    content = [
        {"type": "input_text", "text": "look"},
        {"type": "input_image", "image_url": PNG, "detail": "low"},
        {"type": "input_image", "image_url": "https://x.test/a.png"},
        {"type": "input_image", "file_id": "file_img"},
        {
            "type": "input_file",
            "file_data": "data:application/pdf;base64,JVBE",
            "filename": "a.pdf",
        },
    ]
    assert messages_of(user(content))[0]["content"] == [
        {"type": "text", "text": "look"},
        {"type": "image_url", "image_url": {"url": PNG, "detail": "low"}},
        {"type": "image_url", "image_url": {"url": "https://x.test/a.png", "detail": "auto"}},
        {"type": "file", "file": {"file_id": "file_img"}},
        {
            "type": "file",
            "file": {"file_data": "data:application/pdf;base64,JVBE", "filename": "a.pdf"},
        },
    ]


def test_a_file_by_url_needs_an_upstream_that_fetches_it() -> None:
    """input_file with only a file_url cannot be written in chat: a 400 naming the part (with
    a file_id too, the file_id is sent)."""
    url = "https://x.test/a.pdf"
    content = [{"type": "input_text", "text": "read"}, {"type": "input_file", "file_url": url}]
    error = refused(lambda: messages_of(user(content)))
    assert isinstance(error, UnsupportedItem)
    assert error.param == "input[0].content[1].file_url"
    both = [{"type": "input_file", "file_url": url, "file_id": "file_1"}]
    assert messages_of(user(both))[0]["content"] == [
        {"type": "file", "file": {"file_id": "file_1"}}
    ]


def test_assistant_output_text_and_refusal_are_assistant_content() -> None:
    """An assistant's output_text (and refusal) parts are its content: one part as a string,
    several as text parts."""
    assert messages_of(assistant([output_text("hello")])) == [
        {"role": "assistant", "content": "hello"}
    ]
    parts = [output_text("a"), {"type": "refusal", "refusal": "no"}]
    assert messages_of(assistant(parts))[0]["content"] == [
        {"type": "text", "text": "a"},
        {"type": "text", "text": "no"},
    ]


def test_function_calls_join_the_assistant_message_before_them() -> None:
    """Consecutive function_call items become the preceding assistant message's tool_calls,
    the call_id as each call's id; a reasoning item between them changes nothing."""
    second = {**CALL, "call_id": "call_2", "name": "put"}
    reasoning = {"type": "reasoning", "id": "rs_1", "summary": []}
    messages = messages_of(user("go"), assistant("Let me check."), reasoning, CALL, second)
    assert messages[1] == {
        "role": "assistant",
        "content": "Let me check.",
        "tool_calls": [
            {
                "id": "call_1",
                "type": "function",
                "function": {"name": "get", "arguments": '{"a": 1}'},
            },
            {
                "id": "call_2",
                "type": "function",
                "function": {"name": "put", "arguments": '{"a": 1}'},
            },
        ],
    }


def test_a_function_call_without_assistant_text_starts_a_message() -> None:
    """A function_call after a user message starts an assistant message with content None."""
    assert messages_of(user("go"), CALL, OUTPUT)[1:] == [
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "get", "arguments": '{"a": 1}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": "sunny"},
    ]


def test_a_function_output_of_parts_is_rendered_as_text() -> None:
    """Output parts become the tool message's text; images and files are named, a data URL is
    not pasted."""
    output = [
        {"type": "input_text", "text": "found"},
        {"type": "input_image", "image_url": PNG},
        {"type": "input_image", "image_url": "https://x.test/a.png"},
        {"type": "input_file", "file_id": "file_9"},
        {"type": "input_file", "file_data": "data:application/pdf;base64,JV"},
    ]
    tool = messages_of(CALL, {**OUTPUT, "output": output})[1]
    assert (
        tool["content"] == "found\n[image]\n[image: https://x.test/a.png]\n[file: file_9]\n[file]"
    )


@pytest.mark.parametrize(
    ("items", "param", "call_id"),
    [
        ([user("x"), OUTPUT], "input[1].call_id", "call_1"),
        ([OUTPUT, CALL], "input[0].call_id", "call_1"),
        ([CALL, {**OUTPUT, "call_id": "call_9"}], "input[1].call_id", "call_9"),
    ],
)
def test_an_output_must_answer_an_earlier_call(
    items: list[dict[str, Any]], param: str, call_id: str
) -> None:
    """A function_call_output whose call_id no earlier function_call has is a 400 naming it."""
    error = refused(lambda: messages_of(*items))
    assert error.param == param
    assert f"answers call_id {call_id!r}" in error.message


def test_reasoning_items_are_dropped() -> None:
    """Chat has no place for reasoning items: they produce no message."""
    reasoning = {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": "x"}
    assert messages_of(user("a"), reasoning, assistant("b")) == [
        {"role": "user", "content": "a"},
        {"role": "assistant", "content": "b"},
    ]


def test_a_compaction_item_is_read_back_as_a_system_message() -> None:
    """overspill's own compaction item becomes a system message with the text it reads."""
    item = {"type": "compaction", "id": "cmp_1", "encrypted_content": "ovs:abc"}
    items = wire.check_input([item, user("next")])

    def read(found: Any) -> str | None:
        return "the summary" if found["encrypted_content"] == "ovs:abc" else None

    assert wire.to_messages(items, read_compaction=read) == [
        {"role": "system", "content": "the summary"},
        {"role": "user", "content": "next"},
    ]


def test_a_compaction_item_overspill_did_not_make_is_refused() -> None:
    """A compaction item it cannot read (another server's) is a 400 naming the item."""
    items = wire.check_input([user("a"), {"type": "compaction", "encrypted_content": "enc"}])
    error = refused(lambda: wire.to_messages(items))
    assert (error.param, error.code) == ("input[1]", "invalid_request")
    assert "compaction" in error.message


@pytest.mark.parametrize("kind", sorted(wire.OPENAI_ITEMS))
def test_items_only_openai_runs_are_refused_naming_their_type(kind: str) -> None:
    """An item only an upstream serving the Responses API runs is a 400 `unsupported_item`
    naming its type and what it needs."""
    error = refused(lambda: wire.to_messages([user("x"), {"type": kind, "id": "x_1"}]))
    assert isinstance(error, UnsupportedItem)
    assert (error.code, error.param) == ("unsupported_item", "input[1]")
    assert repr(kind) in error.message
    assert "needs an upstream that runs it" in error.message


def test_translation_leaves_the_items_as_they_were() -> None:
    """to_messages builds new messages: the client's items are not changed."""
    items = wire.check_input([user("go"), assistant("ok"), CALL, OUTPUT])
    before = copy.deepcopy(items)
    wire.to_messages(items)
    assert items == before


def test_the_messages_are_a_chat_request_overspill_accepts() -> None:
    """A conversation of every translated kind passes overspill's own chat request check."""
    content = [{"type": "input_text", "text": "a"}, {"type": "input_image", "image_url": PNG}]
    messages = messages_of(
        user(content), assistant("b"), CALL, OUTPUT, assistant([output_text("c")]), instructions="s"
    )
    request = parse_chat_request(orjson.dumps({"model": "m", "messages": messages}))
    assert list(request.messages) == messages


def test_to_items_writes_each_role_as_items_the_sdk_reads() -> None:
    """System, user and developer messages become message items, assistant text a message with
    output_text (with an id and status), its calls function_call items, a tool message a
    function_call_output; the SDK reads each as an input item."""
    call = {"id": "call_1", "type": "function", "function": {"name": "get", "arguments": "{}"}}
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "s"},
        {"role": "developer", "content": "d"},
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "u"},
                {"type": "image_url", "image_url": {"url": PNG}},
            ],
        },
        {"role": "assistant", "content": "a", "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "call_1", "content": "r"},
        {"role": "assistant", "content": None, "refusal": "no"},
    ]
    items = wire.to_items(messages)
    for item in items:
        INPUT_ITEM.validate_python(item)
    assert [item["type"] for item in items] == [
        "message", "message", "message", "message", "function_call", "function_call_output", "message",
    ]  # fmt: skip
    assert items[2]["content"][1] == {"type": "input_image", "image_url": PNG, "detail": "auto"}
    assert items[3]["id"].startswith("msg_")
    assert items[3]["status"] == "completed"
    assert items[3]["content"][0]["text"] == "a"
    assert items[4]["id"].startswith("fc_")
    assert items[4]["call_id"] == "call_1"
    assert items[5] == {"type": "function_call_output", "call_id": "call_1", "output": "r"}
    assert items[6]["content"] == [{"type": "refusal", "refusal": "no"}]


def test_to_items_refuses_a_role_responses_has_no_form_for() -> None:
    """A legacy `function` message has no item: a 400 saying so."""
    assert (
        "'function'"
        in refused(lambda: wire.to_items([{"role": "function", "content": "x"}])).message
    )


TEXT = st.text(max_size=5)
USER_PART = st.one_of(
    st.builds(lambda t: {"type": "input_text", "text": t}, TEXT),
    st.builds(
        lambda d: {"type": "input_image", "image_url": PNG, "detail": d},
        st.sampled_from(["auto", "low", "high"]),
    ),
    st.just({"type": "input_image", "file_id": "file_1"}),
    st.just({"type": "input_file", "file_data": "data:application/pdf;base64,JV", "filename": "a"}),
)
ASSISTANT_PART = st.one_of(
    st.builds(output_text, TEXT), st.builds(lambda t: {"type": "refusal", "refusal": t}, TEXT)
)


@st.composite
def conversations(draw: st.DrawFn) -> list[dict[str, Any]]:
    """Valid Responses input items: messages of every role, function calls and their outputs,
    reasoning items."""
    items: list[dict[str, Any]] = []
    calls: list[str] = []
    for step in draw(st.lists(st.sampled_from(range(6)), max_size=10)):
        if step == 0:
            role = draw(st.sampled_from(["user", "system", "developer"]))
            content = draw(TEXT | st.lists(USER_PART, max_size=3))
            items.append({"type": "message", "role": role, "content": content})
        elif step == 1:
            items.append(assistant(draw(TEXT | st.lists(ASSISTANT_PART, max_size=3))))
        elif step in (2, 3):
            calls.append(f"call_{len(calls)}")
            items.append({**CALL, "call_id": calls[-1], "arguments": draw(TEXT)})
        elif step == 4 and calls:
            output = draw(TEXT | st.lists(USER_PART, max_size=2))
            items.append({**OUTPUT, "call_id": draw(st.sampled_from(calls)), "output": output})
        else:
            items.append({"type": "reasoning", "id": "rs_1", "summary": []})
    return items


@given(conversations())
def test_chat_messages_survive_a_round_trip_through_items(items: list[dict[str, Any]]) -> None:
    """For the chat messages to_messages writes, to_messages(to_items(m)) == m, and every item
    to_items writes passes the input check."""
    messages = wire.to_messages(wire.check_input(items))
    again = wire.to_items(messages)
    assert wire.check_input(again) == tuple(again)
    assert wire.to_messages(again) == messages


def test_origins_name_the_item_each_message_starts_at() -> None:
    """With `origins`, each message's first item index is recorded (-1: the instructions)."""
    items = wire.check_input(
        [
            {"role": "user", "content": "hi"},
            {"type": "reasoning", "id": "rs_1", "summary": []},
            {"role": "assistant", "content": "let me look"},
            {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"},
            {"type": "function_call_output", "call_id": "c1", "output": "done"},
            {"role": "user", "content": "thanks"},
        ]
    )
    origins: list[int] = []
    messages = wire.to_messages(items, "Be brief.", origins=origins)
    assert [m["role"] for m in messages] == ["system", "user", "assistant", "tool", "user"]
    assert origins == [-1, 0, 2, 4, 5]
