"""The upstream's prompt-cache counts, read from an answer's bytes without parsing it."""

from __future__ import annotations

import orjson
import pytest

from kernel.prompt_cache import kind_of, reported, seen
from kernel.types import ChatRequest, RequestContext
from tests.conftest import sample


@pytest.mark.parametrize(
    ("data", "found"),
    [
        (b'{"choices":[],"usage":{"prompt_tokens":1200,"completion_tokens":5,'
         b'"prompt_tokens_details":{"cached_tokens":1024}}}', (1200, 1024)),
        (b'{"usage": {"prompt_tokens": 12, "completion_tokens": 5}}', (12, 0)),
        (b'data: {"choices":[],"usage":{"prompt_tokens":7,"prompt_tokens_details":'
         b'{"cached_tokens":0}}}\n\ndata: [DONE]\n\n', (7, 0)),
        (b'{"choices":[{"message":{"content":"the usage was high"}}]}', None),
        (b'{"usage":{"completion_tokens":5}}', None),
        (b"", None),
    ],
)  # fmt: skip
def test_usage_is_found_at_the_end(data: bytes, found: tuple[int, int] | None) -> None:
    """The last `usage` object's prompt and cached counts; none when there is none."""
    assert reported(data) == found


def _request(**changes: object) -> ChatRequest:
    messages = ({"role": "user", "content": "hi"},)
    return ChatRequest("m", messages, False, {"model": "m", "messages": list(messages)})


def test_kinds_name_what_overspill_sent() -> None:
    """own, spliced, documents, recovered, else whole."""
    request = _request()
    assert kind_of(RequestContext("r", "t", own=True), request) == "own"
    assert kind_of(RequestContext("r", "t"), request.spliced(request.messages)) == "spliced"
    ctx = RequestContext("r", "t")
    ctx.note("documents", "2/2")
    assert kind_of(ctx, request) == "documents"
    ctx = RequestContext("r", "t")
    ctx.note("attempts", 2)
    assert kind_of(ctx, request) == "recovered"
    assert kind_of(RequestContext("r", "t"), request) == "whole"


def test_cached_tokens_are_counted_and_noted() -> None:
    """A reported cache hit is counted by model and kind and noted on the request."""
    ctx = RequestContext("r", "t")
    body = orjson.dumps(
        {"usage": {"prompt_tokens": 90, "prompt_tokens_details": {"cached_tokens": 64}}}
    )
    before = sample("overspill_cached_prompt_tokens_total", model="m", kind="whole")
    prompt = sample("overspill_prompt_tokens_total", model="m", kind="whole")
    seen(ctx, _request(), body)
    assert sample("overspill_cached_prompt_tokens_total", model="m", kind="whole") == before + 64
    assert sample("overspill_prompt_tokens_total", model="m", kind="whole") == prompt + 90
    assert ctx.notes["prompt-cached"] == "64"
