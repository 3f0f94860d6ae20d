"""A provider's API in OpenAI's chat terms (a `Wire`), and the provider that sends through one.

A wire says how a chat request is written in its API (the body and headers), how the API's
JSON answer reads as a `chat.completion`, and how its stream events read as chunks. Three
wires implement it: overspill's own translations of Anthropic's and Gemini's APIs
(`providers/anthropic.py`, `providers/gemini.py`, no litellm) and litellm's translation of a
provider (`providers/translated.py`). Whichever wrote the request, `WireProvider` sends it
with the app's shared client through an `Exchange` (deadline, bounded read), reads the JSON
answer back, and primes and relays the stream event by event as OpenAI chunks.

A wire also says which requests it leaves to litellm (`leaves`), before anything is written:
`providers/roads.py` chooses a request's road from that.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import orjson

from kernel import tracing
from kernel.config import DEFAULT_MAX_RESPONSE_BYTES, DEFAULT_TIMEOUT, ModelEntry
from kernel.errors import too_deep
from kernel.types import ChatRequest, ChatResponse, RequestContext
from providers.chunks import SseRelay, include_usage
from providers.exchange import Exchange
from providers.openai_compat import forward_native
from providers.transport import Reply, Upstream

SETTINGS = frozenset({"extra_headers", "max_retries", "num_retries"})
"""Deployment settings overspill's own translations apply (no retries ever; extra headers
sent as given): a deployment with any other litellm setting stays on litellm's path."""


def deployment_key(entry: ModelEntry, variables: Sequence[str]) -> str | None:
    """The deployment's key, else the first of `variables` set (as litellm reads them);
    None when there is none, or only blanks."""
    params = entry.litellm_params
    key = params.api_key.get_secret_value() if params.api_key is not None else None
    key = key or next((os.environ[name] for name in variables if os.environ.get(name)), "")
    return key.strip() or None


def translates(entry: ModelEntry, provider: str, key: Callable[[ModelEntry], str | None]) -> bool:
    """Whether an own translation serves a deployment: its provider, no litellm setting
    beyond `SETTINGS`, and a key it sends (`key` of the deployment)."""
    return (
        entry.litellm_params.provider == provider
        and set(entry.litellm_params.extras()) <= SETTINGS
        and key(entry) is not None
    )


def extra_headers(entry: ModelEntry) -> dict[str, str]:
    """The deployment's `extra_headers`, names lowercased."""
    extra = entry.litellm_params.extras().get("extra_headers")
    return {str(k).lower(): str(v) for k, v in extra.items()} if isinstance(extra, dict) else {}


def dumps(body: object) -> bytes:
    """A body's bytes; a body nested too deep to write again is the client's 400."""
    try:
        return orjson.dumps(body)
    except orjson.JSONEncodeError as exc:  # parsed (up to 1024 levels), cannot be written
        raise too_deep("the request body") from exc


@dataclass(frozen=True, slots=True)
class Written:
    """One request in a wire's API: what is sent, and what reading its answer needs."""

    body: bytes
    headers: Mapping[str, str]
    state: Any = None
    """What the wire keeps from writing the request for reading its answer (litellm's)."""
    native: str | None = None
    """The API the answer comes back in, for a request sent as its client wrote it in that
    API (the answer's bytes go back as they are); None: read as a chat completion."""


class StreamReader(Protocol):
    """A wire's reading of one stream: each event's delta, what it learnt on the way."""

    id: str | None
    model: str | None
    finished: bool
    """The stream said it is complete (False where the relay's end event says it)."""

    def delta(self, event: Mapping[str, Any]) -> tuple[dict[str, Any] | None, str | None]:
        """(the delta to send or None, the finish reason or None) for one event."""

    def openai_usage(self) -> dict[str, Any] | None:
        """The stream's usage in OpenAI's terms, once known."""


