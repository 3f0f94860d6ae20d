"""`/v1/messages`: Anthropic's Messages API on any model, through overspill's conversation core.

    request ─▶ validate, write as chat messages (messages_wire.py) ─▶ the layers, as any
               conversation ─▶ the model's deployment: its own Messages API (the client's
               bytes while nothing changed: messages_native.py) or chat completions
    answer  ◀─ the upstream's own Messages answer passed through, or the chat answer written
               as a `message` / Anthropic's events (messages_output.py)

Claude Code is the client this is for. What it needs beyond the translation is decided here,
at the surface, from its real requests:

- Identity: its requests carry no conversation id, but name their session
  (`X-Claude-Code-Session-Id`, and `session_id` inside `metadata.user_id`): the session is
  salted into the derived conversation id, so a session is one conversation from its first
  turn, and two sessions that open alike (one system prompt, one tool list, one first prompt)
  stay two.
- Side calls are not turns: a request with `max_tokens` of 1 (its quota probe, its key and
  model checks) or one with no tools and no assistant turn (a one-shot: its title, topic,
  summary and classifier calls send what they judge inside one user message) is sent with
  `skip_history`: no splice, no compaction, no masking, nothing recorded for the session.
- Its compaction request (`/compact` and auto-compact send the conversation and a last user
  message asking for "a detailed summary of the conversation so far", or of its "RECENT
  portion") is answered from overspill's own extraction of the conversation when there is one
  (or the conversation is past `context.compact_at`), at once and without sending the long
  summarisation prompt, in the `<analysis>`/`<summary>` form it asks for; the analysis says what
  the summary covers. A shorter conversation's request goes to the model as it is.
- An overflow overspill cannot avoid is Anthropic's own 400, `prompt is too long: N tokens > M
  maximum`, which Claude Code acts on; when the system prompt and the tool definitions alone
  exceed the window (they are never cut), the message names both sizes.

`context_management` (messages_edits.py) is honoured for any upstream, Anthropic's own aside
(it applies the edits itself): tool-use clearing by the observation_masking layer, thinking
clearing here, compaction by the layers' background compaction and, past its trigger, a
`compaction` block that begins the answer.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import orjson
from starlette.responses import Response

from kernel import redaction
from kernel.conversation import given_id
from kernel.errors import (
    ContextWindowExceeded,
    InvalidChatRequest,
    OverspillError,
    UpstreamError,
)
from kernel.types import MESSAGES_WIRE, ChatRequest, ChatResponse, RequestContext, ToolClearing
from middleware.condensing.condenser import Condenser
from providers import anthropic
from proxy.http import (
    CONVERSATION_HEADER,
    SKIP_HEADER,
    check_forbidden,
    json_object,
    skip_history_header,
)
from proxy.responses import JSON_TYPE, context_headers
from proxy.surfaces.compaction import compact, summary_text
from proxy.surfaces.messages_edits import NO_EDITS, Edits, applied, read_edits
from proxy.surfaces.messages_native import PASSED_HEADERS, MessagesNative
from proxy.surfaces.messages_output import (
    EventWriter,
    from_chat,
    message_shell,
    new_id,
    sse_event,
    usage_of,
)
from proxy.surfaces.messages_wire import Conversation, read_request
from proxy.surfaces.surface import Conversational, estimated_input_tokens

if TYPE_CHECKING:
    from kernel.config import ModelEntry
    from proxy.system import System

log = logging.getLogger("overspill.messages")

SESSION_HEADER = "x-claude-code-session-id"
COMPACT_MARKERS = (
    "create a detailed summary of the conversation so far",
    "detailed summary of the RECENT portion of the conversation",
)
"""What Claude Code's compaction request (its last user message) says (2.1.x's prompts)."""
ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    408: "timeout_error",
    413: "request_too_large",
    429: "rate_limit_error",
    431: "request_too_large",
    504: "timeout_error",
    529: "overloaded_error",
}
"""Anthropic's error type for a status (any other 4xx: invalid_request_error; 5xx: api_error)."""


def error_type(error: OverspillError) -> str:
    """The Anthropic error type of an error: the upstream's own when it answered in Anthropic's
    shape, else the one Anthropic gives the status."""
    if isinstance(error, UpstreamError) and isinstance(error.upstream_body, dict):
        inner = error.upstream_body.get("error")
        kind = inner.get("type") if isinstance(inner, dict) else None
        if error.upstream_body.get("type") == "error" and isinstance(kind, str):
            return kind
    status = error.http_status()
    return ERROR_TYPES.get(status, "invalid_request_error" if status < 500 else "api_error")


