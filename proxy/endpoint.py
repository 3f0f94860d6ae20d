"""The endpoint every API route runs: auth, limits, parse, the core, respond, log one line.

What differs per API (parsing its wire, rendering the answer and errors in its shape) is the
route's surface (proxy/surfaces/); everything else a request goes through is here, once, so a
key, a tenant, a model allow-list, a size limit, a disconnect, a metric and a log line mean the
same on every route.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncGenerator, AsyncIterable, AsyncIterator, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from kernel import metrics, tracing
from kernel.config import ModelEntry
from kernel.errors import (
    InvalidChatRequest,
    ModelNotFound,
    ModelUnavailable,
    OverspillError,
    PayloadTooLarge,
    RouteNotServed,
    StoreUnavailable,
    UnsupportedEncoding,
    UpstreamError,
)
from kernel.jobs import Jobs
from kernel.records import StoreError
from kernel.types import ChatResponse, RequestContext
from providers.model_info import apis_served, route_refusal
from proxy.keys import Keyring
from proxy.origins import Origins
from proxy.responses import JSON_TYPE, context_headers, request_id
from proxy.surfaces.surface import Surface, Turn
from proxy.system import System

log = logging.getLogger("overspill.request")


@dataclass(frozen=True)
class AppState:
    """Everything the routes need, built once at startup."""

    system: System
    keys: Keyring
    """The config's master and client keys: who a request's key is (proxy/keys.py)."""
    origins: Origins = field(default_factory=Origins)
    """The web pages whose requests are served (proxy/origins.py)."""


async def traced_serve(
    state: AppState, request: Request, surface: Surface, tracer: tracing.Tracer
) -> Response:
    """`serve` inside the request's server span (ended with the answer)."""
    path = request.scope["path"]
    attributes: dict[str, tracing.Attribute] = {"http.request.method": "POST", "url.path": path}
    with tracer.request_span(f"POST {path}", attributes, request.headers) as span:
        try:
            return await serve(state, request, surface, span)
        except BaseException:
            span.end()  # a cancellation that was not the client's: no answer will end it
            raise


async def serve(
    state: AppState, request: Request, surface: Surface, span: tracing.Span | None = None
) -> Response:
    """One request to an API route: auth, limit, parse (the surface), the core, respond in the
    surface's wire; logs one line."""
    started = time.perf_counter()
    ctx = RequestContext(request_id=request_id(request), tenant="anonymous", span=span)
    turn: Turn | None = None
    watch: DisconnectWatch | None = None
    system = state.system
    try:
        state.origins.check(request.headers.get("origin"))
        caller = state.keys.caller_of(request.headers)
        ctx.tenant = caller.tenant
        raw = await _read_body(request, system.settings.general_settings.max_body_bytes)
        turn, ctx = await surface.open(raw, request.headers, ctx, system)
        caller.check_model(turn.model)
        ctx.model = _resolve(system, turn.model)
        ctx.shadow = (
            caller.shadow or ctx.model.context.shadow
        )  # shadow mode: docs/operations/budgets.md
        _check_route(system, ctx.model, surface.name, turn.model, caller.allows)
        watch = DisconnectWatch(request)
        try:
            response = await turn.answer(await turn.run(system, ctx), ctx)
        except BaseException:
            watch.stop()
            raise
        if response.stream is None:
            watch.stop()
    except asyncio.CancelledError:
        if watch is None or not watch.absorb():
            raise
        _log_request(ctx, surface, turn, 499, started)
        return Response(status_code=499)
    except ClientDisconnect:
        _log_request(ctx, surface, turn, 499, started)
        return Response(status_code=499)
    except OverspillError as exc:
        _log_request(ctx, surface, turn, exc.http_status(), started, error=exc)
        return surface.error(exc, ctx)
    except StoreError as exc:  # the layers go on without the store; one that cannot: 503
        log.error(
            "history store unavailable", extra={"request_id": ctx.request_id, "error": str(exc)}
        )
        down = StoreUnavailable(
            f"the history store is unavailable; try again shortly (request id {ctx.request_id})"
        )
        _log_request(ctx, surface, turn, down.http_status(), started, error=down)
        return surface.error(down, ctx)
    except Exception:
        log.exception("unhandled error", extra={"request_id": ctx.request_id})
        error = OverspillError(f"internal error in overspill (request id {ctx.request_id})")
        _log_request(ctx, surface, turn, 500, started, error=error)
        return surface.error(error, ctx)
    return _respond(response, ctx, surface, turn, started, watch, system.jobs)


def _respond(
    response: ChatResponse,
    ctx: RequestContext,
    surface: Surface,
    turn: Turn,
    started: float,
    watch: DisconnectWatch,
    jobs: Jobs,
) -> Response:
    """The answer on the wire: JSON at once, or the primed stream relayed; the layers'
    follow-ups start once the body is produced (a stream's: after its last byte)."""
    headers = {**response.headers, **context_headers(ctx)}
    if response.stream is None:
        _log_request(ctx, surface, turn, response.status, started)
        if ctx.after:
            jobs.start_after(ctx)
        return Response(response.body, response.status, headers, media_type=JSON_TYPE)
    headers.update({"cache-control": "no-cache", "x-accel-buffering": "no"})
    overhead = time.perf_counter() - started - ctx.upstream_seconds
    metrics.request_head(_model_label(ctx), True, overhead)
    relay = SseRelay(response.stream, ctx, surface, turn, started, jobs)
    return EventStream(relay, watch, response.status, headers)


