"""`/v1/responses`: OpenAI's Responses API on any model, through overspill's conversation core.

    request ─▶ validate ─▶ previous_response_id? load its chain (kernel/response_chains.py)
            ─▶ earlier items + this turn's input ─▶ chat messages (responses_wire.to_messages)
            ─▶ the layers, as any conversation ─▶ the model's deployment
    answer  ◀─ chat answer written as a response object / Responses events (responses_wire),
               or the upstream's own Responses answer passed through; stored as the chain's
               next link before the client can see its id (a JSON body is stored before it is
               sent; a stream's, before its completed event)

A chain is a conversation: its id is the client's (`X-Conversation-Id`), else the one derived
from its opening messages, as chat completions derive it, so the layers' cached extraction and
background growth serve a chain exactly as they serve the same conversation sent whole.

A deployment whose upstream serves the Responses API itself (`responses_api: native`, or
OpenAI's own API) gets the request in that wire: the client's own bytes while nothing changed
(the fast path), else the conversation's items written again. Its answer passes through as
bytes, so a reasoning model's reasoning items reach the client and come back in the chain.
"""

from __future__ import annotations

import base64
import binascii
import logging
import re
import time
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import orjson
from starlette.responses import Response

from kernel.conversation import given_id
from kernel.errors import InvalidChatRequest, OverspillError, too_deep
from kernel.json_values import is_int
from kernel.records import StoreError
from kernel.response_chains import NO_CHAIN, Chain, ResponseChains
from kernel.types import ChatRequest, ChatResponse, Message, RequestContext
from proxy.http import (
    CONVERSATION_HEADER,
    SKIP_HEADER,
    check_forbidden,
    json_object,
    skip_history_header,
)
from proxy.responses import error_response
from proxy.surfaces.responses_wire import (
    EventWriter,
    chat_params,
    check_input,
    from_chat,
    new_id,
    response_shell,
    sse_event,
    to_items,
    to_messages,
)
from proxy.surfaces.surface import Conversational

if TYPE_CHECKING:
    from proxy.system import System

log = logging.getLogger("overspill.responses")

RESPONSES_WIRE = "responses"
COMPACTION_PREFIX = "overspill.v1."
"""How overspill's own compaction items begin (`encrypted_content`), so it reads them back."""
REFUSED_FIELDS = {
    "conversation": "use previous_response_id to continue a stored response",
    "background": "overspill answers every response in the foreground",
    "prompt": "prompt templates are stored at OpenAI; send the prompt's text as input",
}
"""Request fields overspill cannot honour, and what to do instead (refused when set)."""
_SEQUENCE = re.compile(rb'"sequence_number":\s*(\d+)')


@dataclass(frozen=True, slots=True)
class ResponsesNative:
    """A Responses request as its client wrote it, for a deployment that speaks the API."""

    body: Mapping[str, Any]
    raw: bytes | None
    """The client's bytes, when they are the whole request (no chain was expanded)."""
    items: tuple[Mapping[str, Any], ...]
    """The chain's earlier items and this turn's input: the whole conversation."""
    messages: tuple[Message, ...]
    origins: tuple[int, ...]
    """The index of the item each message starts at (-1: the instructions')."""
    chat_body: Mapping[str, Any]
    wire: str = RESPONSES_WIRE
    headers: Mapping[str, str] = field(default_factory=dict)
    """No client header goes with a Responses request."""

    def body_for(self, request: ChatRequest, model: str) -> bytes | None:
        """The client's bytes while nothing changed (with the upstream's model name, its body
        re-encoded); the conversation's items when the layers changed its messages; None (send
        chat completions) when they changed parameters."""
        if request.body is not self.chat_body:
            return None
        if request.messages is not self.messages:
            return self._render(model, self._rewritten(request.messages), keep_instructions=False)
        if self.raw is None:  # a chain was expanded: the whole conversation goes
            return self._render(model, list(self.items), keep_instructions=True)
        if model == self.body.get("model"):
            return self.raw
        return self._render(model, None, keep_instructions=True)

    def _rewritten(self, messages: Sequence[Message]) -> list[Any]:
        """The items of messages a layer changed: what it wrote (the stand-in) as items, then
        the untouched tail as the client's own items, reasoning items and all (an upstream that
        reasons wants its reasoning back before the calls it made)."""
        kept = 0
        for mine, theirs in zip(reversed(messages), reversed(self.messages), strict=False):
            if mine is not theirs:
                break
            kept += 1
        if not kept or self.origins[len(self.messages) - kept] < 0:
            return to_items(messages)
        start = self.origins[len(self.messages) - kept]
        while start > 0 and self.items[start - 1].get("type") == "reasoning":
            start -= 1
        return [*to_items(messages[: len(messages) - kept]), *self.items[start:]]

    def _render(self, model: str, items: list[Any] | None, *, keep_instructions: bool) -> bytes:
        """The body with the upstream's model name and, unless None, these input items."""
        body = {k: v for k, v in self.body.items() if k != "previous_response_id"}
        if not keep_instructions:  # the instructions are the messages' first system message
            body.pop("instructions", None)
        body["model"] = model
        if items is not None:
            body["input"] = items
        try:
            return orjson.dumps(body)
        except orjson.JSONEncodeError as exc:
            raise too_deep("the request body") from exc


