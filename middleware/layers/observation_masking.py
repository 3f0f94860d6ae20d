"""The `observation_masking` layer: old tool results masked in what is sent, and undone on demand.

An agent's conversation grows mostly by tool results it has moved past. Past a trigger this
layer sends the conversation with the old results replaced by placeholders
(middleware/condensing/observations.py decides which and how: reads masked whole, commands cut
to an excerpt, errors kept, the newest tool uses kept), and adds overspill's recall tool to the
request. When the model calls the recall tool, the layer answers it itself with the original
(the client's own history always holds it: masking never touches what the client sends) and
asks the model again, up to `MAX_RECALLS` times in one request, streaming included: text streams
to the client as it comes, tool calls are held until the answer shows whether the model called
the recall tool; the client never sees the recall tool or its calls.

The trigger is the client's (`RequestContext.tool_clearing`: Anthropic's `clear_tool_uses`
edit) when it gave one, else the model's `context.mask_at` share of the prompt budget (so only
with a known window), keeping the newest `context.mask_keep` tool uses and masking in batches
of at least a tenth of the input budget, so a prompt cache keeps hitting between batches. A
batch's least saving is counted in overspill's tokens (the budget divided by the model's
learned scale) and rounded up to a power of two (so between a tenth and a fifth of the
budget): the scale moves a little with every sample learned, and a least saving that moved
with it would move the batch points, masking again results that were sent whole (or
unmasking masked ones) and breaking the cache each time. A client's own `clear_at_least` is
taken in overspill's tokens as given, not through the scale, for the same reason (the
upstream's differ from them by that scale). Whether to mask at all is read through the scale
too (the trigger is in the upstream's tokens), so a conversation this process masked stays
masked until its estimate falls under `HOLD` of the trigger: a scale falling by more than a
round's growth would otherwise send the masked results whole again and take the recall tool
out of the request's tools (the front of the prompt an upstream caches), then put both back
at the next round. Forgetting a conversation (another replica, a restart) costs that once,
never an answer. The layer
runs before history_splice, which then plans on the masked conversation; the client's own
messages travel beside it (`RequestContext.unmasked`), so that masking a new batch inside the
part an extraction stands for does not read as an edited history. A request carrying
the recall tool is answered in chat terms (its native wire form is set aside), so the layer
sees whether the model called it.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from typing import Any, ClassVar

import orjson

from kernel import metrics
from kernel.bounded import Bounded
from kernel.config import ModelEntry
from kernel.services import Services
from kernel.tokens import REPLY_PRIMING_TOKENS
from kernel.types import (
    ChatRequest,
    ChatResponse,
    Cleared,
    Message,
    Next,
    RequestContext,
    ToolClearing,
)
from middleware.condensing.budget import budget_for
from middleware.condensing.condenser import Condenser
from middleware.condensing.observations import (
    RECALL_DEFINITION,
    RECALL_TOOL,
    Masked,
    Policy,
    plan_masking,
    recall_answer,
)
from middleware.condensing.prompt import content_text
from middleware.condensing.split import system_indices
from middleware.layers.shadow import would

MAX_RECALLS = 3
"""Rounds of recall calls answered in one request; a recall call after them is dropped."""
BATCH_SHARE = 0.1
"""overspill's default batch: this share of the input budget masked at once."""
HOLD = 0.9
"""A conversation this process masked stays masked while its estimate is over this share of
the trigger (a learned scale moves a single sample's worth, a few percent, at most a tenth
for a sample a third off; a client that edits its own history well under the trigger is no
longer held)."""
HELD_KEPT = 65536
"""Conversations this process remembers as masked (a tenant and an id each), least recently
used out."""


