"""litellm for translation only: overspill's own transport, pooling and stream relay.

`litellm.acompletion` costs milliseconds of CPU per request beyond the provider's wire format:
its logging object, a cost calculation per answer, model-map lookups, and a stream wrapper
that builds several pydantic objects per event. For a provider whose translation litellm
keeps in a config object (`ProviderConfigManager.get_provider_chat_config`), this provider
uses only that: the OpenAI parameters mapped (`get_optional_params`, which also applies
`drop_params`), the headers (`validate_environment`), the body (`transform_request`), the
answer (`transform_response`), and each stream event (the provider's chunk parser). The HTTP
call is the app's shared client (one pool with the byte passthrough), the stream is relayed
event by event with the same guard as the passthrough (whole events, a cut stream is an error
event, not a silent end), and failures go through `providers.failures` once.

Providers with no entry in `WIRES` (or a deployment with litellm settings this path does not
apply) keep `LitellmProvider`: `build_provider` chooses.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from time import monotonic
from typing import Any

import httpx
import orjson
from litellm.llms.anthropic.chat.handler import ModelResponseIterator as AnthropicEvents
from litellm.llms.anthropic.chat.transformation import ANTHROPIC_TOOL_NAME_REVERSE_MAP_KEY
from litellm.types.utils import LlmProviders, ModelResponse
from litellm.utils import ProviderConfigManager, get_optional_params

from kernel import tracing
from kernel.config import DEFAULT_MAX_RESPONSE_BYTES, DEFAULT_TIMEOUT, ModelEntry
from kernel.errors import (
    ForbiddenParameter,
    OverspillError,
    UpstreamBadResponse,
    UpstreamError,
    UpstreamTimeout,
    too_deep,
)
from kernel.types import ChatRequest, ChatResponse, Provider, RequestContext
from providers.deadline import Deadline
from providers.failures import classify_failure, error_message, parse_body
from providers.guard import EventCutter, bad_response, json_object, sse_shaped, too_large
from providers.litellm import LITELLM_SETTINGS, LitellmProvider, _message


@dataclass(frozen=True)
class Wire:
    """What litellm's config for a provider leaves to its own handler: the URL, the events."""

    path: str
    """Appended to api_base unless it already ends with it."""
    default_base: str
    events: Callable[[bool, dict[str, Any]], Any]
    """(json_mode, litellm_params) → an object whose `chunk_parser(dict)` turns one event's
    JSON into a litellm stream chunk."""
    end: str
    """The `type` of the event a complete stream ends with."""
    text: Callable[[dict[str, Any]], str | None]
    """An event's text when the parser would make nothing else of it (most events of a
    stream): written without the parser's objects. None: the parser reads the event."""


def _anthropic_events(json_mode: bool, litellm_params: dict[str, Any]) -> Any:
    return AnthropicEvents(
        streaming_response=None,
        sync_stream=False,
        json_mode=json_mode,
        tool_name_reverse_map=litellm_params.get(ANTHROPIC_TOOL_NAME_REVERSE_MAP_KEY),
    )


def _anthropic_text(event: dict[str, Any]) -> str | None:
    """A `text_delta`'s text: litellm's parser returns it as the chunk's content and changes
    none of its own state for it (`ModelResponseIterator._content_block_delta_helper`)."""
    if event.get("type") != "content_block_delta":
        return None
    delta = event.get("delta")
    if not isinstance(delta, dict) or delta.get("type") != "text_delta":
        return None
    text = delta.get("text")
    return text if isinstance(text, str) else None


WIRES: dict[str, Wire] = {
    "anthropic": Wire(
        "/v1/messages",
        "https://api.anthropic.com",
        _anthropic_events,
        end="message_stop",
        text=_anthropic_text,
    ),
}
"""Providers served here; every other one goes through litellm.acompletion."""

_MEMO_KEY_BYTES = 2048
_MEMO_ENTRIES = 256
"""The parameter mappings one deployment remembers (small parameter sets only)."""

APPLIED_SETTINGS = frozenset({"extra_headers", "max_retries", "num_retries"})
"""Deployment settings this path applies (no retries ever; extra headers sent as given)."""


def build_provider(
    entry: ModelEntry,
    client: httpx.AsyncClient,
    *,
    drop_params: bool = False,
    request_timeout: float = DEFAULT_TIMEOUT,
    max_response_bytes: int = DEFAULT_MAX_RESPONSE_BYTES,
) -> Provider:
    """The translated provider when litellm's config covers the deployment, else litellm's."""
    params = entry.litellm_params
    if params.provider in WIRES and set(params.extras()) <= APPLIED_SETTINGS:
        return TranslatedProvider(
            entry,
            client,
            drop_params=drop_params,
            request_timeout=request_timeout,
            max_response_bytes=max_response_bytes,
        )
    return LitellmProvider(
        entry,
        drop_params=drop_params,
        request_timeout=request_timeout,
        max_response_bytes=max_response_bytes,
    )