class Wire(Protocol):
    """A provider's API in OpenAI's chat terms, for one deployment."""

    model: str
    """The model's name upstream (in the answers' `model` until they say theirs)."""
    expected: str
    """What a JSON answer should be (said in a 502 when it is not)."""
    end_kind: str
    """The `type` of the event a complete stream ends with ("": the reader says)."""

    def urls(self) -> tuple[str, str]:
        """(the URL of a call, of a streamed call)."""

    def leaves(self, request: ChatRequest) -> str | None:
        """Why the request is litellm's to write (what it uses that this wire does not
        write), or None: `write` writes it, or refuses it with a 400."""

    def native(self, request: ChatRequest) -> Written | None:
        """The request as its client wrote it, when the client spoke this API and it can
        go so (None: write it)."""

    def write(self, request: ChatRequest) -> Written:
        """The request in this API (one `leaves` keeps here); a client's error is raised
        as one of the error tree (a 400)."""

    def answer(self, content: bytes, written: Written, reply: Reply) -> bytes:
        """The `chat.completion` bytes of a JSON answer (ValueError: not the API's answer)."""

    def reader(self, written: Written) -> StreamReader:
        """A fresh reader for one stream's events."""


class WireProvider:
    """One deployment's chat requests written by a wire, sent and relayed by overspill."""

    def __init__(
        self,
        entry: ModelEntry,
        client: Upstream,
        wire: Wire,
        *,
        request_timeout: float = DEFAULT_TIMEOUT,
        max_response_bytes: int = DEFAULT_MAX_RESPONSE_BYTES,
    ) -> None:
        self.entry = entry
        self.name = entry.litellm_params.provider
        self.wire = wire
        url, stream_url = wire.urls()
        self.exchange = Exchange.of(entry, url, client, request_timeout, max_response_bytes)
        self.streams = self.exchange
        if stream_url != url:
            self.streams = Exchange.of(
                entry, stream_url, client, request_timeout, max_response_bytes
            )

    async def aclose(self) -> None:
        """The shared client is closed by its owner (the app)."""

    async def complete(self, request: ChatRequest, ctx: RequestContext) -> ChatResponse:
        """Write the request in the wire's API and send it."""
        return await self.deliver(self.wire.write(request), request)

    async def deliver(self, written: Written, request: ChatRequest) -> ChatResponse:
        """Send a written request; the answer read back (JSON) or primed (stream)."""
        headers = written.headers
        if tracing.tracer is not None:  # the upstream-call span's traceparent goes along
            headers = {**headers, **tracing.tracer.headers()}
        if written.native is not None:
            return await forward_native(
                self.exchange, written.body, headers, request.stream, written.native
            )
        if request.stream:
            answer = functools.partial(self._stream, written, include_usage(request))
            return await self.streams.call(written.body, headers, True, answer)
        return await self.exchange.call(
            written.body, headers, False, functools.partial(self._json, written)
        )

    async def _json(self, written: Written, response: Reply) -> ChatResponse:
        expected = self.wire.expected
        content = await self.exchange.json_answer(response, f"expected {expected}")
        try:
            return ChatResponse(body=self.wire.answer(content, written, response))
        except ValueError as exc:  # not JSON, or JSON that is not the wire's answer
            raise self.exchange.bad(response, content, f"not {expected} ({exc})") from exc

    async def _stream(self, written: Written, usage: bool, response: Reply) -> ChatResponse:
        """Primed: an error before the first whole event, or as that event, is the call's."""
        first, chunks, cutter = await self.streams.first_events(response)
        relay = WireRelay(self.streams, self.wire, self.wire.reader(written), usage, response)
        head = relay.feed(first)  # an error event raises here
        return ChatResponse(stream=self.streams.relay(head, chunks, response, cutter, relay))


class WireRelay(SseRelay):
    """A wire's stream events as OpenAI chunks (its `StreamReader` decides)."""

    def __init__(
        self,
        exchange: Exchange,
        wire: Wire,
        reader: StreamReader,
        include_usage: bool,
        response: Reply,
    ) -> None:
        super().__init__(
            exchange,
            end_kind=wire.end_kind or "the finish reason",
            include_usage=include_usage,
            status=response.status,
            id="",
            model=wire.model,
        )
        self.reader = reader

    def event(self, parsed: dict[str, Any]) -> bytes | None:
        delta, finish = self.reader.delta(parsed)
        self.finished = self.finished or self.reader.finished
        if delta is None:
            return None
        if self.reader.id and not self.id:
            self.id = self.reader.id
            self.model = self.reader.model or self.model
        return self.chunk(delta, finish)

    def last_usage(self) -> dict[str, Any] | None:
        return self.reader.openai_usage()
