"""The observation_masking layer: old tool results masked past the trigger, the recall tool added
and answered by overspill (JSON and streams), the client's own clearing rule honoured."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import orjson
import pytest

from kernel import metrics
from kernel.store import DiskHistoryStore
from kernel.types import ChatRequest, ChatResponse, Message, RequestContext, ToolClearing
from middleware.condensing.observations import RECALL_TOOL
from middleware.layers.observation_masking import MAX_RECALLS, ObservationMasking
from providers.fake import completion, json_response, sse_events
from tests.conftest import make_services, sample, settings_from

CONFIG = """
model_list:
  - model_name: local
    litellm_params: {model: openai/smollm2, api_base: "http://upstream.test/v1"}
    context: {window: 8192, max_output_tokens: 256}
"""
FILE = "\n".join(f"line {n}: value_{n} = compute({n})" for n in range(80))


def agent(turns: int, name: str = "read_file") -> list[Message]:
    """A task, then `turns` tool calls each with a file's worth of result."""
    messages: list[Message] = [
        {"role": "system", "content": "You are a coding agent."},
        {"role": "user", "content": "Read the files and fix the bug."},
    ]
    for n in range(turns):
        call = {
            "id": f"call_{n}",
            "type": "function",
            "function": {"name": name, "arguments": f'{{"path": "f{n}.py"}}'},
        }
        messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
        messages.append({"role": "tool", "tool_call_id": f"call_{n}", "content": FILE})
    return messages


TOOLS = [{"type": "function", "function": {"name": "read_file", "parameters": {"type": "object"}}}]


def request(messages: list[Message], stream: bool = False) -> ChatRequest:
    body: dict[str, Any] = {"model": "local", "messages": messages, "tools": TOOLS}
    if stream:
        body["stream"] = True
    return ChatRequest("local", tuple(messages), stream, body)


def recall(call_id: str, wanted: str) -> dict[str, Any]:
    """A chat answer that calls the recall tool for `wanted`."""
    body = completion("")
    message = body["choices"][0]["message"]
    message["content"] = None
    arguments = orjson.dumps({"id": wanted}).decode()
    message["tool_calls"] = [
        {
            "id": call_id,
            "type": "function",
            "function": {"name": RECALL_TOOL, "arguments": arguments},
        }
    ]
    body["choices"][0]["finish_reason"] = "tool_calls"
    return body


def recall_chunks(call_id: str, wanted: str) -> list[bytes]:
    """A streamed answer: some text, then a recall call (its arguments in two deltas)."""

    def chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
        event = {
            "object": "chat.completion.chunk",
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
        }
        return b"data: " + orjson.dumps(event) + b"\n\n"

    start = {
        "index": 0,
        "id": call_id,
        "type": "function",
        "function": {"name": RECALL_TOOL, "arguments": '{"id": '},
    }
    rest = {"index": 0, "function": {"arguments": f'"{wanted}"}}'}}
    return [
        chunk({"role": "assistant", "content": "Let me look again. "}),
        chunk({"tool_calls": [start]}),
        chunk({"tool_calls": [rest]}),
        chunk({}, "tool_calls"),
        b"data: [DONE]\n\n",
    ]


class Upstream:
    """The rest of the pipeline: plays JSON bodies or chunk lists in order."""

    def __init__(self, *answers: dict[str, Any] | list[bytes]) -> None:
        self.answers = list(answers)
        self.sent: list[ChatRequest] = []

    async def __call__(self, request: ChatRequest, ctx: RequestContext) -> ChatResponse:
        self.sent.append(request)
        answer = self.answers[min(len(self.sent), len(self.answers)) - 1]
        if isinstance(answer, list):

            async def events() -> AsyncIterator[bytes]:
                for event in answer:
                    yield event

            return ChatResponse(stream=events())
        return ChatResponse(body=orjson.dumps(answer))


