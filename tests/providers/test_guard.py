"""The answer checks every provider shares: SSE event cutting, shapes, the size bound."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kernel.errors import UpstreamTooLarge
from providers.guard import EventCutter, bad_response, json_object, sse_shaped
from tests.reliability import examples

EVENTS = [b'data: {"a":1}\n\n', b"event: x\ndata: {}\n\n", b"data: [DONE]\r\n\r\n"]


@pytest.mark.reliability("streams")
@given(st.lists(st.integers(min_value=0, max_value=60), max_size=8))
@settings(max_examples=examples(50, 2000))
def test_cutting_anywhere_gives_back_the_whole_events(cuts: list[int]) -> None:
    """However the bytes are split into chunks, only whole events come out, all of them."""
    data = b"".join(EVENTS)
    points = sorted({min(cut, len(data)) for cut in cuts})
    chunks = [data[a:b] for a, b in zip([0, *points], [*points, len(data)], strict=True)]
    cutter = EventCutter(1024, "p")
    out = []
    for chunk in chunks:
        events = cutter.feed(chunk)
        assert not events or events.endswith((b"\n\n", b"\r\n\r\n"))
        out.append(events)
    assert b"".join(out) == data
    assert cutter.rest() == b""


@pytest.mark.reliability("streams")
def test_an_unfinished_event_is_held_back() -> None:
    """Bytes after the last blank line wait for the rest of their event."""
    cutter = EventCutter(1024, "p")
    assert cutter.feed(b'data: {"a":1}\n\ndata: {"b"') == b'data: {"a":1}\n\n'
    assert cutter.rest() == b'data: {"b"'
    assert cutter.feed(b":2}\n") == b""
    assert cutter.feed(b"\n") == b'data: {"b":2}\n\n'


@pytest.mark.reliability("memory")
def test_one_event_over_the_limit_is_refused_while_it_grows() -> None:
    """An event over the limit raises as soon as the held part passes it."""
    cutter = EventCutter(100, "p")
    assert cutter.feed(b"data: " + b"x" * 60) == b""
    with pytest.raises(UpstreamTooLarge, match="single stream event"):
        cutter.feed(b"x" * 60)


@pytest.mark.reliability("memory")
def test_many_small_events_are_not_limited_together() -> None:
    """The limit is per event: a long stream of small events passes."""
    cutter = EventCutter(100, "p")
    for _ in range(100):
        assert cutter.feed(b"data: " + b"x" * 50 + b"\n\n")


@pytest.mark.reliability("upstream-bodies")
@pytest.mark.parametrize(
    ("body", "whole"),
    [(b'{"id":1}', True), (b' \n{"id":1}\n', True), (b"", False), (b"<html></html>", False),
     (b'{"id":1,"choi', False), (b"[1]", False)],
)  # fmt: skip
def test_a_json_answer_is_checked_on_its_ends(body: bytes, whole: bool) -> None:
    """A JSON answer must start with `{` and end with `}` (checked without parsing)."""
    assert json_object(body) is whole


@pytest.mark.reliability("upstream-bodies")
def test_sse_shape_and_the_message_never_carry_a_whole_body() -> None:
    """Events start with an SSE field; the error names status, type, size and 40 chars at most."""
    assert sse_shaped(b"data: {}\n\n")
    assert sse_shaped(b": ping\n\n")
    assert not sse_shaped(b"<html>\n\n")
    error = bad_response("p", 200, "text/html", 5_000_000, b"<html>" + b"x" * 5_000_000, "html")
    assert "HTTP 200, content-type text/html, 5000000 bytes" in error.message
    assert len(error.message) < 400