class _NoLogging:
    """What litellm's transformations call on its logging object: nothing is logged here."""

    model_call_details: dict[str, Any] = {}  # noqa: RUF012  # litellm reads it, never writes

    def post_call(self, *args: Any, **kwargs: Any) -> None:
        """litellm's hook after a call: overspill logs its own requests."""


_NO_LOGGING = _NoLogging()


class TranslatedProvider:
    """One deployment: litellm translates, overspill sends, reads and relays."""

    def __init__(
        self,
        entry: ModelEntry,
        client: httpx.AsyncClient,
        *,
        drop_params: bool = False,
        request_timeout: float = DEFAULT_TIMEOUT,
        max_response_bytes: int = DEFAULT_MAX_RESPONSE_BYTES,
    ) -> None:
        params = entry.litellm_params
        self.name = params.provider
        self.wire = WIRES[self.name]
        self.client = client
        self.model = params.upstream_model
        config = ProviderConfigManager.get_provider_chat_config(
            model=self.model, provider=LlmProviders(self.name)
        )
        assert config is not None, f"litellm has no chat config for {self.name}"
        self.config = config
        base = (params.api_base or self.wire.default_base).rstrip("/")
        self.url = base if base.endswith(self.wire.path) else base + self.wire.path
        self.api_base = params.api_base
        self.api_key = params.api_key.get_secret_value() if params.api_key is not None else None
        self.timeout = params.timeout or request_timeout
        self.stream_timeout = params.stream_timeout or self.timeout
        self.http_timeouts = (params.timeout, params.stream_timeout or params.timeout)
        """httpx's own per-phase timeouts when the model sets them, else the client's default."""
        self.max_bytes = max_response_bytes
        self.drop_params = drop_params or None
        self.memo: dict[bytes, bytes] = {}
        """Parameters (JSON) → litellm's mapping of them (JSON); see `mapped`."""
        extra_headers = params.extras().get("extra_headers")
        self.extra_headers = (
            {str(k): str(v) for k, v in extra_headers.items()}
            if isinstance(extra_headers, dict)
            else {}
        )

    async def aclose(self) -> None:
        """The shared client is closed by its owner (the app)."""

    # -- translation (litellm) --------------------------------------------------------------

    def translate_request(self, request: ChatRequest) -> tuple[str, dict[str, str], bytes, Any]:
        """(url, headers, body, state for the answer's translation) for one request."""
        body = _fresh_body(request)
        messages = body.pop("messages")
        body.pop("model", None)
        body.pop("stream", None)
        for key in body:
            if key in LITELLM_SETTINGS:
                raise ForbiddenParameter(
                    f"{key!r} is a litellm setting and cannot be set by a request; "
                    "deployment settings come from overspill's config.yaml only",
                    param=key,
                )
        optional = self.mapped(body, request.stream)
        optional.pop("stream", None)
        json_mode = bool(optional.pop("json_mode", False))
        litellm_params: dict[str, Any] = {"api_base": self.api_base}
        headers = self.config.validate_environment(
            headers=dict(self.extra_headers),
            model=self.model,
            messages=messages,
            optional_params=optional,
            litellm_params=litellm_params,
            api_key=self.api_key,
            api_base=self.api_base,
        )
        data = self.config.transform_request(
            model=self.model,
            messages=messages,
            optional_params=optional,
            litellm_params=litellm_params,
            headers=headers,
        )
        if request.stream:
            data["stream"] = True
        headers["accept-encoding"] = "identity"
        if tracing.tracer is not None:  # the upstream-call span's traceparent goes along
            headers.update(tracing.tracer.headers())
        state = _Answer(messages, optional, litellm_params, data, json_mode)
        return self.url, headers, orjson.dumps(data), state

    def mapped(self, params: dict[str, Any], stream: bool) -> dict[str, Any]:
        """The request's parameters in the provider's terms (litellm's `get_optional_params`,
        `drop_params` applied). They depend on the parameters and the model only, not on the
        messages, and most requests of a deployment repeat the same few: each small set is
        mapped once (a bounded memo of the results' JSON, read back as new objects)."""
        key = orjson.dumps([params, stream], option=orjson.OPT_SORT_KEYS)
        known = self.memo.get(key)
        if known is not None:
            mapped: dict[str, Any] = orjson.loads(known)
            return mapped
        mapped = get_optional_params(
            model=self.model,
            custom_llm_provider=self.name,
            drop_params=self.drop_params,
            stream=stream,
            **params,
        )
        if len(key) <= _MEMO_KEY_BYTES and len(self.memo) < _MEMO_ENTRIES:
            with contextlib.suppress(orjson.JSONEncodeError):  # not JSON: mapped each time
                self.memo[key] = orjson.dumps(mapped)
        return mapped

    def translate_answer(self, response: httpx.Response, content: bytes, state: _Answer) -> bytes:
        """An upstream JSON answer as a chat.completion's bytes."""
        raw = httpx.Response(response.status_code, headers=response.headers, content=content)
        try:
            result = self.config.transform_response(
                model=self.model,
                raw_response=raw,
                model_response=ModelResponse(),
                logging_obj=_NO_LOGGING,  # type: ignore[arg-type]  # what it calls, and no more
                request_data=state.data,
                messages=state.messages,
                optional_params=state.optional,
                litellm_params=state.litellm_params,
                encoding=None,
                api_key=self.api_key,
                json_mode=state.json_mode,
            )
        except Exception as exc:  # litellm's parse of a body that is not the API's answer
            raise bad_response(
                self.name,
                response.status_code,
                response.headers.get("content-type"),
                len(content),
                content,
                f"litellm could not read it: {type(exc).__name__}",
            ) from exc
        return orjson.dumps(_plain(result))

    # -- the call (overspill) ---------------------------------------------------------------

    async def complete(self, request: ChatRequest, ctx: RequestContext) -> ChatResponse:
        """Translate, send, and read (JSON) or prime (stream) the answer within the deadline."""
        try:
            url, headers, body, state = self.translate_request(request)
        except Exception as exc:
            raise self._untranslatable(exc) from exc
        seconds = self.stream_timeout if request.stream else self.timeout
        response: httpx.Response | None = None
        try:
            with Deadline(seconds):
                response = await self._post(url, headers, body, request.stream)
                if request.stream:
                    return await self._prime(response, state, request)
                content = await self._read(response)
                if response.status_code >= 400 or _error_at_top(content):
                    raise self._failure(response.status_code, content, response.headers)
                if not json_object(content):
                    why = "an empty answer" if not content else "expected a JSON answer"
                    raise self._bad(response, content, why)
                return ChatResponse(body=self.translate_answer(response, content, state))
        except BaseException as exc:
            if response is not None:
                await response.aclose()
            if isinstance(exc, TimeoutError | httpx.TimeoutException):
                what = "stream's first event" if request.stream else "answer"
                raise self._timeout(seconds, what) from exc
            if isinstance(exc, httpx.HTTPError):
                raise self._transport_error(exc) from exc
            raise

    async def _post(
        self, url: str, headers: dict[str, str], body: bytes, stream: bool
    ) -> httpx.Response:
        """The one HTTP send: the response head, its body left to read."""
        explicit = self.http_timeouts[stream]
        upstream = self.client.build_request(
            "POST",
            url,
            content=body,
            headers=headers,
            timeout=explicit if explicit is not None else httpx.USE_CLIENT_DEFAULT,
        )
        return await self.client.send(upstream, stream=True)

    async def _read(self, response: httpx.Response) -> bytes:
        """The whole body, read no further than `max_bytes`."""
        declared = response.headers.get("content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.max_bytes:
            raise too_large(self.name, self.max_bytes, event=False)
        chunks: list[bytes] = []
        size = 0
        async for chunk in response.aiter_bytes():
            size += len(chunk)
            if size > self.max_bytes:
                raise too_large(self.name, self.max_bytes, event=False)
            chunks.append(chunk)
        await response.aclose()
        return chunks[0] if len(chunks) == 1 else b"".join(chunks)

    async def _prime(
        self, response: httpx.Response, state: _Answer, request: ChatRequest
    ) -> ChatResponse:
        """Read up to the first whole event: an error before it is the call's error."""
        if response.status_code >= 400:
            content = await self._read(response)
            raise self._failure(response.status_code, content, response.headers)
        if "text/html" in response.headers.get("content-type", ""):
            raise self._bad(response, await self._read(response), "an HTML page")
        cutter = EventCutter(self.max_bytes, self.name)
        chunks = response.aiter_raw()
        first = b""
        async for chunk in chunks:
            first = cutter.feed(chunk)
            if first:
                break
        if not first:
            rest = cutter.rest()
            if _error_at_top(rest):
                raise self._failure(response.status_code, rest, response.headers)
            why = "the stream ended before its first whole event"
            if not rest.strip():
                why = "the stream ended without sending any event"
            raise self._bad(response, rest, why)
        if not sse_shaped(first):
            if _error_at_top(first):
                raise self._failure(response.status_code, first, response.headers)
            raise self._bad(response, first, "expected server-sent events")
        relay = _Relay(self, state, _include_usage(request))
        head = relay.events(first, response.status_code)  # an error event raises here
        return ChatResponse(stream=self._relay(relay, head, chunks, response, cutter))

    async def _relay(
        self,
        relay: _Relay,
        head: bytes,
        chunks: AsyncIterator[bytes],
        response: httpx.Response,
        cutter: EventCutter,
    ) -> AsyncIterator[bytes]:
        """Whole events translated as they come, each gap bounded by stream_timeout."""
        gap = self.stream_timeout
        since = monotonic()
        try:
            if head:
                yield head
            async for chunk in chunks:
                events = cutter.feed(chunk)
                now = monotonic()
                if now - since > gap:  # bytes trickle in, but no event completes
                    raise self._timeout(gap, "next event")
                if events:
                    since = now
                    out = relay.events(events, response.status_code)
                    if out:
                        yield out
        except httpx.HTTPError as exc:
            if isinstance(exc, httpx.TimeoutException):
                raise self._timeout(gap, "next event") from exc
            raise self._transport_error(exc, mid_stream=True) from exc
        finally:
            await response.aclose()
        if cutter.rest().strip():
            raise UpstreamBadResponse(
                f"upstream {self.name} ended the stream in the middle of an event "
                f"({len(cutter.rest())} bytes of an unfinished event were dropped)",
                provider=self.name,
            )
        if not relay.finished:
            raise UpstreamBadResponse(
                f"upstream {self.name} ended the stream before its end event ({self.wire.end})",
                provider=self.name,
            )
        yield relay.usage() + b"data: [DONE]\n\n"

    # -- errors -----------------------------------------------------------------------------

    def _failure(
        self, status: int | None, content: bytes | object, headers: httpx.Headers | None
    ) -> OverspillError:
        body = parse_body(content) if isinstance(content, bytes) else content
        return classify_failure(
            status=status,
            message=error_message(body, f"HTTP {status}"),
            body=body,
            provider=self.name,
            retry_after=headers.get("retry-after") if headers is not None else None,
        )

    def _untranslatable(self, exc: Exception) -> OverspillError:
        """A request litellm refused to write in the provider's API (as litellm said why)."""
        if isinstance(exc, OverspillError):
            return exc
        status = getattr(exc, "status_code", None)
        said = _message(exc, None)
        if not isinstance(status, int) or not 400 <= status < 500:
            status = 400  # litellm's own ValueError/KeyError on the request's content
            said = f"the request cannot be written in {self.name}'s API: {said}"
        return classify_failure(status=status, message=said, provider=self.name)

    def _bad(self, response: httpx.Response, content: bytes, why: str) -> OverspillError:
        ctype = response.headers.get("content-type")
        return bad_response(self.name, response.status_code, ctype, len(content), content, why)

    def _timeout(self, seconds: float, what: str) -> UpstreamTimeout:
        return UpstreamTimeout(
            f"upstream {self.name} did not send its {what} within {seconds:g} s "
            "(litellm_params.timeout / stream_timeout, else general_settings.request_timeout)",
            provider=self.name,
        )

    def _transport_error(self, exc: httpx.HTTPError, *, mid_stream: bool = False) -> UpstreamError:
        what = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
        if mid_stream:
            return UpstreamError(
                f"upstream {self.name} broke the stream: the connection was closed or reset "
                f"({what})",
                provider=self.name,
            )
        return UpstreamError(
            f"cannot reach upstream {self.name} at {self.url}: {what}", provider=self.name
        )


@dataclass
class _Answer:
    """What translating the answer needs from translating the request."""

    messages: list[Any]
    optional: dict[str, Any]
    litellm_params: dict[str, Any]
    data: dict[str, Any]
    json_mode: bool


class _Relay:
    """One stream's events, translated by litellm's parser, written as OpenAI chunk events."""

    def __init__(self, provider: TranslatedProvider, state: _Answer, include_usage: bool) -> None:
        self.provider = provider
        self.parser = provider.wire.events(state.json_mode, state.litellm_params)
        self.end = provider.wire.end
        self.text = provider.wire.text
        self.json_mode = state.json_mode
        self.finished = False
        self.role_sent = False
        self.include_usage = include_usage
        self.last_usage: Any = None
        self.id = "chatcmpl-" + self.parser.response_id.removeprefix("chatcmpl-")
        self.created = int(time.time())
        self.model = provider.model

    def events(self, data: bytes, status: int) -> bytes:
        """The OpenAI events for whole upstream events (b"" when none carries anything)."""
        out: list[bytes] = []
        for event in data.replace(b"\r\n", b"\n").split(b"\n\n"):
            payload = _data(event)
            if payload is None:
                continue
            try:
                parsed = orjson.loads(payload)
            except orjson.JSONDecodeError as exc:
                raise UpstreamBadResponse(
                    f"upstream {self.provider.name} sent a stream event that is not JSON "
                    f"({len(payload)} bytes starting {payload[:40]!r})",
                    provider=self.provider.name,
                    upstream_status=status,
                ) from exc
            kind = parsed.get("type") if isinstance(parsed, dict) else None
            if kind == "ping":
                continue
            if kind == "error" or (isinstance(parsed, dict) and "error" in parsed and not kind):
                raise self.provider._failure(None, parsed, None)
            if kind == self.end:
                self.finished = True
                continue
            text = self.text(parsed) if not self.json_mode else None
            if text is not None:
                if text:
                    out.append(self.chunk({"content": text}, None))
                continue
            chunk = self.parser.chunk_parser(chunk=parsed)
            rendered = self.render(chunk)
            if rendered is not None:
                out.append(rendered)
        return b"".join(out)

    def render(self, chunk: Any) -> bytes | None:
        """One litellm stream chunk as an OpenAI `chat.completion.chunk` event, or None."""
        if chunk.usage is not None:
            self.last_usage = chunk.usage
        choice = chunk.choices[0] if chunk.choices else None
        if choice is None:
            return None
        delta: dict[str, Any] = {}
        source = choice.delta
        for key in ("content", "reasoning_content"):
            value = getattr(source, key, None)
            if value:
                delta[key] = value
        for key in ("tool_calls", "thinking_blocks", "provider_specific_fields"):
            value = getattr(source, key, None)
            if value:
                delta[key] = _plain(value)
        finish = choice.finish_reason or None
        if not delta and finish is None:
            return None
        return self.chunk(delta, finish)

    def chunk(self, delta: dict[str, Any], finish: str | None) -> bytes:
        """An OpenAI chunk event (the first one carries the role)."""
        if not self.role_sent:
            delta = {"role": "assistant", **delta}
            self.role_sent = True
        return _sse(
            {
                "id": self.id,
                "object": "chat.completion.chunk",
                "created": self.created,
                "model": self.model,
                "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
            }
        )

    def usage(self) -> bytes:
        """The usage event OpenAI sends last when the request asked for it (else nothing)."""
        if not self.include_usage or self.last_usage is None:
            return b""
        return _sse(
            {
                "id": self.id,
                "object": "chat.completion.chunk",
                "created": self.created,
                "model": self.model,
                "choices": [],
                "usage": _plain(self.last_usage),
            }
        )


def _plain(value: Any) -> Any:
    """litellm's pydantic objects (or lists of them) as plain JSON values."""
    if isinstance(value, list):
        return [_plain(item) for item in value]
    dump = getattr(value, "model_dump", None)
    return dump(exclude_none=True) if dump is not None else value


def _sse(payload: dict[str, Any]) -> bytes:
    return b"data: " + orjson.dumps(payload) + b"\n\n"


def _data(event: bytes) -> bytes | None:
    """The `data:` payload of one SSE event (its data lines joined), or None."""
    lines = [line for line in event.split(b"\n") if line.startswith(b"data:")]
    if not lines:
        return None
    return b"\n".join(line[5:].strip() for line in lines)


def _fresh_body(request: ChatRequest) -> dict[str, Any]:
    """The request's body as new objects litellm may change in place (it does: Anthropic's
    system messages are moved out of the list): one parse of the client's bytes when they
    still apply, else one write and parse."""
    try:
        raw = request.raw if request.raw is not None else orjson.dumps(request.upstream_body(""))
    except orjson.JSONEncodeError as exc:  # parsed (up to 1024 levels), cannot be written
        raise too_deep("the request body") from exc
    body = orjson.loads(raw)
    assert isinstance(body, dict)
    return body


def _include_usage(request: ChatRequest) -> bool:
    options = request.body.get("stream_options")
    return isinstance(options, dict) and options.get("include_usage") is True


def _error_at_top(content: bytes) -> bool:
    """Whether a body is an error object (`{"error": ...}` or Anthropic's `{"type":"error"`)."""
    head = content[:40].lstrip()
    return head.startswith((b'{"error"', b'{ "error"', b'{"type":"error"', b'{"type": "error"'))