@dataclass(slots=True)
class ResponsesTurn(Conversational):
    """One `POST /v1/responses`: the conversation the layers run, and its answer's way back."""

    chat: ChatRequest
    body: Mapping[str, Any]
    turn_input: tuple[dict[str, Any], ...]
    chain: Chain
    chains: ResponseChains
    store: bool
    writer: EventWriter | None = None
    sequence: list[int] = field(default_factory=lambda: [-1])
    """The last sequence number a passed-through native stream carried."""

    async def answer(self, response: ChatResponse, ctx: RequestContext) -> ChatResponse:
        """The answer as a response object or Responses events, stored as the chain's link."""
        if response.wire == RESPONSES_WIRE:
            return await self._native(response, ctx)
        shell = response_shell(
            self.body,
            response_id=new_id("resp"),
            created_at=int(time.time()),
            previous_response_id=self.chain.links[-1].id if self.chain.links else None,
        )
        if response.stream is None:
            made = from_chat(response.json(), shell)
            await self._save(made, ctx)
            body = orjson.dumps(made)
            return ChatResponse(body=body, headers=response.headers, wire=RESPONSES_WIRE)
        self.writer = EventWriter(shell)
        events = self._translated(response.stream, self.writer, ctx)
        return ChatResponse(stream=events, headers=response.headers, wire=RESPONSES_WIRE)

    def stream_error(self, error: OverspillError) -> bytes:
        """`response.failed` and an `error` event, numbered after the events already sent."""
        if self.writer is not None:
            return self.writer.fail(error.error_code(), error.message)
        self.sequence[0] += 1
        event = {
            "type": "error",
            "code": error.error_code(),
            "message": error.message,
            "param": error.param,
            "sequence_number": self.sequence[0],
        }
        return sse_event(event)

    async def _translated(
        self, stream: AsyncIterator[bytes], writer: EventWriter, ctx: RequestContext
    ) -> AsyncIterator[bytes]:
        """Chat chunks in, Responses events out; stored before the completed event leaves."""
        try:
            yield writer.start()
            async for chunk in stream:
                out = writer.feed(chunk)
                if out:
                    yield out
            end = writer.finish()
            if writer.response is not None:
                await self._save(writer.response, ctx)
            yield end
        finally:
            close = getattr(stream, "aclose", None)
            if close is not None:
                await close()

    async def _native(self, response: ChatResponse, ctx: RequestContext) -> ChatResponse:
        """The upstream's own answer, passed through as bytes and stored."""
        if response.stream is None:
            await self._save(response.json(), ctx)
            return response
        return ChatResponse(
            stream=self._tapped(response.stream, ctx),
            status=response.status,
            headers=response.headers,
            wire=RESPONSES_WIRE,
        )

    async def _tapped(
        self, stream: AsyncIterator[bytes], ctx: RequestContext
    ) -> AsyncIterator[bytes]:
        """The upstream's events unchanged; its completed response stored before it is sent."""
        try:
            async for chunk in stream:
                numbers = _SEQUENCE.findall(chunk)
                if numbers:
                    self.sequence[0] = int(numbers[-1])
                if b'"response.completed"' in chunk or b'"response.incomplete"' in chunk:
                    done = _final_response(chunk)
                    if done is not None:
                        await self._save(done, ctx)
                yield chunk
        finally:
            close = getattr(stream, "aclose", None)
            if close is not None:
                await close()

    async def _save(self, response: dict[str, Any], ctx: RequestContext) -> None:
        """Store the response as the chain's next link; a store that fails costs the chain,
        never the answer (noted, and logged)."""
        if not self.store:
            return
        try:
            await self.chains.save(
                ctx.tenant, ctx.conversation_id, self.chain, self.turn_input, response
            )
        except StoreError as exc:
            ctx.note("response-stored", "false")
            log.error(
                "cannot store the response; it cannot be continued by previous_response_id",
                extra={"request_id": ctx.request_id, "error": str(exc)},
            )