def _resolve(system: System, name: str) -> ModelEntry:
    """The configured deployment for a requested model name."""
    entry = system.entries.get(name) or system.expand(name)
    if entry is None:
        names = ", ".join(system.settings.model_names())
        raise ModelNotFound(
            f"model {name!r} is not configured in overspill; available models: {names}",
            param="model",
        )
    reason = system.unavailable.get(name)
    if reason is not None:
        raise ModelUnavailable(f"model {name!r} cannot be used: {reason}", param="model")
    return entry


def _check_route(
    system: System, entry: ModelEntry, api: str, name: str, allows: Callable[[str], bool]
) -> None:
    """Refuse a route the model cannot serve (an embedding model asked to chat), naming the
    routes it serves and the models the caller may use that serve this one."""
    refused = route_refusal(entry, api, name)
    if refused is None:
        return
    others = sorted(
        other
        for other, found in system.entries.items()
        if other not in system.unavailable
        and allows(other)
        and ((apis := apis_served(found)) is None or api in apis)
    )
    if others:
        refused += f". Models that serve it: {', '.join(others[:20])}"
    raise RouteNotServed(refused)


async def _read_body(request: Request, limit: int) -> bytes:
    encoding = request.headers.get("content-encoding", "").strip().lower()
    if encoding not in ("", "identity"):
        # read as JSON, gzip's bytes were "not valid UTF-8: surrogates not allowed"
        raise UnsupportedEncoding(
            f"request body is sent with Content-Encoding: {encoding[:40]}; overspill reads "
            "request bodies uncompressed: send the JSON as it is"
        )
    declared = request.headers.get("content-length")
    # isdigit() alone also accepts "²" (Latin-1 superscript two): only ASCII digits are a length
    if declared is not None and declared.isascii() and declared.isdigit() and int(declared) > limit:
        raise _too_large(int(declared), limit)
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise _too_large(size, limit)
        chunks.append(chunk)
    if not size:
        raise InvalidChatRequest("request body is empty: send a JSON request body")
    return b"".join(chunks)


def _too_large(size: int, limit: int) -> PayloadTooLarge:
    return PayloadTooLarge(
        f"request body is {size} bytes or more; the limit is {limit} bytes "
        "(general_settings.max_body_bytes)"
    )


class DisconnectWatch:
    """One task per request that cancels the request's task if the client disconnects.

    It spans the pipeline and, for streams, the relay: a client that goes away cancels the
    upstream call whichever phase it is in. (Starlette's StreamingResponse would start an
    anyio task group per response for the same purpose; one asyncio task is cheaper.)
    """

    def __init__(self, request: Request) -> None:
        task = asyncio.current_task()
        assert task is not None
        self.task = task
        self.gone = False
        self.watcher = asyncio.get_running_loop().create_task(self._watch(request))

    async def _watch(self, request: Request) -> None:
        await _disconnected(request)
        self.gone = True
        self.task.cancel()

    def stop(self) -> None:
        """The request is over: stop watching."""
        self.watcher.cancel()

    def absorb(self) -> bool:
        """After a CancelledError: True (and the cancellation undone) when the client left."""
        if self.gone:
            self.task.uncancel()
        return self.gone