class ObservationMasking:
    """Masks old tool results past a trigger; answers the model's recall calls itself."""

    name: ClassVar[str] = "observation_masking"

    def __init__(self, services: Services) -> None:
        self.condenser = Condenser(services)
        self.estimator = services.estimator
        self.held: Bounded[tuple[str, str], bool] = Bounded(HELD_KEPT, lambda _: 1)

    async def handle(
        self, request: ChatRequest, ctx: RequestContext, call_next: Next
    ) -> ChatResponse:
        """Send the conversation with its old tool results masked, when past the trigger."""
        entry = ctx.model
        clearing = ctx.tool_clearing
        if entry is None or ctx.skip_history or (clearing is not None and clearing.off):
            return await call_next(request, ctx)
        if not any(message.get("role") == "tool" for message in request.messages):
            return await call_next(request, ctx)
        held = bool(len(self.held)) and self.held.get(_key(ctx)) is not None
        planned = await self._plan(request, ctx, entry, clearing, hold=HOLD if held else 1.0)
        if planned is None:
            if held:
                self.held.pop(_key(ctx))
            return await call_next(request, ctx)
        self.held.put(_key(ctx), True)
        masked, limit, scale = planned
        saved = int(masked.saved * scale)
        if ctx.shadow:  # docs/operations/budgets.md: report, send the request unchanged
            detail = f"results={len(masked.masked)} tokens-saved={saved}"
            would(ctx, self.name, "would-mask", detail)
            return await call_next(request, ctx)
        ctx.cleared = Cleared(len(masked.masked), saved)
        ctx.unmasked = request.messages
        ctx.note("tool-results-masked", len(masked.masked))
        ctx.note("tool-results-masked-tokens", saved)
        policy = "client" if clearing is not None else "default"
        before = int(sum(self.condenser.counts(ctx, request, entry)) * scale)
        metrics.tool_results_masked(
            entry.model_name, policy, len(masked.masked), before, before - saved
        )
        originals = functools.partial(
            _originals, request.messages, masked.masked, masked.cleared_inputs
        )
        recall = _Recall(entry, ctx, call_next, originals, limit)
        sent = _with_recall(request, masked.messages)
        return await recall.answer(sent, await call_next(sent, ctx), MAX_RECALLS)

    async def _plan(
        self,
        request: ChatRequest,
        ctx: RequestContext,
        entry: ModelEntry,
        clearing: ToolClearing | None,
        hold: float = 1.0,
    ) -> tuple[Masked, int | None, float] | None:
        """The masked conversation, the recall answers' length limit (characters), the scale;
        None when nothing is to be masked (`hold`: the share of the trigger that counts, for a
        conversation masked before)."""
        counts = self.condenser.counts(ctx, request, entry)
        scale = await self.estimator.scale(entry)
        tools = self.estimator.count_tools(entry, request.body.get("tools"))
        estimate = int((REPLY_PRIMING_TOKENS + sum(counts) + tools) * scale)
        window = await self.condenser.window(entry)
        limit = None
        budget = None
        if window is not None:
            system = sum(counts[i] for i in system_indices(request.messages, len(counts)))
            budget = budget_for(entry, window, request.body, int((system + tools) * scale))
            limit = max(2_000, budget.input)  # characters: about a quarter of it in tokens
        if clearing is not None:
            policy = Policy(
                trigger=_held(clearing.trigger, hold),
                trigger_uses=clearing.trigger_uses,
                keep=clearing.keep,
                clear_at_least=clearing.clear_at_least,
                exclude=clearing.exclude,
                clear_inputs=clearing.clear_inputs,
            )
        elif budget is not None:
            policy = Policy(
                trigger=int(budget.prompt_limit * entry.context.mask_at * hold),
                keep=entry.context.mask_keep,
                clear_at_least=_steady(budget.input * BATCH_SHARE / scale),
            )
        else:
            return None
        model = entry.litellm_params.upstream_model
        masked = plan_masking(request.messages, counts, policy, estimate=estimate, model=model)
        return None if masked is None else (masked, limit, scale)


def _key(ctx: RequestContext) -> tuple[str, str]:
    return (ctx.tenant, ctx.conversation_id)


