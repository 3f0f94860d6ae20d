"""The Responses API's event stream, written from a chat completion's SSE chunks."""

from __future__ import annotations

import itertools
from typing import Any

import httpx
import openai
import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from kernel.errors import UpstreamBadResponse, UpstreamError
from proxy.surfaces import responses_wire as wire
from tests.proxy.surfaces.sdk import events_of, valid_response, without_ids

USAGE = {"prompt_tokens": 12, "completion_tokens": 5, "total_tokens": 17}


def shell() -> dict[str, Any]:
    return wire.response_shell(
        {"model": "local", "input": "hi", "stream": True},
        response_id="resp_1",
        created_at=1700000000,
        previous_response_id=None,
    )


def chunk(delta: dict[str, Any] | None = None, finish: str | None = None, **extra: Any) -> bytes:
    """One chat SSE event: a chunk with one choice (or the chunk as given by `extra`)."""
    choices = [] if delta is None else [{"index": 0, "delta": delta, "finish_reason": finish}]
    return (
        b"data: "
        + orjson.dumps({"object": "chat.completion.chunk", "choices": choices, **extra})
        + b"\n\n"
    )


def text_chunks(*pieces: str, finish: str = "stop") -> list[bytes]:
    return [
        chunk({"role": "assistant", "content": ""}),
        *(chunk({"content": piece}) for piece in pieces),
        chunk({}, finish),
        chunk(usage=USAGE),
        b"data: [DONE]\n\n",
    ]


def streamed(chunks: list[bytes], writer: wire.EventWriter | None = None) -> list[dict[str, Any]]:
    """The events of a whole stream (each chat event fed on its own), checked by the SDK."""
    writer = writer or wire.EventWriter(shell())
    data = writer.start() + b"".join(writer.feed(one) for one in chunks) + writer.finish()
    return events_of(data)


def kinds(events: list[dict[str, Any]]) -> list[str]:
    return [event["type"].removeprefix("response.") for event in events]


def call_delta(index: int, arguments: str, **first: Any) -> dict[str, Any]:
    function: dict[str, Any] = {"arguments": arguments}
    if "name" in first:
        function["name"] = first.pop("name")
    return {"tool_calls": [{"index": index, **first, "function": function}]}


def test_a_text_stream_is_the_apis_event_sequence() -> None:
    """created, in_progress, the message and its part added, a delta per chunk, the text's
    done events carrying the whole text, the item done, completed with usage."""
    events = streamed(text_chunks("Hel", "lo."))
    assert kinds(events) == [
        "created", "in_progress", "output_item.added", "content_part.added",
        "output_text.delta", "output_text.delta", "output_text.done", "content_part.done",
        "output_item.done", "completed",
    ]  # fmt: skip
    item_id = events[2]["item"]["id"]
    assert {event.get("item_id", item_id) for event in events[3:9]} == {item_id}
    assert [event["delta"] for event in events[4:6]] == ["Hel", "lo."]
    assert events[6]["text"] == "Hello."
    assert events[7]["part"]["text"] == "Hello."
    response = events[-1]["response"]
    assert response["status"] == "completed"
    assert response["usage"]["input_tokens"] == 12
    assert valid_response(response).output_text == "Hello."


def test_the_created_events_carry_the_shell() -> None:
    """response.created and response.in_progress carry the response in progress."""
    events = streamed(text_chunks("x"))
    assert events[0]["response"] == shell()
    assert events[1]["response"]["status"] == "in_progress"


def test_reasoning_is_an_item_closed_before_the_answer() -> None:
    """reasoning_content deltas are a reasoning item's reasoning_text deltas; it is done before
    the message is added."""
    chunks = [chunk({"reasoning_content": "Think"}), chunk({"reasoning_content": "ing."}),
              *text_chunks("42")]  # fmt: skip
    events = streamed(chunks)
    assert kinds(events)[2:10] == [
        "output_item.added", "content_part.added", "reasoning_text.delta", "reasoning_text.delta",
        "reasoning_text.done", "content_part.done", "output_item.done", "output_item.added",
    ]  # fmt: skip
    assert events[6]["text"] == "Thinking."
    reasoning, message = events[-1]["response"]["output"]
    assert reasoning["content"] == [{"type": "reasoning_text", "text": "Thinking."}]
    assert (events[9]["output_index"], message["content"][0]["text"]) == (1, "42")


