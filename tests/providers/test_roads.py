"""The road a chat request takes to Anthropic or Gemini, chosen before anything is sent.

One test per boundary of what overspill's translations write: a request they take, one they
leave to litellm and why, the 400s that stay theirs, and the choice as a plain answer (a
`Road`), never an exception, whatever the request holds.
"""

from __future__ import annotations

import contextlib
from typing import Any

import orjson
import pytest
import respx
from hypothesis import given, settings
from hypothesis import strategies as st

from kernel.errors import InvalidChatRequest
from kernel.types import RequestContext
from providers import translation
from providers.anthropic import AnthropicProvider, AnthropicWire
from providers.gemini import GeminiWire
from providers.roads import Road, choose, header_safe
from providers.translated import TranslatedProvider
from providers.transport import Upstream
from proxy.http import parse_chat_request
from tests.conftest import settings_from
from tests.providers import test_anthropic_wire, test_gemini_wire
from tests.reliability import examples

pytestmark = pytest.mark.usefixtures("no_aiohttp")

ANTHROPIC = (
    "model_list:\n  - model_name: c\n    litellm_params:\n"
    "      {model: anthropic/claude-sonnet-4-5, api_key: sk-ant-k, api_base: 'http://mock.test'}\n"
)
GEMINI = (
    "model_list:\n  - model_name: g\n    litellm_params:\n"
    "      {model: gemini/gemini-2.5-flash, api_key: k}\n"
)
HI = [{"role": "user", "content": "hi"}]


def anthropic_wire(drop_params: bool = False) -> AnthropicWire:
    return AnthropicWire(settings_from(ANTHROPIC).model_list[0], drop_params)


def gemini_wire(drop_params: bool = False) -> GeminiWire:
    return GeminiWire(settings_from(GEMINI).model_list[0], drop_params)


def road(wire: AnthropicWire | GeminiWire, **fields: Any) -> Road:
    body = {"model": "m", "messages": HI, **fields}
    return choose(parse_chat_request(orjson.dumps(body)), wire)


@pytest.mark.parametrize("wire", [anthropic_wire, gemini_wire])
def test_what_the_translation_writes_takes_its_road(wire: Any) -> None:
    """Text, tools, tool choice and sampling parameters: overspill's own translation."""
    tool = {"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}
    assert road(wire(), temperature=0.2, max_tokens=9, tools=[tool], tool_choice="auto") == Road(
        "own"
    )


@pytest.mark.parametrize("wire", [anthropic_wire, gemini_wire])
def test_what_only_litellm_writes_takes_litellms_road_and_says_why(wire: Any) -> None:
    """JSON mode is litellm's to write: its road, with the parameter as the reason."""
    assert road(wire(), response_format={"type": "json_object"}) == Road(
        "litellm", "response_format"
    )


@pytest.mark.parametrize(
    ("wire", "part", "why"),
    [
        (anthropic_wire, {"type": "file", "file": {"file_data": "x"}}, "type 'file'"),
        (gemini_wire, {"type": "image_url", "image_url": {"url": "https://x.test/a.png"}}, "URL"),
    ],
)
def test_a_part_only_litellm_writes_is_named_with_where_it_is(
    wire: Any, part: dict[str, Any], why: str
) -> None:
    """A message part the translation does not write sends the request to litellm, the reason
    saying which part."""
    messages = [{"role": "user", "content": "a"}, {"role": "user", "content": [part]}]
    chosen = road(wire(), messages=messages)
    assert chosen.name == "litellm"
    assert chosen.why.startswith("messages[1].content[0]")
    assert why in chosen.why


@pytest.mark.parametrize("wire", [anthropic_wire, gemini_wire])
def test_an_unsupported_parameter_stays_the_translations_400(wire: Any) -> None:
    """`logit_bias` (no equivalent upstream) is refused by the translation even beside a part
    only litellm writes; with drop_params that part decides; a parameter only litellm writes
    still goes to litellm."""
    file = [{"role": "user", "content": [{"type": "file", "file": {"file_data": "x"}}]}]
    assert road(wire(), logit_bias={"1": 1}, messages=file) == Road("own")
    assert road(wire(drop_params=True), logit_bias={"1": 1}, messages=file).name == "litellm"
    both = road(wire(), logit_bias={"1": 1}, response_format={"type": "json_object"})
    assert both == Road("litellm", "response_format")


def test_no_exception_decides_a_road() -> None:
    """The translations raise nothing to hand a request on: the signal is gone."""
    assert not hasattr(translation, "LeftToLitellm")


@settings(max_examples=examples(100, 2000), deadline=None)
@given(
    chat=st.lists(test_anthropic_wire.messages | test_gemini_wire.messages, max_size=4),
    fields=st.dictionaries(
        st.sampled_from(["tools", "response_format", "logit_bias", "safety_settings", "n"]),
        test_gemini_wire.json_values | st.lists(test_gemini_wire.tools, max_size=2),
    ),
    stream=st.booleans(),
)
def test_any_request_gets_a_road_and_its_translation_agrees(
    chat: list[dict[str, Any]], fields: dict[str, Any], stream: bool
) -> None:
    """Whatever a request holds, the choice is a road (never an exception), and a request
    kept on overspill's road is written or refused with a 400, never found to be litellm's
    half-way through."""
    for wire in (anthropic_wire(), gemini_wire()):
        body = {"model": "m", "messages": chat, "stream": stream, **fields}
        try:
            request = parse_chat_request(orjson.dumps(body))
        except InvalidChatRequest:
            return  # the surface's 400 before any road
        chosen = choose(request, wire)
        if chosen.name == "own":
            with contextlib.suppress(InvalidChatRequest):
                wire.write(request)


def test_a_reason_is_a_header_value() -> None:
    """A reason names the client's own keys: escaped into printable ASCII, bounded."""
    assert header_safe("messages[0].role 'r\u00f4le\\n'\r\n") == (
        "messages[0].role 'r\\xf4le\\\\n'\\r\\n"
    )
    assert len(header_safe("x" * 1000)) == 200


@respx.mock
async def test_the_litellm_road_is_noted_on_the_request(client: Upstream) -> None:
    """A request on the litellm road says why in its notes (its log line, span and
    `x-overspill-litellm` header); one on overspill's road notes nothing."""
    entry = settings_from(ANTHROPIC).model_list[0]
    litellm = TranslatedProvider(entry, client)
    provider = AnthropicProvider(entry, client, litellm)
    answer = {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "model": "claude-sonnet-4-5",
        "content": [{"type": "text", "text": "ok"}],
        "stop_reason": "end_turn",
        "usage": {"input_tokens": 3, "output_tokens": 1},
    }
    route = respx.post("http://mock.test/v1/messages").respond(200, json=answer)
    own, left = RequestContext("a", "t"), RequestContext("b", "t")
    plain = parse_chat_request(orjson.dumps({"model": "c", "messages": HI}))
    schema = {"name": "s", "schema": {"type": "object", "properties": {"a": {"type": "string"}}}}
    json_mode = {"type": "json_schema", "json_schema": schema}
    fancy = parse_chat_request(
        orjson.dumps({"model": "c", "messages": HI, "response_format": json_mode})
    )
    try:
        await provider.complete(plain, own)
        await provider.complete(fancy, left)
    finally:
        await provider.aclose()
    assert route.call_count == 2
    assert own.notes == {}
    assert left.notes == {"litellm": "response_format"}
    assert "output_format" not in orjson.loads(route.calls[0].request.content)
    sent = orjson.loads(route.calls[1].request.content)
    assert sent["output_format"]["type"] == "json_schema", "written by litellm's translation"
