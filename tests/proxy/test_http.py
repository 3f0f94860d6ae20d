"""Parsing a chat request: precise 400s, forbidden connection fields, byte-exact pass-through."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from kernel.errors import ForbiddenParameter, InvalidChatRequest
from proxy.http import edge_context, parse_chat_request, said_back, tenant_of

USER = {"role": "user", "content": "hi"}


def body(**fields: Any) -> bytes:
    return orjson.dumps({"model": "local", "messages": [USER], **fields})


def refusal(raw: bytes) -> InvalidChatRequest:
    with pytest.raises(InvalidChatRequest) as caught:
        parse_chat_request(raw)
    return caught.value


@pytest.mark.parametrize(
    ("raw", "message", "param"),
    [
        (b"{not json", "request body is not valid JSON", None),
        (b"[1, 2]", "request body must be a JSON object", None),
        (orjson.dumps({"messages": [USER]}), "'model' is required: expected a model name", "model"),
        (
            orjson.dumps({"model": 3, "messages": [USER]}),
            "'model' must be a model name, got 3",
            "model",
        ),
        (orjson.dumps({"model": "m"}), "'messages' is required", "messages"),
        (
            orjson.dumps({"model": "m", "messages": []}),
            "'messages' must be a non-empty array",
            "messages",
        ),
        (
            orjson.dumps({"model": "m", "messages": ["hi"]}),
            "'messages[0]' must be an object, got 'hi'",
            "messages[0]",
        ),
        (
            orjson.dumps({"model": "m", "messages": [USER, {"role": "robot"}]}),
            "'messages[1].role' must be one of",
            "messages[1]",
        ),
        (
            orjson.dumps({"model": "m", "messages": [{"role": "user", "content": 5}]}),
            "'messages[0].content' must be a string, an array of parts, or null",
            "messages[0]",
        ),
        (
            orjson.dumps({"model": "m", "messages": [{"role": "user", "content": ["x"]}]}),
            "'messages[0].content[0]' must be an object with a \"type\"",
            "messages[0]",
        ),
        (body(stream="yes"), "'stream' must be true or false, got 'yes'", "stream"),
        (body(overspill=[1]), "'overspill' must be an object of overspill options", "overspill"),
        (
            body(documents={"id": 1}),
            "'documents' must be an array of documents, got an object",
            "documents",
        ),
    ],
)
def test_bad_requests_name_the_field(raw: bytes, message: str, param: str | None) -> None:
    """Each malformed body is a 400 whose message and param say what to fix."""
    error = refusal(raw)
    assert error.http_status() == 400
    assert message in error.message
    assert error.param == param


@pytest.mark.parametrize(
    "field",
    ["api_base", "base_url", "api_key", "api_version", "custom_llm_provider", "organization",
     "extra_headers", "aws_access_key_id", "aws_region_name", "vertex_project", "azure_ad_token",
     "litellm_params", "mock_response", "success_callback"],
)  # fmt: skip
def test_connection_fields_are_refused(field: str) -> None:
    """A body field that would redirect traffic or borrow credentials is a 400 naming it."""
    error = refusal(body(**{field: "x"}))
    assert isinstance(error, ForbiddenParameter)
    assert error.param == field
    assert "config.yaml" in error.message


@pytest.mark.parametrize("container", ["extra_body", "metadata"])
def test_connection_fields_are_refused_when_nested(container: str) -> None:
    """The same fields hidden in extra_body or metadata are refused too."""
    error = refusal(body(**{container: {"api_base": "http://evil"}}))
    assert error.param == f"{container}.api_base"


def test_unchanged_request_keeps_its_bytes() -> None:
    """With nothing changed, the upstream receives the client's exact bytes."""
    raw = b'{"model":"local",  "messages":[{"role":"user","content":"hi"}],"seed":7}'
    request = parse_chat_request(raw)
    assert request.render("local") is raw


def test_renamed_model_changes_only_the_model() -> None:
    """When the upstream knows the model by another name, only `model` differs."""
    request = parse_chat_request(body(temperature=0, tools=[{"type": "function"}]))
    sent = orjson.loads(request.render("smollm2"))
    assert sent == {
        **orjson.loads(body(temperature=0, tools=[{"type": "function"}])),
        "model": "smollm2",
    }


def test_extension_fields_are_stripped() -> None:
    """`overspill` options are kept for the layers and never sent upstream."""
    request = parse_chat_request(body(overspill={"skip_history": True}))
    assert request.extensions == {"overspill": {"skip_history": True}}
    assert "overspill" not in orjson.loads(request.render("local"))


def test_copies_never_mutate_the_original() -> None:
    """with_messages and with_params return new requests and leave the original intact."""
    request = parse_chat_request(body(max_tokens=5))
    changed = request.with_messages([{"role": "user", "content": "other"}]).with_params(
        max_tokens=None, seed=1
    )
    assert request.messages == (USER,)
    assert request.body["max_tokens"] == 5
    assert request.raw is not None
    assert orjson.loads(changed.render("local")) == {
        "model": "local", "messages": [{"role": "user", "content": "other"}], "seed": 1,
    }  # fmt: skip


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**53), 2**53) | st.text(max_size=20),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3)
    ),
    max_leaves=10,
)