def _held(trigger: int | None, hold: float) -> int | None:
    return None if trigger is None else int(trigger * hold)


def _steady(tokens: float) -> int:
    """A batch's least saving, `tokens` rounded up to a power of two: the same for the small
    moves of the learned scale, so the batch points (and what is masked) stay where they were."""
    return 1 << math.ceil(math.log2(max(1.0, tokens)))


def _originals(
    messages: Sequence[Message], ids: Sequence[str], cleared: Sequence[str]
) -> dict[str, str]:
    """The original text of the masked results (and of the calls whose input was cleared)."""
    wanted = set(ids)
    found: dict[str, str] = {}
    calls: dict[str, str] = {}
    for message in messages:
        if message.get("role") == "tool" and message.get("tool_call_id") in wanted:
            found[str(message["tool_call_id"])] = content_text(message)
        for call in message.get("tool_calls") or ():
            if isinstance(call, Mapping) and call.get("id") in cleared:
                function = call.get("function") or {}
                calls[call["id"]] = f"{function.get('name')}({function.get('arguments')})"
    return {
        key: f"called {calls[key]}:\n{text}" if key in calls else text
        for key, text in found.items()
    }


def _with_recall(request: ChatRequest, messages: Sequence[Message]) -> ChatRequest:
    """The request sending `messages`, with the recall tool added, answered in chat terms."""
    tools = [t for t in request.body.get("tools") or () if _name(t) != RECALL_TOOL]
    masked = request.with_messages(messages).with_params(tools=[*tools, RECALL_DEFINITION])
    return dataclasses.replace(masked, native=None)


def _name(tool: Any) -> Any:
    function = tool.get("function") if isinstance(tool, Mapping) else None
    return function.get("name") if isinstance(function, Mapping) else None


class _Recall:
    """One request's recall rounds: the model's recall calls answered, the model asked again."""

    def __init__(
        self,
        entry: ModelEntry,
        ctx: RequestContext,
        call_next: Next,
        originals: Callable[[], Mapping[str, str]],
        limit: int | None,
    ) -> None:
        self.entry = entry
        self.ctx = ctx
        self.call_next = call_next
        self._gather = originals
        self.limit = limit
        self.recalled = 0

    @functools.cached_property
    def originals(self) -> Mapping[str, str]:
        """The masked results' original texts by call id, gathered at the first recall call
        (most requests have none: an agent's every request would gather them all)."""
        return self._gather()

    async def answer(self, sent: ChatRequest, response: ChatResponse, rounds: int) -> ChatResponse:
        """The answer once the model stops calling the recall tool (or `rounds` ran out)."""
        while response.stream is None:
            completion = _json(response.body)
            message = _message(completion)
            calls = _recall_calls(message.get("tool_calls"))
            if not calls:
                return response
            if rounds == 0:
                return _without_recall(response, completion)
            sent = self._follow_up(sent, message.get("content"), calls)
            response = await self.call_next(sent, self.ctx)
            rounds -= 1
        return dataclasses.replace(response, stream=self._streamed(sent, response, rounds))

    async def _streamed(
        self, sent: ChatRequest, response: ChatResponse, rounds: int
    ) -> AsyncIterator[bytes]:
        """Text as it comes; tool calls, the finish and [DONE] held until the answer shows
        whether the model called the recall tool (then the model is asked again, its new
        answer following in the same stream)."""
        while True:
            held = _Held()
            stream = response.stream
            assert stream is not None
            try:
                async for data in stream:
                    passed = held.take(data)
                    if passed:
                        yield passed
            finally:
                close = getattr(stream, "aclose", None)
                if close is not None:
                    await close()
            calls = _recall_calls(held.calls())
            if not calls or rounds == 0:
                yield held.release(drop=bool(calls))
                return
            sent = self._follow_up(sent, "".join(held.text) or None, calls)
            response = await self.call_next(sent, self.ctx)
            rounds -= 1
            if response.stream is None:  # an answer not streamed: its chunk, then the end
                yield _as_chunks(_json(response.body))
                return

    def _follow_up(
        self, sent: ChatRequest, content: Any, calls: Sequence[Mapping[str, Any]]
    ) -> ChatRequest:
        """The request again with the recall calls and overspill's answers to them."""
        made: list[dict[str, Any]] = []
        answers = []
        for call in calls:
            wanted = _recall_id(call)
            found = wanted in self.originals
            metrics.recalled(self.entry.model_name, "found" if found else "missing")
            self.recalled += 1
            call_id = call.get("id") if isinstance(call.get("id"), str) else None
            call_id = call_id or f"call_overspill_recall_{self.recalled}"
            arguments = orjson.dumps({"id": wanted}).decode()
            function = {"name": RECALL_TOOL, "arguments": arguments}
            made.append({"id": call_id, "type": "function", "function": function})
            text = recall_answer(wanted, self.originals, self.limit)
            answers.append({"role": "tool", "tool_call_id": call_id, "content": text})
        assistant = {"role": "assistant", "content": content or None, "tool_calls": made}
        self.ctx.note("recalled", self.recalled)
        return sent.with_messages([*sent.messages, assistant, *answers])