def layer(store: DiskHistoryStore) -> ObservationMasking:
    async def never(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("no extraction here")

    services = make_services(settings_from(CONFIG), store, lambda model: never, {"local": 8192})
    return ObservationMasking(services)


def context(settings_text: str = CONFIG, **fields: Any) -> RequestContext:
    entry = settings_from(settings_text).model_list[0]
    return RequestContext(request_id="r", tenant="t", model=entry, **fields)


async def test_a_short_agent_conversation_goes_as_it_is(store: DiskHistoryStore) -> None:
    """Below mask_at of the budget nothing changes: the same request object goes on."""
    upstream = Upstream(completion("ok"))
    sent = request(agent(2))
    await layer(store).handle(sent, context(), upstream)
    assert upstream.sent == [sent]


async def test_past_mask_at_old_results_are_masked_and_recall_is_offered(
    store: DiskHistoryStore,
) -> None:
    """Past mask_at the old results go as placeholders, the newest uses whole, the recall
    tool added, and the answer's headers and metrics say how many were masked."""
    upstream = Upstream(completion("done"))
    ctx = context()
    before = sample("overspill_masked_tool_results_total", model="local", policy="default")
    response = await layer(store).handle(request(agent(12)), ctx, upstream)
    metrics.flush()
    assert orjson.loads(response.body or b"")["choices"][0]["message"]["content"] == "done"
    sent = upstream.sent[0]
    masked = [
        m for m in sent.messages if m.get("role") == "tool" and "overspill masked" in m["content"]
    ]
    assert masked
    assert sent.messages[-1]["content"] == FILE
    assert [t["function"]["name"] for t in sent.body["tools"]] == ["read_file", RECALL_TOOL]
    assert ctx.notes["tool-results-masked"] == str(len(masked))
    assert ctx.cleared is not None
    assert ctx.cleared.tool_uses == len(masked)
    after = sample("overspill_masked_tool_results_total", model="local", policy="default")
    assert after - before == len(masked)


async def test_the_clients_own_messages_travel_beside_the_masked_ones(
    store: DiskHistoryStore,
) -> None:
    """The layers after masking see the client's own messages too (what an extraction's chain
    is computed over), and the masked ones are what is sent."""
    messages = agent(30)
    upstream = Upstream(completion("done"))
    ctx = context()
    await layer(store).handle(request(messages), ctx, upstream)
    assert ctx.unmasked == tuple(messages)
    assert upstream.sent[0].messages != tuple(messages)
    assert len(upstream.sent[0].messages) == len(messages)


async def test_in_shadow_mode_the_request_goes_unchanged_and_the_masking_is_reported(
    store: DiskHistoryStore,
) -> None:
    """Shadow mode: past mask_at the same request object goes on, no recall tool, and the
    layer's note says how many results it would have masked."""
    upstream = Upstream(completion("done"))
    ctx = context(shadow=True)
    sent = request(agent(12))
    await layer(store).handle(sent, ctx, upstream)
    assert upstream.sent == [sent]
    assert ctx.cleared is None
    assert ctx.notes["shadow-observation_masking"].startswith("would-mask results=")


async def test_a_recall_call_is_answered_with_the_original(store: DiskHistoryStore) -> None:
    """The model calls the recall tool; overspill answers with the original result and asks
    again; the client gets only the second answer."""
    upstream = Upstream(recall("r1", "call_0"), completion("the bug is on line 3"))
    ctx = context()
    response = await layer(store).handle(request(agent(12)), ctx, upstream)
    answer = orjson.loads(response.body or b"")["choices"][0]["message"]
    assert answer["content"] == "the bug is on line 3"
    assert "tool_calls" not in answer or not answer["tool_calls"]
    follow = upstream.sent[1].messages
    assert follow[-2]["tool_calls"][0]["function"]["name"] == RECALL_TOOL
    assert follow[-1] == {"role": "tool", "tool_call_id": "r1", "content": FILE}
    assert ctx.notes["recalled"] == "1"


async def test_recall_calls_after_the_last_round_are_dropped(store: DiskHistoryStore) -> None:
    """A model that keeps calling the recall tool gets MAX_RECALLS answers; its next recall
    call never reaches the client (the answer ends as a plain stop)."""
    upstream = Upstream(recall("r", "call_0"))
    response = await layer(store).handle(request(agent(12)), context(), upstream)
    choice = orjson.loads(response.body or b"")["choices"][0]
    assert not choice["message"].get("tool_calls")
    assert choice["finish_reason"] == "stop"
    assert len(upstream.sent) == MAX_RECALLS + 1


async def test_a_streamed_recall_is_answered_mid_stream(store: DiskHistoryStore) -> None:
    """In a stream the text passes at once, the recall call never reaches the client, and the
    second answer follows in the same stream, ending with one [DONE]."""
    upstream = Upstream(recall_chunks("r1", "call_1"), sse_events(["Found ", "it."]))
    response = await layer(store).handle(request(agent(12), stream=True), context(), upstream)
    assert response.stream is not None
    body = b"".join([chunk async for chunk in response.stream])
    assert RECALL_TOOL.encode() not in body
    assert b"Let me look again." in body
    assert b"Found " in body
    assert b"it." in body
    assert body.count(b"[DONE]") == 1
    assert upstream.sent[1].messages[-1]["content"] == FILE
    assert upstream.sent[1].messages[-2]["content"] == "Let me look again. "


async def test_a_streamed_answer_with_other_calls_passes_them_whole(
    store: DiskHistoryStore,
) -> None:
    """Calls to the client's own tools are held to the end and then passed as they came."""
    events = sse_events(["thinking..."])[:-1]
    call = {
        "index": 0,
        "id": "c9",
        "type": "function",
        "function": {"name": "read_file", "arguments": "{}"},
    }
    event = {
        "choices": [{"index": 0, "delta": {"tool_calls": [call]}, "finish_reason": "tool_calls"}]
    }
    events += [b"data: " + orjson.dumps(event) + b"\n\n", b"data: [DONE]\n\n"]
    upstream = Upstream(events)
    response = await layer(store).handle(request(agent(12), stream=True), context(), upstream)
    assert response.stream is not None
    body = b"".join([chunk async for chunk in response.stream])
    assert b'"c9"' in body
    assert body.endswith(b"data: [DONE]\n\n")
    assert len(upstream.sent) == 1


async def test_the_clients_rule_is_honoured_without_a_window(store: DiskHistoryStore) -> None:
    """A client's clearing rule applies with its own trigger and keep, window known or not."""
    text = CONFIG.replace("    context: {window: 8192, max_output_tokens: 256}\n", "")
    services = make_services(settings_from(text), store, lambda model: None, {})  # type: ignore[arg-type,return-value]
    upstream = Upstream(completion("ok"))
    rule = ToolClearing(trigger=100, keep=1, exclude=frozenset())
    ctx = context(text, tool_clearing=rule)
    await ObservationMasking(services).handle(request(agent(4)), ctx, upstream)
    tools = [m for m in upstream.sent[0].messages if m.get("role") == "tool"]
    assert ["overspill masked" in m["content"] for m in tools] == [True, True, True, False]


@pytest.mark.parametrize(
    "fields", [{"skip_history": True}, {"tool_clearing": ToolClearing(off=True)}]
)
async def test_side_calls_and_the_upstreams_own_clearing_are_left_alone(
    store: DiskHistoryStore, fields: dict[str, Any]
) -> None:
    """A side call (skip_history) or a request whose upstream clears itself goes unmasked."""
    upstream = Upstream(completion("ok"))
    sent = request(agent(12))
    await layer(store).handle(sent, context(**fields), upstream)
    assert upstream.sent == [sent]


async def test_no_tool_results_costs_nothing(store: DiskHistoryStore) -> None:
    """A conversation without tool results is not even counted."""
    upstream = Upstream(json_response("ok").json())
    messages: list[Message] = [{"role": "user", "content": "hi " * 5000}]
    sent = request(messages)
    await layer(store).handle(sent, context(), upstream)
    assert upstream.sent == [sent]


def uneven(turns: int) -> list[Message]:
    """An agent's loop whose results differ in size (from a few lines to a file's worth)."""
    messages, lines = agent(turns), FILE.splitlines()
    results = [i for i, m in enumerate(messages) if m.get("role") == "tool"]
    for n, i in enumerate(results):
        messages[i] = {**messages[i], "content": "\n".join(lines[: 6 + (n * 7) % 40])}
    return messages


@pytest.mark.parametrize(
    "rule",
    [None, ToolClearing(trigger=2000, keep=3, clear_at_least=700)],
    ids=["default", "client"],
)
async def test_what_is_masked_stays_put_while_the_learned_scale_moves(
    store: DiskHistoryStore, monkeypatch: pytest.MonkeyPatch, rule: ToolClearing | None
) -> None:
    """The results masked, by overspill's batches or a client's `clear_at_least`, are the same
    whatever scale between 1.0 and 1.1 has been learned."""
    masking = layer(store)
    found = set()
    for step in range(11):

        async def learned(entry: Any, scale: float = 1 + step / 100) -> float:
            return scale

        monkeypatch.setattr(masking.estimator, "scale", learned)
        upstream = Upstream(completion("ok"))
        await masking.handle(request(uneven(40)), context(tool_clearing=rule), upstream)
        sent = upstream.sent[0].messages
        found.add(tuple(i for i, m in enumerate(sent) if "overspill masked" in str(m["content"])))
    assert len(found) == 1
    assert found.pop()


def slowly(turns: int, small: str) -> list[Message]:
    """An agent's loop that read three files, then runs commands with short output."""
    messages = agent(turns)
    for i, message in enumerate(messages[8:], 8):
        if message.get("role") == "tool":
            messages[i] = {**message, "content": small}
    return messages


def masked_at(sent: ChatRequest) -> tuple[int, ...]:
    """Where the sent conversation holds a placeholder."""
    return tuple(i for i, m in enumerate(sent.messages) if "overspill masked" in str(m["content"]))


@pytest.mark.parametrize(
    "rule",
    [None, ToolClearing(trigger=3200, keep=3, clear_at_least=700)],
    ids=["default", "client"],
)
async def test_a_masked_conversation_stays_masked_when_the_learned_scale_falls(
    store: DiskHistoryStore, monkeypatch: pytest.MonkeyPatch, rule: ToolClearing | None
) -> None:
    """Once a conversation is masked, by overspill's trigger or a client's, a learned scale
    falling a few percent (the estimate under the trigger by more than a round's growth)
    masks the same results, recall tool included, rather than sending them whole again."""
    masking = layer(store)
    learned = {"scale": 1.0}
    small = "\n".join(FILE.splitlines()[:2])

    async def scale(entry: Any) -> float:
        return learned["scale"]

    monkeypatch.setattr(masking.estimator, "scale", scale)
    turns = 2
    while True:  # the first round past the trigger at a scale of 1.0
        upstream = Upstream(completion("ok"))
        await masking.handle(request(slowly(turns, small)), context(tool_clearing=rule), upstream)
        if masked_at(upstream.sent[0]):
            break
        turns += 1
    first = masked_at(upstream.sent[0])
    learned["scale"] = 0.93
    upstream = Upstream(completion("ok"))
    await masking.handle(request(slowly(turns + 1, small)), context(tool_clearing=rule), upstream)
    assert masked_at(upstream.sent[0])[: len(first)] == first
    assert RECALL_TOOL in str(upstream.sent[0].body["tools"])


async def test_a_held_conversation_cut_well_under_the_trigger_goes_as_it_is(
    store: DiskHistoryStore,
) -> None:
    """A masked conversation the client then cut short (under HOLD of the trigger) is sent
    whole again, and forgotten."""
    masking = layer(store)
    upstream = Upstream(completion("ok"))
    await masking.handle(request(agent(12)), context(), upstream)
    assert masked_at(upstream.sent[0])
    sent = request(agent(2))
    upstream = Upstream(completion("ok"))
    await masking.handle(sent, context(), upstream)
    assert upstream.sent == [sent]
    assert len(masking.held) == 0