class EventStream(Response):
    """An SSE response sent chunk by chunk; the request's DisconnectWatch ends it early.

    Kept over Starlette's StreamingResponse because it is measurably cheaper: overspill's own
    CPU per streamed request was 1.4-2.4x higher with StreamingResponse (its anyio task group
    per response), 60-90 against 145 µs for the small SSE body and 240 against 350 µs for the
    large one (`bench/micro/test_streaming.py`, 2 cores, 2026-11-23).
    """

    media_type = "text/event-stream"

    def __init__(
        self,
        chunks: AsyncIterable[bytes],
        watch: DisconnectWatch,
        status_code: int,
        headers: Mapping[str, str],
    ) -> None:
        self.status_code = status_code
        self.background = None
        self.init_headers(headers)  # no body: no content-length, the stream ends the response
        self.chunks = chunks
        self.watch = watch

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Send the head, then each chunk as it comes; a vanished client stops the relay."""
        try:
            await send(
                {
                    "type": "http.response.start",
                    "status": self.status_code,
                    "headers": self.raw_headers,
                }
            )
            async for chunk in self.chunks:
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        except asyncio.CancelledError:
            if not self.watch.absorb():
                raise
        finally:
            self.watch.stop()
            await _close(self.chunks)


async def _disconnected(request: Request) -> None:
    while True:
        message = await request.receive()
        if message["type"] == "http.disconnect":
            return


class SseRelay:
    """The stream to the client; a failure after the first byte ends it with an error event,
    which always starts on an event boundary.

    Its end is logged and counted once, however it ends: finished, failed, or closed by
    `EventStream` before it ever started (the client left before the head was sent), which
    then also closes the upstream's stream instead of leaving it to the garbage collector.
    """

    __slots__ = ("_relay", "ctx", "jobs", "started", "stream", "surface", "turn")

    def __init__(
        self,
        stream: AsyncIterator[bytes],
        ctx: RequestContext,
        surface: Surface,
        turn: Turn,
        started: float,
        jobs: Jobs | None = None,
    ) -> None:
        self.stream = stream
        self.ctx = ctx
        self.surface = surface
        self.turn = turn
        self.started = started
        self.jobs = jobs
        self._relay: AsyncGenerator[bytes, None] | None = None

    def __aiter__(self) -> AsyncGenerator[bytes, None]:
        self._relay = self._run()
        return self._relay

    async def aclose(self) -> None:
        """Close the relay; one that never started closes the upstream and logs a 499."""
        if self._relay is not None:
            await self._relay.aclose()
            return
        await _close(self.stream)
        _log_request(self.ctx, self.surface, self.turn, 499, self.started, streamed=True)

    async def _run(self) -> AsyncGenerator[bytes, None]:
        ctx = self.ctx
        status = 200
        error: OverspillError | None = None
        last = b"\n\n"  # the last bytes sent: an error event must start on an event boundary
        try:
            async for chunk in self.stream:
                yield chunk
                last = chunk
        except OverspillError as exc:
            status, error = exc.http_status(), exc
            if isinstance(exc, UpstreamError) and exc.provider:
                metrics.upstream_failed(exc.provider, _model_label(ctx), exc)
            yield _on_boundary(last, self.turn.stream_error(exc))
        except Exception:
            log.exception("unhandled error in stream", extra={"request_id": ctx.request_id})
            status = 500
            error = OverspillError(f"internal error in overspill (request id {ctx.request_id})")
            yield _on_boundary(last, self.turn.stream_error(error))
        finally:
            await _close(self.stream)
            _log_request(
                ctx, self.surface, self.turn, status, self.started, error=error, streamed=True
            )
            if ctx.after and self.jobs is not None and error is None:
                self.jobs.start_after(ctx)


def _on_boundary(last: bytes, event: bytes) -> bytes:
    """`event`, after a blank line when the bytes sent last did not end one (the providers
    pass whole events only; this keeps any other stream's error event parseable)."""
    if not last or last.endswith((b"\n\n", b"\r\n\r\n")):
        return event
    return (b"\n" if last.endswith(b"\n") else b"\n\n") + event


async def _close(stream: AsyncIterable[bytes]) -> None:
    close = getattr(stream, "aclose", None)
    if close is not None:
        await close()


def _model_label(ctx: RequestContext) -> str:
    """The `model` label: the configured model name, once resolved."""
    return ctx.model.model_name if ctx.model is not None else metrics.NO_MODEL


def _log_request(
    ctx: RequestContext,
    surface: Surface,
    turn: Turn | None,
    status: int,
    started: float,
    error: OverspillError | None = None,
    streamed: bool = False,
) -> None:
    """The request's end: its metrics, its span ended, and its one log line."""
    seconds = time.perf_counter() - started
    model = _model_label(ctx)
    stream = turn.stream if turn else False
    metrics.request_done(model, stream, status, seconds)
    if not streamed:  # the head left just now (a stream's was measured by _respond)
        metrics.request_head(model, stream, seconds - ctx.upstream_seconds)
    if ctx.span is not None:
        _end_span(ctx.span, ctx, turn, status, error)
    fields: dict[str, Any] = {
        "request_id": ctx.request_id,
        "api": surface.name,
        "tenant": ctx.tenant,
        "model": turn.model if turn else None,
        "stream": turn.stream if turn else None,
        "status": status,
        "ms": round(seconds * 1000, 1),
    }
    if ctx.notes:
        fields["notes"] = ctx.notes
    if error is not None:
        fields["error"] = error.error_code()
        fields["error_message"] = error.message[:500]
    log.info("request", extra=fields)


def _end_span(
    span: tracing.Span,
    ctx: RequestContext,
    turn: Turn | None,
    status: int,
    error: OverspillError | None,
) -> None:
    """The request span's attributes (model, stream, conversation, status, notes), then end."""
    span.set_attribute("http.response.status_code", status)
    span.set_attribute("overspill.request_id", ctx.request_id)
    if turn is not None:
        span.set_attribute("overspill.model", turn.model)
        span.set_attribute("overspill.stream", turn.stream)
    if ctx.conversation_hint is not None or ctx.opening:
        span.set_attribute("overspill.conversation_id", ctx.conversation_id)
    for key, value in ctx.notes.items():
        span.set_attribute(f"overspill.{key}", value)
    if error is not None:
        span.set_attribute("error.type", error.error_code() or type(error).__name__)
        if status >= 500 and tracing.tracer is not None:
            tracing.tracer.failed(span, error.message[:500])
    span.end()