def _json(body: bytes | None) -> dict[str, Any]:
    try:
        parsed = orjson.loads(body or b"")
    except orjson.JSONDecodeError:
        return {}
    return parsed if isinstance(parsed, dict) else {}


def _message(completion: Mapping[str, Any]) -> Mapping[str, Any]:
    choices = completion.get("choices")
    choice = choices[0] if isinstance(choices, list) and choices else None
    message = choice.get("message") if isinstance(choice, dict) else None
    return message if isinstance(message, dict) else {}


def _recall_calls(calls: Any) -> list[Mapping[str, Any]]:
    """The recall tool's calls among a message's tool calls."""
    return [
        call for call in calls or () if isinstance(call, Mapping) and _name(call) == RECALL_TOOL
    ]


def _recall_id(call: Mapping[str, Any]) -> str:
    function = call.get("function")
    arguments = function.get("arguments") if isinstance(function, Mapping) else None
    try:
        parsed = orjson.loads(arguments) if isinstance(arguments, str) else None
    except orjson.JSONDecodeError:
        parsed = None
    wanted = parsed.get("id") if isinstance(parsed, dict) else None
    return wanted if isinstance(wanted, str) else ""


def _without_recall(response: ChatResponse, completion: dict[str, Any]) -> ChatResponse:
    """A JSON answer without recall calls (after the last round)."""
    message = dict(_message(completion))
    kept = [call for call in message.get("tool_calls") or () if _name(call) != RECALL_TOOL]
    message["tool_calls"] = kept or None
    choice = {**completion["choices"][0], "message": message}
    if not kept and choice.get("finish_reason") == "tool_calls":
        choice["finish_reason"] = "stop"
    made = {**completion, "choices": [choice, *completion["choices"][1:]]}
    return dataclasses.replace(response, body=orjson.dumps(made))


def _as_chunks(completion: Mapping[str, Any]) -> bytes:
    """A JSON answer as chat chunks: its text, its finish and usage, then [DONE]."""
    message = _message(completion)
    choice: dict[str, Any] = {"index": 0, "delta": {"content": message.get("content") or ""}}
    choices = completion.get("choices") or [{}]
    choice["finish_reason"] = (
        choices[0].get("finish_reason") if isinstance(choices[0], dict) else "stop"
    )
    chunk = {
        "object": "chat.completion.chunk",
        "choices": [choice],
        "usage": completion.get("usage"),
    }
    return b"data: " + orjson.dumps(chunk) + b"\n\ndata: [DONE]\n\n"