def _final_response(chunk: bytes) -> dict[str, Any] | None:
    """The response object of a `response.completed` / `.incomplete` event in these events."""
    for line in chunk.splitlines():
        if not line.startswith(b"data:"):
            continue
        try:
            event = orjson.loads(line[5:])
        except orjson.JSONDecodeError:
            continue
        if isinstance(event, dict) and event.get("type") in (
            "response.completed",
            "response.incomplete",
        ):
            found = event.get("response")
            return found if isinstance(found, dict) else None
    return None


class ResponsesSurface:
    """OpenAI's Responses API (`POST /v1/responses`)."""

    name = "responses"

    async def open(
        self, raw: bytes, headers: Mapping[str, str], ctx: RequestContext, system: System
    ) -> tuple[ResponsesTurn, RequestContext]:
        """Validate the body, load the chain it continues, build the conversation."""
        body = json_object(raw)
        model = body.get("model")
        if not isinstance(model, str) or not model:
            raise InvalidChatRequest(
                "'model' is required: the model name to answer with", param="model"
            )
        check_forbidden(body)
        for name, instead in REFUSED_FIELDS.items():
            if body.get(name) not in (None, False):
                raise InvalidChatRequest(
                    f"{name!r} is not supported by overspill: {instead}", param=name
                )
        stream = _flag(body, "stream", False)
        store = _flag(body, "store", True)
        previous = body.get("previous_response_id")
        if previous is not None and (not isinstance(previous, str) or not previous):
            raise InvalidChatRequest(
                "'previous_response_id' must be a response id (a string)",
                param="previous_response_id",
            )
        instructions = body.get("instructions")
        if instructions is not None and not isinstance(instructions, str):
            raise InvalidChatRequest("'instructions' must be a string", param="instructions")
        threshold = _compact_threshold(body.get("context_management"))
        if body.get("truncation") not in (None, "auto", "disabled"):
            raise InvalidChatRequest("'truncation' must be auto or disabled", param="truncation")
        turn_input = check_input(body["input"]) if "input" in body else ()
        if not turn_input and previous is None:
            raise InvalidChatRequest(
                "'input' is required: a string or an array of items", param="input"
            )
        chains = chains_of(system)
        chain = await chains.load(ctx.tenant, previous) if previous else NO_CHAIN
        items = (*chain.items, *turn_input)
        entry = system.entries.get(model) or system.expand(model)
        native_road = entry is not None and entry.speaks_responses()
        seen, positions = _chat_view(items) if native_road else (items, None)
        origins: list[int] = []
        messages = tuple(
            to_messages(seen, instructions, read_compaction=read_compaction, origins=origins)
        )
        if positions is not None:
            origins = [positions[at] if at >= 0 else -1 for at in origins]
        chat_body = {"model": model, **chat_params(_function_tools(body) if native_road else body)}
        whole = raw if previous is None else None
        native = ResponsesNative(body, whole, items, messages, tuple(origins), chat_body)
        chat = ChatRequest(model, messages, stream, chat_body, native=native)
        resolved = RequestContext(
            request_id=ctx.request_id,
            tenant=ctx.tenant,
            conversation_hint=given_id(headers.get(CONVERSATION_HEADER), None)
            or chain.conversation_id,
            opening=messages,
            skip_history=skip_history_header(headers.get(SKIP_HEADER)),
            compact_threshold=threshold,
            may_truncate=body.get("truncation") == "auto",
            span=ctx.span,
        )
        turn = ResponsesTurn(chat, body, turn_input, chain, chains, store)
        return turn, resolved

    def error(self, error: OverspillError, ctx: RequestContext) -> Response:
        """The Responses API's errors have OpenAI's error shape."""
        return error_response(error, ctx)


