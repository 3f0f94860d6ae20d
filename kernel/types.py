"""The request, the response, the per-request context, and the two protocols (Layer, Provider).

A `ChatRequest` is frozen: layers return changed copies and never mutate. Fields we do not
model ride along untouched in `body`, and while nothing changed `raw` keeps the exact bytes the
client sent, so an unchanged request is forwarded byte for byte.

The layers see one neutral conversation, OpenAI's chat messages, whatever API the client spoke:
each API surface of the shell (proxy/surfaces/) parses its wire into a `ChatRequest` and renders
the answer back. A request that came in another wire keeps it as `native`, so a provider whose
upstream speaks that wire can send it as the client did (the fast path), and a `ChatResponse`
says which wire its body speaks (`wire`). Requests that are not a conversation (embeddings,
legacy completions) are `RouteRequest`s, forwarded to the model's deployment by the router.
"""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Protocol, cast

import orjson

from kernel.config import ModelEntry
from kernel.conversation import derived_id
from kernel.errors import RouteNotServed, too_deep
from kernel.json_values import is_int
from kernel.spending import Spend
from kernel.tracing import Span

Message = Mapping[str, Any]
"""One OpenAI chat message, as the client sent it (never mutated)."""


@dataclass(frozen=True, slots=True)
class ChatRequest:
    """A parsed `/v1/chat/completions` request."""

    model: str
    messages: tuple[Message, ...]
    stream: bool
    body: Mapping[str, Any]
    raw: bytes | None = None
    extensions: Mapping[str, Any] = field(default_factory=dict)
    spliced_from: tuple[Message, ...] | None = None
    """The whole conversation when `messages` stands a condensed extraction in for its older
    part (history_splice); condensing always starts from it, never from the stand-in."""
    native: Native | None = None
    """The request in the wire the client spoke, when that is not chat completions (None for
    chat completions and overspill's own calls)."""

    def with_messages(self, messages: Sequence[Message]) -> ChatRequest:
        """A copy with other messages (the raw bytes no longer apply)."""
        return dataclasses.replace(self, messages=tuple(messages), raw=None)

    def spliced(self, messages: Sequence[Message]) -> ChatRequest:
        """A copy sending `messages`, which stand in for this request's whole conversation."""
        return dataclasses.replace(
            self, messages=tuple(messages), raw=None, spliced_from=self.messages
        )

    def whole(self) -> ChatRequest:
        """The request with its whole conversation (itself, unless it was spliced)."""
        if self.spliced_from is None:
            return self
        return dataclasses.replace(self, messages=self.spliced_from, spliced_from=None)

    def with_params(self, **params: Any) -> ChatRequest:
        """A copy with body parameters set (e.g. `max_tokens`); `None` removes one."""
        body = {k: v for k, v in self.body.items() if k not in params}
        body.update({k: v for k, v in params.items() if v is not None})
        return dataclasses.replace(self, body=body, raw=None)

    def upstream_body(self, model: str) -> dict[str, Any]:
        """The body to send upstream, with the upstream's model name."""
        body = dict(self.body)
        body["model"] = model
        body["messages"] = list(self.messages)
        return body

    def render(self, model: str) -> bytes:
        """The JSON bytes to send upstream: the client's own bytes when nothing changed."""
        if self.raw is not None and model == self.model:
            return self.raw
        try:
            return orjson.dumps(self.upstream_body(model))
        except orjson.JSONEncodeError as exc:  # parsed (up to 1024 levels), cannot be written
            raise too_deep("the request body") from exc

    def params(self) -> dict[str, Any]:
        """Every body field except model and messages (what a provider forwards as-is)."""
        return {k: v for k, v in self.body.items() if k not in ("model", "messages")}


class Native(Protocol):
    """A request in the wire its client spoke (the Responses API, Anthropic's Messages API).

    A provider whose upstream speaks `wire` sends `body_for(request, model)` to that API instead
    of chat completions: the client's own bytes while no layer changed the request, else the
    request's messages and parameters written in that wire again; None when a layer changed
    what only chat completions can say (the provider then sends chat completions).
    """

    @property
    def wire(self) -> str:
        """The API the native form is written for (`responses`, `anthropic`)."""
        ...

    @property
    def headers(self) -> Mapping[str, str]:
        """The client's headers that the upstream of `wire` reads with the body (Anthropic's
        `anthropic-version` and `anthropic-beta`), sent with the native form."""
        ...

    def body_for(self, request: ChatRequest, model: str) -> bytes | None:
        """The body to send to the upstream's `wire` API, with the upstream's model name."""
        ...


CHAT_WIRE = "chat"
"""The wire of `/v1/chat/completions`: what every provider can answer in."""
MESSAGES_WIRE = "anthropic"
"""The wire of Anthropic's Messages API (`/v1/messages`)."""