@given(
    extra=st.dictionaries(
        st.sampled_from(["temperature", "seed", "tools", "user", "stop", "n", "x_custom"]),
        json_values,
    )
)
def test_render_of_parse_is_the_body(extra: dict[str, Any]) -> None:
    """Any body with fields we do not model comes out exactly as it went in."""
    raw = orjson.dumps({"model": "local", "messages": [USER], **extra})
    request = parse_chat_request(raw)
    assert request.render("local") == raw
    assert orjson.loads(orjson.dumps(request.upstream_body("local"))) == orjson.loads(raw)


def test_tenant_ids_are_stable_and_do_not_reveal_the_key() -> None:
    """Tenants are derived from the key, differ per key, and never contain it."""
    assert tenant_of("sk-a") == tenant_of("sk-a") != tenant_of("sk-b")
    assert "sk-a" not in tenant_of("sk-a")
    assert tenant_of(None) == "anonymous"


# --- the edge: identity and the skip flag, resolved once -----------------------------------------


def edge(raw: bytes, **headers: str) -> tuple[Any, Any]:
    return edge_context(parse_chat_request(raw), headers, request_id="r", tenant="t")


def test_the_header_names_the_conversation() -> None:
    """X-Conversation-Id wins; the body is left as the client sent it."""
    raw = body()
    chat, ctx = edge(raw, **{"x-conversation-id": "conv-7"})
    assert ctx.conversation_id == "conv-7"
    assert chat.raw == raw


def test_metadata_conversation_id_is_read_and_never_forwarded() -> None:
    """metadata.conversation_id names the conversation and leaves the body; other keys stay."""
    chat, ctx = edge(body(metadata={"conversation_id": "conv-8", "team": "blue"}))
    assert ctx.conversation_id == "conv-8"
    assert chat.body["metadata"] == {"team": "blue"}
    assert b"conv-8" not in chat.render("local")


def test_metadata_holding_only_the_id_disappears() -> None:
    """A metadata object that only carried overspill's id is not forwarded at all."""
    chat, _ = edge(body(metadata={"conversation_id": "conv-9"}))
    assert "metadata" not in chat.body


def test_without_an_id_the_conversation_is_derived_lazily() -> None:
    """No id from the client: one is derived from tenant and opening, only when asked."""
    _, ctx = edge(body())
    assert ctx.conversation_hint is None
    assert ctx.conversation_id.startswith("d-")
    assert ctx.conversation_id == ctx.conversation_id


@pytest.mark.parametrize(
    ("raw", "headers", "skip"),
    [
        (body(), {}, False),
        (body(), {"x-overspill-skip-history": "1"}, True),
        (body(), {"x-overspill-skip-history": "No"}, False),
        (body(overspill={"skip_history": True}), {}, True),
        (body(overspill={"skip_history": True}), {"x-overspill-skip-history": "0"}, False),
    ],
)
def test_the_skip_flag_comes_from_the_header_or_the_extension(
    raw: bytes, headers: dict[str, str], skip: bool
) -> None:
    """The header wins over `overspill.skip_history`; both are read once, at the edge."""
    _, ctx = edge(raw, **headers)
    assert ctx.skip_history is skip


@pytest.mark.parametrize(
    ("raw", "headers", "param"),
    [
        (body(), {"x-overspill-skip-history": "maybe"}, "X-Overspill-Skip-History"),
        (body(overspill={"skip_history": "yes"}), {}, "overspill.skip_history"),
        (body(metadata={"conversation_id": 7}), {}, "metadata.conversation_id"),
        (body(), {"x-conversation-id": "has space"}, "X-Conversation-Id"),
    ],
)
def test_bad_identity_or_flags_are_a_400_naming_them(
    raw: bytes, headers: dict[str, str], param: str
) -> None:
    """A malformed id or flag is refused with what to fix, never silently ignored."""
    with pytest.raises(InvalidChatRequest) as caught:
        edge(raw, **headers)
    assert caught.value.param == param


def test_a_field_says_back_a_short_word_but_not_longer_text() -> None:
    """A role or a flag given as a short word is said back ("got 'robot'"); a longer string,
    a key pasted into the wrong field say, is only named as a string."""
    robot = refusal(b'{"model":"m","messages":[{"role":"robot","content":"x"}]}')
    assert str(robot.message).endswith("got 'robot'")
    pasted = refusal(body(stream="sk-1234567890abcdefghijklmnopqrstuv"))
    assert str(pasted.message).endswith("got a string")
    assert "sk-" not in str(pasted.message)


@pytest.mark.parametrize(
    ("value", "quote", "said"),
    [
        (0, False, "0"),
        (-1.5, False, "-1.5"),
        (1e308, False, "1e+308"),
        (10**30, False, "a number"),
        (True, False, "true"),
        ([1], False, "an array"),
        ({"a": 1}, False, "an object"),
        ([], False, "an empty array"),
        ({}, False, "an empty object"),
        ("x.png", True, "'x.png'"),
        ("data:" + "A" * 500, True, "'data:" + "A" * 95 + "'…"),
    ],
)
def test_a_value_is_said_back_as_json_writes_it(value: object, quote: bool, said: str) -> None:
    """Numbers and booleans are said back as sent, a number too long to read is named, an
    empty array or object is said to be empty, and a quoted string is cut to its first
    hundred characters."""
    assert said_back(value, quote) == said