def test_parallel_tool_calls_are_function_call_items_by_index() -> None:
    """Tool-call deltas, even interleaved, fill one function_call item per chat index; the
    done events carry each call's whole arguments and name."""
    chunks = [
        chunk(call_delta(0, '{"ci', id="call_a", name="weather")),
        chunk(call_delta(1, '{"ci', id="call_b", name="time")),
        chunk(call_delta(0, 'ty":"Oslo"}')),
        chunk(call_delta(1, 'ty":"Rome"}'), "tool_calls"),
        chunk(usage=USAGE),
    ]
    events = streamed(chunks)
    done = [event for event in events if event["type"].endswith("arguments.done")]
    assert [(e["output_index"], e["name"], e["arguments"]) for e in done] == [
        (0, "weather", '{"city":"Oslo"}'),
        (1, "time", '{"city":"Rome"}'),
    ]
    output = events[-1]["response"]["output"]
    assert [(item["call_id"], item["status"]) for item in output] == [
        ("call_a", "completed"),
        ("call_b", "completed"),
    ]


def test_text_before_a_tool_call_is_a_message_closed_first() -> None:
    """A message said before a tool call is done before the function_call is added."""
    chunks = [chunk({"content": "Checking."}), chunk(call_delta(0, "{}", id="c", name="f")),
              chunk({}, "tool_calls")]  # fmt: skip
    events = streamed(chunks)
    added = [i for i, e in enumerate(events) if e["type"] == "response.output_item.added"]
    message_done = kinds(events).index("output_item.done")
    assert added[0] < message_done < added[1]
    assert [item["type"] for item in events[-1]["response"]["output"]] == [
        "message",
        "function_call",
    ]


def test_whole_events_in_any_grouping_are_read() -> None:
    """Several events per feed, CRLF line ends, comments, [DONE], a usage-only chunk and a
    choice other than the first are all handled."""
    second_choice = b'data: {"choices": [{"index": 1, "delta": {"content": "z"}}]}\n\n'
    data = b": keep-alive\n\n" + second_choice + b"".join(text_chunks("a", "b"))
    data = data.replace(b"\n", b"\r\n")
    writer = wire.EventWriter(shell())
    events = events_of(writer.start() + writer.feed(data) + writer.finish())
    assert valid_response(events[-1]["response"]).output_text == "ab"
    assert events[-1]["response"]["usage"]["total_tokens"] == 17


def test_a_length_stop_ends_incomplete() -> None:
    """finish_reason length ends with response.incomplete: status incomplete, reason
    max_output_tokens, the last item incomplete."""
    events = streamed(text_chunks("The answer is", finish="length"))
    assert events[-1]["type"] == "response.incomplete"
    response = events[-1]["response"]
    assert (response["status"], response["incomplete_details"]) == (
        "incomplete",
        {"reason": "max_output_tokens"},
    )
    assert events[-2]["item"]["status"] == "incomplete"


def test_a_content_filter_stop_ends_incomplete() -> None:
    """finish_reason content_filter ends incomplete for content_filter."""
    response = streamed(text_chunks("x", finish="content_filter"))[-1]["response"]
    assert response["incomplete_details"] == {"reason": "content_filter"}


def test_a_stream_without_deltas_still_has_a_message() -> None:
    """No text and no calls: an empty message, as the JSON path answers."""
    events = streamed([chunk({"role": "assistant"}), chunk({}, "stop")])
    assert kinds(events)[2:7] == [
        "output_item.added", "content_part.added", "output_text.done", "content_part.done",
        "output_item.done",
    ]  # fmt: skip
    assert events[-1]["response"]["output"][0]["content"][0]["text"] == ""


def test_a_refusal_streams_as_a_refusal_part() -> None:
    """refusal deltas are a refusal content part's deltas and done event."""
    events = streamed(
        [chunk({"refusal": "I can't"}), chunk({"refusal": " help."}), chunk({}, "stop")]
    )
    assert kinds(events)[3:7] == [
        "content_part.added",
        "refusal.delta",
        "refusal.delta",
        "refusal.done",
    ]
    assert events[6]["refusal"] == "I can't help."
    assert events[-1]["response"]["output"][0]["content"] == [
        {"type": "refusal", "refusal": "I can't help."}
    ]


def test_logprobs_stream_with_their_text() -> None:
    """A chunk's token logprobs ride on its delta and end on the text's done event."""
    logprobs = {
        "content": [{"token": "Hi", "logprob": -0.5, "bytes": [72, 105], "top_logprobs": []}]
    }
    events = streamed([chunk({"content": "Hi"}, logprobs=None).replace(
        b'"finish_reason":null', b'"finish_reason":null,"logprobs":' + orjson.dumps(logprobs)
    ), chunk({}, "stop")])  # fmt: skip
    expected = [{"token": "Hi", "bytes": [72, 105], "logprob": -0.5, "top_logprobs": []}]
    delta = next(e for e in events if e["type"] == "response.output_text.delta")
    done = next(e for e in events if e["type"] == "response.output_text.done")
    assert delta["logprobs"] == expected
    assert done["logprobs"] == expected