class _Held:
    """One upstream stream read: text events passed at once, the rest held."""

    def __init__(self) -> None:
        self.events: list[bytes] = []
        self.text: list[str] = []
        self._calls: dict[int, dict[str, Any]] = {}
        self._rest = b""

    def take(self, data: bytes) -> bytes:
        """The events of `data` to pass now (text); the others are held."""
        data = self._rest + data.replace(b"\r\n", b"\n")
        *whole, self._rest = data.split(b"\n\n")
        passed = []
        for event in whole:
            if not event.strip():
                continue
            event += b"\n\n"
            chunk = _chunk(event)
            if chunk is None or not self._text_only(chunk):
                self.events.append(event)
            else:
                passed.append(event)
        return b"".join(passed)

    def _text_only(self, chunk: dict[str, Any]) -> bool:
        """Whether a chunk carries only text (recording its text, or its calls when not)."""
        choices = chunk.get("choices")
        if not isinstance(choices, list) or not choices:
            return False  # a usage chunk
        plain = True
        for choice in choices:
            delta = choice.get("delta") if isinstance(choice, dict) else None
            if not isinstance(delta, dict) or choice.get("finish_reason"):
                plain = False
                continue
            calls = delta.get("tool_calls")
            if calls:
                self._record(calls)
                plain = False
            elif isinstance(delta.get("content"), str):
                self.text.append(delta["content"])
        return plain

    def _record(self, calls: Any) -> None:
        for position, call in enumerate(calls if isinstance(calls, list) else ()):
            if not isinstance(call, dict):
                continue
            index = call.get("index")
            found = self._calls.setdefault(
                index if isinstance(index, int) else position,
                {"id": None, "name": "", "arguments": ""},
            )
            given = call.get("id")
            if isinstance(given, str) and found["id"] is None:
                found["id"] = given
            function = call.get("function")
            function = function if isinstance(function, dict) else {}
            name, arguments = function.get("name"), function.get("arguments")
            if isinstance(name, str) and not found["name"]:
                found["name"] = name
            if isinstance(arguments, str):
                found["arguments"] += arguments

    def calls(self) -> list[dict[str, Any]]:
        """The tool calls the answer made, whole."""
        return [
            {
                "id": call["id"],
                "type": "function",
                "function": {"name": call["name"], "arguments": call["arguments"]},
            }
            for _, call in sorted(self._calls.items())
        ]

    def release(self, *, drop: bool) -> bytes:
        """The held events (`drop`: without the recall calls, which no round answers)."""
        if not drop:
            return b"".join(self.events) + self._rest
        recall = {index for index, call in self._calls.items() if call["name"] == RECALL_TOOL}
        kept = len(self._calls) > len(recall)
        return b"".join(_dropped(event, recall, kept) for event in self.events)


def _chunk(event: bytes) -> dict[str, Any] | None:
    lines = [line[5:].strip() for line in event.split(b"\n") if line.startswith(b"data:")]
    if not lines or lines == [b"[DONE]"]:
        return None
    try:
        parsed = orjson.loads(b"\n".join(lines))
    except orjson.JSONDecodeError:
        return None
    return parsed if isinstance(parsed, dict) else None


def _dropped(event: bytes, recall: set[int], others: bool) -> bytes:
    """A held event without the recall calls' deltas (a finish by tool calls becomes a stop
    when no other call is left)."""
    chunk = _chunk(event)
    if chunk is None or not isinstance(chunk.get("choices"), list):
        return event
    for choice in chunk["choices"]:
        delta = choice.get("delta") if isinstance(choice, dict) else None
        if isinstance(delta, dict) and isinstance(delta.get("tool_calls"), list):
            delta["tool_calls"] = [
                call
                for call in delta["tool_calls"]
                if not (isinstance(call, dict) and call.get("index") in recall)
            ]
            if not delta["tool_calls"]:
                del delta["tool_calls"]
        if isinstance(choice, dict) and choice.get("finish_reason") == "tool_calls" and not others:
            choice["finish_reason"] = "stop"
    return b"data: " + orjson.dumps(chunk) + b"\n\n"