def chains_of(system: System) -> ResponseChains:
    """The system's stored responses (a system built by hand without them gets its own)."""
    if system.chains is None:
        system.chains = ResponseChains(system.store)
    return system.chains


def compaction_item(text: str) -> dict[str, Any]:
    """overspill's compaction item: the condensed conversation, which it reads back itself."""
    packed = base64.urlsafe_b64encode(orjson.dumps({"text": text})).decode()
    return {
        "type": "compaction",
        "id": new_id("cmp"),
        "encrypted_content": COMPACTION_PREFIX + packed,
    }


def read_compaction(item: Mapping[str, Any]) -> str | None:
    """The text of one of overspill's own compaction items; None for another server's."""
    content = item.get("encrypted_content")
    if not isinstance(content, str) or not content.startswith(COMPACTION_PREFIX):
        return None
    try:
        found = orjson.loads(base64.urlsafe_b64decode(content[len(COMPACTION_PREFIX) :]))
    except (binascii.Error, ValueError, orjson.JSONDecodeError):
        return None
    text = found.get("text") if isinstance(found, dict) else None
    return text if isinstance(text, str) else None


CHAT_ITEMS = frozenset({"message", "function_call", "function_call_output", "reasoning"})
"""The item types that have a chat form (a reasoning item's is none: it is dropped)."""


def _chat_view(
    items: Sequence[Mapping[str, Any]],
) -> tuple[list[Mapping[str, Any]], list[int]]:
    """For a deployment that runs the Responses API itself: the items the layers can read
    (built-in tool calls and another server's compaction items have no chat form; the native
    request still carries them), and each one's position among all the items."""
    positions = [
        index
        for index, item in enumerate(items)
        if item.get("type") in CHAT_ITEMS
        or (item.get("type") == "compaction" and read_compaction(item) is not None)
    ]
    return [items[index] for index in positions], positions


def _function_tools(body: Mapping[str, Any]) -> Mapping[str, Any]:
    """The body as the layers see it on the native road: function tools only (the built-in
    ones, and a tool_choice naming one, go to the upstream untouched in the native form)."""
    tools = body.get("tools")
    choice = body.get("tool_choice")
    if not isinstance(tools, list) and not isinstance(choice, dict):
        return body
    seen = dict(body)
    if isinstance(tools, list):
        seen["tools"] = [t for t in tools if not isinstance(t, dict) or t.get("type") == "function"]
    if isinstance(choice, dict) and choice.get("type") != "function":
        seen.pop("tool_choice")
    return seen


def _compact_threshold(value: Any) -> int | None:
    """`context_management`'s compaction threshold (tokens), if the client set one."""
    if value is None:
        return None
    if not isinstance(value, list):
        raise InvalidChatRequest(
            "'context_management' must be an array of edits", param="context_management"
        )
    threshold = None
    for index, edit in enumerate(value):
        where = f"context_management[{index}]"
        if not isinstance(edit, dict) or edit.get("type") != "compaction":
            raise InvalidChatRequest(
                f"{where} must be an object with type 'compaction' (the one context edit the "
                "Responses API defines)",
                param=where,
            )
        found = edit.get("compact_threshold")
        if found is not None and (not is_int(found) or found < 1):
            raise InvalidChatRequest(
                f"{where}.compact_threshold must be a positive number of tokens", param=where
            )
        threshold = found
    return threshold


def _flag(body: Mapping[str, Any], name: str, default: bool) -> bool:
    """A boolean field (null is the default); anything else is a 400 naming it."""
    value = body.get(name)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise InvalidChatRequest(f"{name!r} must be true or false", param=name)
    return value