@dataclass(frozen=True, slots=True)
class RouteRequest:
    """A request that is not a conversation (`/v1/embeddings`, `/v1/completions`), forwarded
    to a deployment of `model` as it came: the client's bytes to an upstream of the same wire."""

    route: str
    """The API route it is for, without `/v1/`: `embeddings` or `completions`."""
    model: str
    stream: bool
    body: Mapping[str, Any]
    raw: bytes

    def render(self, model: str) -> bytes:
        """The body for the upstream: the client's bytes when the model name is the same."""
        if model == self.model:
            return self.raw
        try:
            return orjson.dumps({**self.body, "model": model})
        except orjson.JSONEncodeError as exc:  # parsed (up to 1024 levels), cannot be written
            raise too_deep("the request body") from exc


@dataclass(frozen=True, slots=True)
class ChatResponse:
    """What a provider answered: a whole JSON body, or a primed SSE byte stream.

    A stream's first event has already arrived when the response exists (priming), so any
    error the upstream reports up front is an exception, not a response. The stream yields
    bytes in SSE wire format (`data: {...}\\n\\n`, ending with `data: [DONE]\\n\\n`).
    """

    body: bytes | None = None
    stream: AsyncIterator[bytes] | None = None
    status: int = 200
    headers: Mapping[str, str] = field(default_factory=dict)
    wire: str = CHAT_WIRE
    """The API the body or stream is written in: `chat` (a chat.completion and its chunks),
    or the request's `native.wire` when the upstream answered in the client's own wire."""

    def json(self) -> Any:
        """The parsed JSON body (non-stream responses only)."""
        if self.body is None:
            raise TypeError("a streamed response has no JSON body")
        return orjson.loads(self.body)

    def prompt_tokens(self) -> int | None:
        """The upstream's `usage.prompt_tokens` of a JSON answer (None for streams, bodies
        that are not JSON, and answers without usage)."""
        if self.body is None:
            return None
        try:
            return prompt_tokens_of(orjson.loads(self.body))
        except orjson.JSONDecodeError:
            return None


def prompt_tokens_of(payload: object) -> int | None:
    """The prompt's tokens in a parsed answer's `usage`, when present: `prompt_tokens` of a
    chat.completion (or chunk), `input_tokens` of a Responses API response."""
    usage = payload.get("usage") if isinstance(payload, dict) else None
    if not isinstance(usage, dict):
        return None
    value = usage.get("prompt_tokens", usage.get("input_tokens"))
    return value if is_int(value) else None


@dataclass(frozen=True, slots=True)
class ToolClearing:
    """A client's own rule for clearing old tool results from what is sent (Anthropic's
    `clear_tool_uses` context edit), in place of overspill's default masking policy.

    Past `trigger` estimated prompt tokens, the results of all but the newest `keep` tool uses
    are replaced by placeholders (the originals stay retrievable), only when that clears at
    least `clear_at_least` tokens; the uses of `exclude` tools are never cleared;
    `clear_inputs` clears the calls' arguments too (True: every tool's, a set: those tools').
    """

    trigger: int | None = None
    """Estimated prompt tokens past which results are cleared (None: overspill's own point,
    unless `trigger_uses` says when)."""
    trigger_uses: int | None = None
    """Clear once the conversation holds more tool uses than this (instead of a token count)."""
    keep: int = 3
    clear_at_least: int = 0
    exclude: frozenset[str] = frozenset()
    clear_inputs: bool | frozenset[str] = False
    off: bool = False
    """Nothing is cleared by overspill (the upstream applies the client's own edits)."""


@dataclass(frozen=True, slots=True)
class Cleared:
    """What clearing old tool results took out of a request: uses cleared, tokens saved."""

    tool_uses: int
    tokens: int