def test_a_broken_stream_fails_with_an_error_event() -> None:
    """fail ends with response.failed (status failed, error, the output so far, incomplete)
    then an error event with the code as given; the response's code is one the SDK knows."""
    writer = wire.EventWriter(shell())
    data = writer.start() + writer.feed(chunk({"content": "Half"}))
    data += writer.fail("upstream_timeout", "the upstream did not answer in time")
    events = events_of(data)
    assert kinds(events)[-2:] == ["failed", "error"]
    failed = events[-2]["response"]
    assert failed["status"] == "failed"
    assert failed["error"] == {
        "code": "server_error",
        "message": "the upstream did not answer in time",
    }
    assert failed["output"][0]["status"] == "incomplete"
    assert failed["output"][0]["content"][0]["text"] == "Half"
    assert (events[-1]["code"], events[-1]["message"]) == (
        "upstream_timeout",
        "the upstream did not answer in time",
    )
    assert writer.response == failed
    assert (
        writer.finish() == writer.feed(chunk({"content": "more"})) == writer.fail(None, "x") == b""
    )


def test_a_rate_limit_keeps_its_code_on_the_failed_response() -> None:
    """rate_limit_exceeded is a code the Response's error has: it is kept there."""
    writer = wire.EventWriter(shell())
    events = events_of(writer.start() + writer.fail("rate_limit_exceeded", "slow down"))
    assert events[-2]["response"]["error"]["code"] == "rate_limit_exceeded"


def test_the_response_exists_once_the_stream_ends() -> None:
    """`response` is None until finish, then the final object; finish answers once."""
    writer = wire.EventWriter(shell())
    writer.feed(b"".join(text_chunks("x")))
    assert writer.response is None
    writer.finish()
    assert writer.response is not None
    assert writer.response["status"] == "completed"
    assert writer.finish() == b""


def test_feeding_before_start_starts_the_stream() -> None:
    """A first feed opens the stream itself (created and in_progress come first)."""
    writer = wire.EventWriter(shell())
    events = events_of(writer.feed(b"".join(text_chunks("x"))) + writer.start() + writer.finish())
    assert kinds(events)[:2] == ["created", "in_progress"]


def test_an_event_that_is_not_json_is_a_bad_response() -> None:
    """A chat event that is not a JSON object is UpstreamBadResponse naming its size."""
    writer = wire.EventWriter(shell())
    with pytest.raises(UpstreamBadResponse, match="not a JSON object"):
        writer.feed(b"data: {nope\n\n")
    with pytest.raises(UpstreamBadResponse):
        writer.feed(b"data: [1, 2]\n\n")


def test_the_upstreams_error_event_is_an_upstream_error() -> None:
    """An `{"error": ...}` event in the chat stream is an UpstreamError with its message."""
    writer = wire.EventWriter(shell())
    with pytest.raises(UpstreamError, match="model overloaded"):
        writer.feed(b'data: {"error": {"message": "model overloaded"}}\n\n')


def test_an_event_is_written_with_its_type_and_json() -> None:
    """sse_event writes `event: <type>` then the JSON as data, then a blank line."""
    assert wire.sse_event({"type": "error", "message": "x"}) == (
        b'event: error\ndata: {"type":"error","message":"x"}\n\n'
    )


def sdk_stream(data: bytes) -> tuple[list[Any], Any]:
    """The OpenAI SDK's `responses.stream` helper reading `data` as a server's answer: its
    events (with its accumulated snapshots) and its final response."""

    def serve(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, headers={"content-type": "text/event-stream"}, content=data)

    http = httpx.Client(transport=httpx.MockTransport(serve))
    client = openai.OpenAI(api_key="k", base_url="http://overspill.test/v1", http_client=http)
    with client.responses.stream(model="local", input="hi") as stream:
        events = list(stream)
        return events, stream.get_final_response()