def error_body(error: OverspillError, request_id: str | None = None) -> bytes:
    """An error in Anthropic's shape (secrets redacted)."""
    body: dict[str, Any] = {
        "type": "error",
        "error": {"type": error_type(error), "message": error.message},
    }
    if request_id is not None:
        body["request_id"] = request_id
    return redaction.redactor.redact_bytes(orjson.dumps(body))


def error_response(error: OverspillError, ctx: RequestContext) -> Response:
    """An error as a whole response in Anthropic's shape, with overspill's headers."""
    headers = {**error.headers(), **context_headers(ctx)}
    body = error_body(error, ctx.request_id)
    return Response(body, error.http_status(), headers, media_type=JSON_TYPE)


def stream_error(error: OverspillError) -> bytes:
    """An error after the stream's first byte: Anthropic's `error` event."""
    return redaction.redactor.redact_bytes(
        sse_event({"type": "error", "error": {"type": error_type(error), "message": error.message}})
    )


@dataclass(slots=True)
class MessagesTurn(Conversational):
    """One `POST /v1/messages`: the conversation the layers run, and its answer's way back."""

    chat: ChatRequest
    body: Mapping[str, Any]
    conversation: Conversation
    edits: Edits = NO_EDITS
    compaction_request: bool = False
    writer: EventWriter | None = None
    compaction_block: str | None = None
    """A compaction block's summary the answer begins with (the compaction edit)."""
    applies_edits: bool = True
    """overspill applies the context edits (not the upstream: Anthropic applies its own)."""

    @property
    def stops(self) -> tuple[str, ...]:
        """The request's stop sequences."""
        stops = self.chat.body.get("stop")
        return tuple(stops) if isinstance(stops, list) else ()

    async def run(self, system: System, ctx: RequestContext) -> ChatResponse:
        """The layers, then the model's deployment (or overspill's own summary, for a
        compaction request it can answer)."""
        if self.compaction_request and not ctx.skip_history:
            answered = await self._summary(system, ctx)
            if answered is not None:
                return answered
        compaction = self.edits.compaction
        if compaction is not None and self.applies_edits and system.services is not None:
            paused = await self._compaction_edit(system, ctx, compaction.trigger)
            if paused is not None and compaction.pause:
                return paused
        try:
            return await system.pipeline.handle(self.chat, ctx)
        except ContextWindowExceeded as exc:
            raise await too_long(exc, self.chat, ctx, system) from exc

    async def answer(self, response: ChatResponse, ctx: RequestContext) -> ChatResponse:
        """The answer as a Messages `message` or Anthropic's events."""
        management = self._management(ctx)
        if response.wire == MESSAGES_WIRE:
            return _native_answer(response, management)
        shell = message_shell(self.model, new_id("msg"))
        if response.stream is None:
            made = from_chat(response.json(), shell, self.stops)
            if self.compaction_block is not None:
                made["content"] = [_compaction_block(self.compaction_block), *made["content"]]
            if management is not None:
                made["context_management"] = management
            return ChatResponse(
                body=orjson.dumps(made), headers=response.headers, wire=MESSAGES_WIRE
            )
        self.writer = EventWriter(shell, self.stops, management, self.compaction_block)
        events = _translated(response.stream, self.writer)
        return ChatResponse(stream=events, headers=response.headers, wire=MESSAGES_WIRE)

    def stream_error(self, error: OverspillError) -> bytes:
        """Anthropic's `error` event."""
        return stream_error(error)

    def _management(self, ctx: RequestContext) -> dict[str, Any] | None:
        """The answer's `context_management`, when overspill applied the request's edits."""
        if not self.applies_edits:
            return None
        thinking = [len(text) // 4 for text in self.conversation.thinking]
        return applied(self.edits, ctx.cleared, thinking)

    async def _summary(self, system: System, ctx: RequestContext) -> ChatResponse | None:
        """A compaction request answered from overspill's extraction, or None (the model
        writes it: the conversation is short, or its window unknown)."""
        services, entry = system.services, ctx.model
        if services is None or entry is None:
            return None
        condenser = Condenser(services)
        request = self.chat.with_messages(self.chat.messages[:-1])  # without the request itself
        if await condenser.window(entry) is None:
            return None
        cached = await condenser.cached(ctx, request)
        if cached is None or condenser.miss_reason(cached, ctx, request, len(request.messages)):
            counted = services.estimator.count(entry, request.messages, request.body.get("tools"))
            window = await condenser.window(entry)
            assert window is not None
            plan = condenser.plan(
                request, entry, window=window, scale=await services.estimator.scale(entry)
            )
            if counted * plan.scale <= plan.budget.prompt_limit * entry.context.compact_at:
                return None
        done = await compact(condenser, request, ctx)
        if done.stand_in is None:
            return None
        ctx.note("action", "summary-answered")
        ctx.note("messages-condensed", done.replaced)
        text = summary_text(done, len(request.messages))
        shell = message_shell(self.model, new_id("msg"))
        made = from_chat(_completion(text, done.after), shell)
        if not self.stream:
            return ChatResponse(body=orjson.dumps(made), wire=MESSAGES_WIRE)
        return ChatResponse(stream=_replayed(made), wire=MESSAGES_WIRE)

    async def _compaction_edit(
        self, system: System, ctx: RequestContext, trigger: int
    ) -> ChatResponse | None:
        """Past the compaction edit's trigger: the summary the answer begins with (and the
        answer to give when the client asked to pause after it); None before the trigger."""
        services, entry = system.services, ctx.model
        if services is None or entry is None:
            return None
        counted = services.estimator.count(entry, self.chat.messages, self.chat.body.get("tools"))
        if counted * await services.estimator.scale(entry) <= trigger:
            return None
        done = await compact(Condenser(services), self.chat, ctx)
        if done.stand_in is None:
            return None
        self.compaction_block = summary_text(done, len(self.chat.messages), tagged=False)
        self.chat = dataclasses.replace(self.chat, native=None)  # the block is overspill's
        ctx.note("compaction", "block")
        shell = message_shell(self.model, new_id("msg"))
        made = {**shell, "content": [_compaction_block(self.compaction_block)]}
        made["stop_reason"] = "compaction"
        if not self.stream:
            return ChatResponse(body=orjson.dumps(made), wire=MESSAGES_WIRE)
        return ChatResponse(stream=_replayed(made), wire=MESSAGES_WIRE)


def _compaction_block(summary: str) -> dict[str, Any]:
    return {"type": "compaction", "content": summary}


def _completion(text: str, prompt_tokens: int) -> dict[str, Any]:
    """A chat completion of overspill's own text (what the summary answer is written from)."""
    return {
        "choices": [
            {"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}
        ],
        "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": len(text) // 4},
    }


async def _replayed(message: Mapping[str, Any]) -> AsyncIterator[bytes]:
    """A whole message as Anthropic's events."""
    shell = {**message, "content": [], "stop_reason": None, "usage": usage_of(None)}
    yield EventWriter(shell).replay(message)


async def _translated(stream: AsyncIterator[bytes], writer: EventWriter) -> AsyncIterator[bytes]:
    """Chat chunks in, Anthropic's events out."""
    try:
        yield writer.start()
        async for chunk in stream:
            out = writer.feed(chunk)
            if out:
                yield out
        yield writer.finish()
    finally:
        close = getattr(stream, "aclose", None)
        if close is not None:
            await close()


def _native_answer(response: ChatResponse, management: dict[str, Any] | None) -> ChatResponse:
    """The upstream's own Messages answer; with overspill's `context_management` when it
    applied the request's edits itself (the upstream did not)."""
    if management is None:
        return response
    if response.stream is None:
        made = response.json()
        if isinstance(made, dict):
            made["context_management"] = management
            return dataclasses.replace(response, body=orjson.dumps(made))
        return response
    return dataclasses.replace(response, stream=_with_management(response.stream, management))


async def _with_management(
    stream: AsyncIterator[bytes], management: dict[str, Any]
) -> AsyncIterator[bytes]:
    """The upstream's events, its `message_delta` carrying overspill's `context_management`."""
    try:
        async for chunk in stream:
            if b'"message_delta"' in chunk:
                chunk = _managed_delta(chunk, management)
            yield chunk
    finally:
        close = getattr(stream, "aclose", None)
        if close is not None:
            await close()


def _managed_delta(chunk: bytes, management: dict[str, Any]) -> bytes:
    events = chunk.split(b"\n\n")
    for index, event in enumerate(events):
        lines = event.split(b"\n")
        for place, line in enumerate(lines):
            if not line.startswith(b"data:") or b'"message_delta"' not in line:
                continue
            try:
                parsed = orjson.loads(line[5:])
            except orjson.JSONDecodeError:
                continue
            if isinstance(parsed, dict) and parsed.get("type") == "message_delta":
                parsed["context_management"] = management
                lines[place] = b"data: " + orjson.dumps(parsed)
        events[index] = b"\n".join(lines)
    return b"\n\n".join(events)


async def too_long(
    error: ContextWindowExceeded, request: ChatRequest, ctx: RequestContext, system: System
) -> ContextWindowExceeded:
    """An overflow overspill could not avoid, as Anthropic words it (`prompt is too long: N
    tokens > M maximum`); when the system prompt and tool definitions alone exceed the
    window, the message names both sizes (overspill never cuts them)."""
    entry, services = ctx.model, system.services
    requested, limit = error.requested, error.limit
    fixed = ""
    if entry is not None and services is not None:
        estimator = services.estimator
        scale = await estimator.scale(entry)
        if requested is None:
            counted = estimator.count(entry, request.messages, request.body.get("tools"))
            requested = int(counted * scale)
        window = await Condenser(services).window(entry, limit)
        limit = limit or window
        prompt = [m for m in request.messages if m.get("role") in ("system", "developer")]
        system_tokens = int(sum(estimator.counts(entry, prompt)) * scale)
        tool_tokens = int(estimator.count_tools(entry, request.body.get("tools")) * scale)
        if window is not None and system_tokens + tool_tokens >= window:
            fixed = (
                f"; the system prompt ({system_tokens:,} tokens) and the tool definitions "
                f"({tool_tokens:,} tokens) alone take more than model {entry.model_name!r}'s "
                f"context window ({window:,} tokens), and overspill never cuts them: use a "
                "model with a larger window, or fewer tools"
            )
    head = f"prompt is too long: {requested or 0} tokens > {limit or 0} maximum"
    return ContextWindowExceeded(
        f"{head}{fixed or ' (' + error.message + ')'}",
        requested=requested,
        limit=limit,
        provider=error.provider,
        upstream_status=error.upstream_status,
        upstream_body=error.upstream_body,
        estimated=error.estimated,
    )


def session_of(headers: Mapping[str, str], body: Mapping[str, Any]) -> str | None:
    """The client's session: Claude Code's `X-Claude-Code-Session-Id`, else the `session_id`
    inside `metadata.user_id` (a JSON object it writes as a string)."""
    header = headers.get(SESSION_HEADER)
    if header:
        return header[:128]
    metadata = body.get("metadata")
    user = metadata.get("user_id") if isinstance(metadata, dict) else None
    if not isinstance(user, str) or not user.startswith("{"):
        return None
    try:
        found = orjson.loads(user)
    except orjson.JSONDecodeError:
        return None
    session = found.get("session_id") if isinstance(found, dict) else None
    return session[:128] if isinstance(session, str) and session else None


def side_call(body: Mapping[str, Any], conversation: Conversation) -> bool:
    """Whether a request is a call beside the conversation, not a turn of it: `max_tokens` of
    1 (a probe), or no tools and no assistant turn (a one-shot judgement)."""
    if body.get("max_tokens") == 1:
        return True
    if body.get("tools"):
        return False
    return not any(message["role"] == "assistant" for message in conversation.messages)


def compaction_request(conversation: Conversation) -> bool:
    """Whether the last message asks for a summary of the conversation (Claude Code's
    compaction request)."""
    last = conversation.messages[-1] if conversation.messages else None
    if last is None or last["role"] != "user" or len(conversation.messages) < 3:
        return False
    text = last.get("content")
    if not isinstance(text, str):
        text = " ".join(p.get("text", "") for p in text or () if isinstance(p, dict))
    return any(marker in text for marker in COMPACT_MARKERS)


def native_of(entry: ModelEntry | None) -> tuple[bool, bool]:
    """(whether the deployment speaks the Messages API itself, whether it applies the context
    edits itself: Anthropic's own API)."""
    if entry is None:
        return False, False
    own = anthropic.serves(entry) and entry.messages_api != "translate"
    return own or entry.speaks_messages(), own


class MessagesSurface:
    """Anthropic's Messages API (`POST /v1/messages`)."""

    name = "messages"

    async def open(
        self, raw: bytes, headers: Mapping[str, str], ctx: RequestContext, system: System
    ) -> tuple[MessagesTurn, RequestContext]:
        """Validate the body and write its conversation in chat terms."""
        body, conversation, chat, native = _read(raw, headers, system)
        edits = read_edits(body.get("context_management"))
        _, upstream_edits = native
        clearing = edits.clearing
        if upstream_edits and clearing is not None:
            clearing = ToolClearing(off=True)  # Anthropic clears tool uses itself
        skip = side_call(body, conversation)
        header = headers.get(SKIP_HEADER)
        if header is not None:
            skip = skip_history_header(header)
        compaction = edits.compaction if not upstream_edits else None
        resolved = RequestContext(
            request_id=ctx.request_id,
            tenant=ctx.tenant,
            conversation_hint=given_id(headers.get(CONVERSATION_HEADER), None),
            opening=chat.messages,
            skip_history=skip,
            compact_threshold=compaction.trigger if compaction is not None else None,
            session=session_of(headers, body),
            tool_clearing=clearing,
            span=ctx.span,
        )
        if conversation.thinking and not native[0]:
            resolved.note("thinking-dropped", len(conversation.thinking))
        turn = MessagesTurn(
            chat,
            body,
            conversation,
            edits,
            compaction_request(conversation),
            applies_edits=not upstream_edits,
        )
        return turn, resolved

    def error(self, error: OverspillError, ctx: RequestContext) -> Response:
        """Anthropic's error shape."""
        return error_response(error, ctx)


def _read(
    raw: bytes, headers: Mapping[str, str], system: System, *, counting: bool = False
) -> tuple[dict[str, Any], Conversation, ChatRequest, tuple[bool, bool]]:
    """The body, its conversation, the chat request the layers run, and how the deployment
    takes it (`native_of`). `counting`: a count_tokens body (no max_tokens, never streamed)."""
    body = json_object(raw)
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise InvalidChatRequest(
            "'model' is required: the model name to answer with", param="model"
        )
    check_forbidden(body)
    entry = system.entries.get(model) or system.expand(model)
    native = native_of(entry)
    shown = {**body, "max_tokens": 1, "stream": False} if counting else body
    conversation = read_request(shown, native=native[0])
    passed = {name: headers[name] for name in PASSED_HEADERS if headers.get(name)}
    chat_body = {"model": model, **conversation.params}
    form = MessagesNative(body, raw, conversation.messages, conversation.origins, chat_body, passed)
    chat = ChatRequest(
        model, conversation.messages, bool(chat_body.get("stream")), chat_body, native=form
    )
    return body, conversation, chat, native


@dataclass(frozen=True, slots=True)
class CountTurn(Conversational):
    """One `POST /v1/messages/count_tokens`: the upstream's own count, else overspill's."""

    chat: ChatRequest
    native: bool

    @property
    def stream(self) -> bool:
        """A count is never streamed."""
        return False

    async def run(self, system: System, ctx: RequestContext) -> ChatResponse:
        """`{"input_tokens": N}`: the upstream's count where it has one (Anthropic's API, a
        server speaking the Messages API), else overspill's calibrated estimate."""
        form = self.chat.native
        if self.native and isinstance(form, MessagesNative):
            for provider in system.providers_of(self.model):
                count = getattr(provider, "count_tokens", None)
                if count is None:
                    continue
                body = form.body_for(self.chat, getattr(provider, "model", self.model))
                answer = await count(body, dict(form.headers)) if body is not None else None
                if answer is not None:
                    ctx.note("count", "upstream")
                    return ChatResponse(body=answer, wire=MESSAGES_WIRE)
        tokens = await estimated_input_tokens(self.chat, system, ctx)
        return ChatResponse(body=orjson.dumps({"input_tokens": tokens}), wire=MESSAGES_WIRE)

    async def answer(self, response: ChatResponse, ctx: RequestContext) -> ChatResponse:
        """Already in the client's wire."""
        return response

    def stream_error(self, error: OverspillError) -> bytes:
        """Never streamed; Anthropic's error event all the same."""
        return stream_error(error)


class CountTokensSurface:
    """Anthropic's `POST /v1/messages/count_tokens`."""

    name = "messages.count_tokens"

    async def open(
        self, raw: bytes, headers: Mapping[str, str], ctx: RequestContext, system: System
    ) -> tuple[CountTurn, RequestContext]:
        """Read the body as `/v1/messages` reads it (no max_tokens needed, never streamed)."""
        body, _, chat, native = _read(raw, headers, system, counting=True)
        form = chat.native
        assert isinstance(form, MessagesNative)
        raw_body = {k: v for k, v in body.items() if k not in ("max_tokens", "stream")}
        counted = dataclasses.replace(form, body=raw_body, raw=orjson.dumps(raw_body))
        chat = dataclasses.replace(chat, stream=False, native=counted)
        resolved = RequestContext(
            request_id=ctx.request_id, tenant=ctx.tenant, opening=chat.messages, span=ctx.span
        )
        return CountTurn(chat, native[0]), resolved

    def error(self, error: OverspillError, ctx: RequestContext) -> Response:
        """Anthropic's error shape."""
        return error_response(error, ctx)