@dataclass(slots=True)
class RequestContext:
    """What travels with a request but is never sent upstream, resolved once at the edge.

    Layers read these typed fields, never the client's headers. The conversation id is the
    client's (`X-Conversation-Id`, else `metadata.conversation_id`) when it gave one, else
    derived from the tenant and the opening messages on first use (hashing costs µs that a
    request needing no help should not pay).
    """

    request_id: str
    tenant: str
    model: ModelEntry | None = None
    conversation_hint: str | None = None
    """The conversation id the client gave, validated at the edge."""
    opening: Sequence[Message] = ()
    """The client's messages, from which an id is derived when the client gave none."""
    skip_history: bool = False
    """The client asked for its full history to be sent (no splice)."""
    may_truncate: bool = False
    """The client allows dropping its oldest turns when condensing cannot make the conversation
    fit (the Responses API's `truncation: "auto"`): a last retry instead of a failure."""
    compact_threshold: int | None = None
    """The client's own point (estimated prompt tokens) past which background compaction
    starts for this conversation, instead of the model's `context.compact_at` share."""
    session: str | None = None
    """The client's session, when its requests name one: salted into a derived conversation
    id, so two sessions that open alike stay two conversations."""
    tool_clearing: ToolClearing | None = None
    """The client's own rule for clearing old tool results (None: overspill's default)."""
    cleared: Cleared | None = None
    """What clearing old tool results took out of this request (set by the layer that did)."""
    unmasked: Sequence[Message] | None = None
    """The client's own messages, when a layer sends placeholders in place of some of them
    (observation_masking): whose chain says which history an extraction stands for, since the
    placeholders change as later batches are masked and the client's messages do not."""
    notes: dict[str, str] = field(default_factory=dict)
    upstream_seconds: float = 0.0
    """Time spent awaiting upstream answers to this request (the router adds to it), so the
    shell can tell overspill's own time from the upstream's."""
    span: Span | None = None
    """The request's span while tracing is on (proxy/endpoint.py ends it with the answer)."""
    after: list[tuple[str, Callable[[], Coroutine[Any, Any, None]]]] = field(default_factory=list)
    """Named work a layer asks to run once the response has been sent (its last byte, for a
    stream): the shell starts each as one of the system's background jobs (kernel/jobs.py)."""
    derived: dict[str, object] = field(default_factory=dict)
    """What layers derived from this request's messages and share, dropped with the request
    (the conversation's History: middleware/condensing/condenser.py)."""
    spend: Spend | None = None
    """What the request made overspill spend upstream and the bound on it (kernel/spending.py):
    made at the edge, shared by the request's own calls; None only where nothing is counted."""
    shadow: bool = False
    """Shadow mode (the key's `shadow`, or the model's `context.shadow`): every layer decides
    and reports what it would do, and the request goes upstream unchanged."""
    own: bool = False
    """One of overspill's own calls (extraction, condensing, warm-up), not a client's: it waits
    for a slot of the deployment's parallelism (providers/parallelism.py)."""
    deployment: int | None = None
    """The call goes to this one of the model's deployments (their order in `model_list`),
    none other tried (a health check names each one); None: the router picks and fails over."""
    outer_replaces: str | None = None
    """An outer layer placed content without knowing the window and places it again once an
    overflow states one (`documents`): overflow_recovery lets that first overflow through."""
    _derived: str | None = None

    @property
    def conversation_id(self) -> str:
        """The conversation this request continues (the client's id, else derived)."""
        if self.conversation_hint is not None:
            return self.conversation_hint
        if self._derived is None:
            self._derived = derived_id(self.tenant, self.opening, self.session)
        return self._derived

    def after_response(self, name: str, job: Callable[[], Coroutine[Any, Any, None]]) -> None:
        """Run `job` in the background once the response has been sent."""
        self.after.append((name, job))

    def note(self, key: str, value: object) -> None:
        """Record what a layer did; becomes an `x-overspill-<key>` header and a log field."""
        self.notes[key] = str(value)

    def spending(self) -> Spend:
        """The request's Spend (made now when the edge made none: a context a test built)."""
        if self.spend is None:
            self.spend = Spend(self.tenant, self.notes)
        return self.spend


Next = Callable[[ChatRequest, RequestContext], Awaitable[ChatResponse]]
"""The rest of the pipeline, as a layer sees it."""


class Layer(Protocol):
    """One middleware layer; `name` is its key in config.yaml's `middleware:` list."""

    name: ClassVar[str]

    async def handle(
        self, request: ChatRequest, ctx: RequestContext, call_next: Next
    ) -> ChatResponse:
        """Handle the request, calling `call_next` for the rest of the pipeline."""
        ...


class Provider(Protocol):
    """Sends one request to one upstream deployment; raises errors from kernel/errors.py."""

    name: str

    async def complete(self, request: ChatRequest, ctx: RequestContext) -> ChatResponse:
        """Send the request; streams are returned primed."""
        ...

    async def aclose(self) -> None:
        """Release connections."""
        ...


class RouteProvider(Protocol):
    """A provider that also forwards the requests that are not conversations."""

    name: str

    async def send(self, request: RouteRequest, ctx: RequestContext) -> ChatResponse:
        """Forward an embeddings or legacy completions request; streams are returned primed.
        Raises `RouteNotServed` (400) when the deployment cannot serve the route."""
        ...


def forwarder(provider: Provider, request: RouteRequest) -> RouteProvider:
    """`provider` as one that forwards `request`'s route; `RouteNotServed` when it forwards
    none (every provider of overspill's does: a stand-in for tests may not)."""
    if not hasattr(provider, "send"):
        raise RouteNotServed(
            f"model {request.model!r} cannot serve /v1/{request.route}: its deployment "
            f"({provider.name}) forwards only conversations"
        )
    return cast(RouteProvider, provider)


@dataclass(frozen=True, slots=True)
class Completion:
    """The text of an internal (layer-skipping) call, with the upstream's token counts."""

    text: str
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    finish_reason: str | None = None


class Complete(Protocol):
    """An internal chat call to one configured model, skipping the layers.

    Raises `ContextWindowExceeded` when the messages do not fit that model's window, and the
    other errors of kernel/errors.py as any provider call does.
    """

    async def __call__(self, messages: Sequence[Message], *, max_tokens: int) -> Completion:
        """Send `messages`; the answer's text, at most `max_tokens` long."""
        ...