def test_the_sdks_stream_helper_assembles_what_the_json_path_answers() -> None:
    """The SDK's own accumulator, fed the stream, assembles the text and the call arguments
    of the JSON path's response; its final response is that response (ids aside)."""
    message = {"content": "It is sunny.", "tool_calls": [
        {"id": "call_1", "type": "function", "function": {"name": "weather", "arguments": '{"city":"Oslo"}'}}
    ]}  # fmt: skip
    chunks = [chunk({"content": "It is "}), chunk({"content": "sunny."}),
              chunk(call_delta(0, '{"city":', id="call_1", name="weather")),
              chunk(call_delta(0, '"Oslo"}'), "tool_calls"), chunk(usage=USAGE)]  # fmt: skip
    writer = wire.EventWriter(shell())
    events, final = sdk_stream(
        writer.start() + b"".join(map(writer.feed, chunks)) + writer.finish()
    )
    chat = {"choices": [{"message": message, "finish_reason": "tool_calls"}], "usage": USAGE}
    expected = wire.from_chat(chat, shell())
    text = [e.snapshot for e in events if e.type == "response.output_text.delta"][-1]
    arguments = [e.snapshot for e in events if e.type == "response.function_call_arguments.delta"][
        -1
    ]
    assert (text, arguments) == ("It is sunny.", '{"city":"Oslo"}')
    assert final.output_text == valid_response(expected).output_text
    read = final.model_dump(mode="json", exclude_unset=True)
    for item in read["output"]:  # what the SDK's parsing adds (no text.format, no tool schema)
        assert item.pop("parsed_arguments", None) is None
        for part in item.get("content", ()):
            assert part.pop("parsed", None) is None
    assert without_ids(read) == without_ids(expected)


def pieces(text: str, cuts: list[int]) -> list[str]:
    """`text` cut at `cuts` (the non-empty pieces)."""
    points = sorted({0, len(text), *(cut % (len(text) + 1) for cut in cuts)})
    return [text[a:b] for a, b in itertools.pairwise(points) if text[a:b]]


ANSWERS = st.fixed_dictionaries(
    {
        "reasoning": st.text(max_size=8),
        "content": st.text(max_size=12),
        "refusal": st.sampled_from(["", "no"]),
        "calls": st.lists(st.text(max_size=10), max_size=3),
        "finish": st.sampled_from(["stop", "length", "tool_calls", "content_filter"]),
        "usage": st.booleans(),
        "cuts": st.lists(st.integers(0, 12), max_size=4),
        "grouping": st.lists(st.integers(1, 4), min_size=1, max_size=6),
    }
)


def as_chunks(answer: dict[str, Any]) -> list[bytes]:
    """The answer as a chat stream: reasoning, text, refusal, then each call, cut in pieces."""
    cut = answer["cuts"]
    chunks = [chunk({"reasoning_content": p}) for p in pieces(answer["reasoning"], cut)]
    chunks += [chunk({"content": p}) for p in pieces(answer["content"], cut)]
    chunks += [chunk({"refusal": p}) for p in pieces(answer["refusal"], cut)]
    for index, arguments in enumerate(answer["calls"]):
        first, *rest = pieces(arguments, cut) or [""]
        chunks.append(chunk(call_delta(index, first, id=f"call_{index}", name=f"f{index}")))
        chunks += [chunk(call_delta(index, piece)) for piece in rest]
    chunks.append(chunk({}, answer["finish"]))
    return chunks + ([chunk(usage=USAGE)] if answer["usage"] else [])


def as_completion(answer: dict[str, Any]) -> dict[str, Any]:
    """The same answer as one chat.completion."""
    calls = [
        {"id": f"call_{i}", "type": "function", "function": {"name": f"f{i}", "arguments": a}}
        for i, a in enumerate(answer["calls"])
    ]
    message = {"role": "assistant", "content": answer["content"] or None, "tool_calls": calls}
    message |= {"reasoning_content": answer["reasoning"], "refusal": answer["refusal"] or None}
    completion = {"choices": [{"message": message, "finish_reason": answer["finish"]}]}
    return completion | ({"usage": USAGE} if answer["usage"] else {})


@given(ANSWERS)
def test_a_streamed_answer_ends_as_the_json_path_answers(answer: dict[str, Any]) -> None:
    """Any answer, cut into chunks and fed in any grouping, streams events the SDK reads and
    ends with the response from_chat makes of the whole completion (ids aside)."""
    chunks, writer = as_chunks(answer), wire.EventWriter(shell())
    data, at = writer.start(), 0
    for size in answer["grouping"] * len(chunks):
        data += writer.feed(b"".join(chunks[at : at + size]))
        at += size
    events = events_of(data + writer.finish())
    expected = wire.from_chat(as_completion(answer), shell())
    assert without_ids(events[-1]["response"]) == without_ids(expected)
    assert writer.response == events[-1]["response"]
