"""The Starlette app: routes, one error handler, and the wiring of layers and providers."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import httpx
import orjson
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

from middleware.documents import Documents
from middleware.history_splice import HistorySplice
from middleware.ollama_window import OllamaWindow
from middleware.overflow_recovery import OverflowRecovery
from providers.model_info import context_window
from providers.ollama import OllamaWindows, native
from providers.openai_compat import OpenAICompatProvider
from providers.router import Router
from proxy.admin import admin_routes, require_master
from proxy.config import ModelEntry, Settings
from proxy.errors import (
    InvalidChatRequest,
    MethodNotAllowed,
    ModelNotFound,
    ModelUnavailable,
    NotFound,
    OverspillError,
    PayloadTooLarge,
)
from proxy.http import authenticate, parse_chat_request, sse_error_event
from proxy.pipeline import LayerFactory, Services, build_layers, compose
from proxy.store import HistoryStore, StoreError, open_store
from proxy.types import ChatRequest, ChatResponse, Next, Provider, RequestContext

log = logging.getLogger("overspill.request")

LAYER_REGISTRY: dict[str, LayerFactory] = {
    Documents.name: Documents,
    HistorySplice.name: HistorySplice,
    OverflowRecovery.name: OverflowRecovery,
    OllamaWindow.name: lambda services: OllamaWindow(services, OllamaWindows()),
}
"""Layer name (as written in config.yaml `middleware:`) → factory."""

_REQUEST_ID = re.compile(r"[A-Za-z0-9._:-]{1,64}")
_JSON = "application/json"


class ClientDisconnected(Exception):
    """The client went away before the answer was ready; the upstream call was cancelled."""


@dataclass
class AppState:
    """Everything the routes need, built once at startup."""

    settings: Settings
    pipeline: Next
    router: Router
    master_key: str | None
    models_body: bytes
    unavailable: Mapping[str, str]
    entries: Mapping[str, ModelEntry]
    store: HistoryStore


def build_providers(
    settings: Settings, client: httpx.AsyncClient
) -> tuple[dict[str, list[Provider]], dict[str, str]]:
    """A provider per usable deployment, and why each unusable model cannot be used."""
    groups: dict[str, list[Provider]] = {}
    missing: dict[str, list[str]] = {}
    for entry in settings.model_list:
        if entry.missing_env:
            missing.setdefault(entry.model_name, []).extend(entry.missing_env)
            continue
        groups.setdefault(entry.model_name, []).append(_provider(entry, settings, client))
    unavailable = {
        name: "environment variable(s) unset: " + ", ".join(sorted(set(vars_)))
        for name, vars_ in missing.items()
        if name not in groups
    }
    return groups, unavailable


def _provider(entry: ModelEntry, settings: Settings, client: httpx.AsyncClient) -> Provider:
    if entry.uses_passthrough():
        return OpenAICompatProvider(entry, client)
    from providers.litellm import LitellmProvider

    return LitellmProvider(entry, drop_params=settings.drop_params)


def _native_ollama(settings: Settings) -> Settings:
    """`ollama/NAME` deployments go through Ollama's native route (`ollama_chat/`), warned once."""
    entries = [native(entry) for entry in settings.model_list]
    changed = [i for i, e in enumerate(entries) if e is not settings.model_list[i]]
    for index in changed:
        log.warning(
            "model_list[%d] (%s): ollama/ routes lose num_ctx; using ollama_chat/ instead",
            index,
            entries[index].model_name,
        )
    return settings.model_copy(update={"model_list": tuple(entries)}) if changed else settings


def _windows(settings: Settings) -> dict[str, int]:
    """Each model name's context window: the smallest of its deployments' known windows."""
    windows: dict[str, int] = {}
    for entry in settings.model_list:
        window = context_window(entry)
        if window is not None:
            windows[entry.model_name] = min(window, windows.get(entry.model_name, window))
    return windows


def _models_body(settings: Settings) -> bytes:
    created = int(time.time())
    windows = _windows(settings)
    data = [
        {
            "id": name,
            "object": "model",
            "created": created,
            "owned_by": "overspill",
            "context_window": windows.get(name),
        }
        for name in settings.model_names()
    ]
    return orjson.dumps({"object": "list", "data": data})


def create_app(
    settings: Settings,
    *,
    registry: Mapping[str, LayerFactory] | None = None,
    providers: Mapping[str, Sequence[Provider]] | None = None,
    client: httpx.AsyncClient | None = None,
    store: HistoryStore | None = None,
) -> Starlette:
    """The ASGI app for validated settings (tests may inject providers or an httpx client)."""
    settings = _native_ollama(settings)
    general = settings.general_settings
    http = client or httpx.AsyncClient(
        timeout=httpx.Timeout(general.request_timeout, connect=general.connect_timeout),
        limits=httpx.Limits(max_connections=1000, max_keepalive_connections=200),
    )
    if providers is None:
        groups, unavailable = build_providers(settings, http)
    else:
        groups, unavailable = {k: list(v) for k, v in providers.items()}, {}
    router = Router(groups)
    history = store or open_store(general.store)
    windows = _windows(settings)
    services = Services(settings, router.internal, windows.get, history)
    ollama = OllamaWindows()
    if registry is None:
        registry = {**LAYER_REGISTRY, OllamaWindow.name: lambda s: OllamaWindow(s, ollama)}
    layers = build_layers(services, registry)
    master = general.master_key.get_secret_value() if general.master_key else None
    state = AppState(
        settings=settings,
        pipeline=compose(layers, router.complete),
        router=router,
        master_key=master,
        models_body=_models_body(settings),
        unavailable=unavailable,
        entries={e.model_name: e for e in reversed(settings.model_list)},
        store=history,
    )

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        yield
        await router.aclose()
        await history.aclose()
        await ollama.aclose()
        if client is None:
            await http.aclose()

    async def chat(request: Request) -> Response:
        return await chat_completions(state, request)

    async def models(request: Request) -> Response:
        authenticate(request.headers.get("authorization"), state.master_key)
        return Response(state.models_body, media_type=_JSON)

    async def liveness(request: Request) -> Response:
        return Response(b'{"status":"alive"}', media_type=_JSON)

    async def readiness(request: Request) -> Response:
        try:
            await history.ping()
        except StoreError as exc:
            failing = {"status": "unavailable", "store": str(exc)}
            return Response(orjson.dumps(failing), 503, media_type=_JSON)
        body = {
            "status": "ready",
            "store": "ok",
            "models": len(settings.model_names()),
            "unavailable_models": dict(state.unavailable),
            "layers": list(settings.middleware),
        }
        return Response(orjson.dumps(body), media_type=_JSON)

    async def refresh_ollama(request: Request) -> Response:
        require_master(request, master)
        return Response(orjson.dumps({"dropped": ollama.refresh()}), media_type=_JSON)

    routes = [
        Route("/v1/chat/completions", chat, methods=["POST"]),
        Route("/chat/completions", chat, methods=["POST"]),
        Route("/v1/models", models, methods=["GET"]),
        Route("/models", models, methods=["GET"]),
        Route("/health/liveness", liveness, methods=["GET"]),
        Route("/health/readiness", readiness, methods=["GET"]),
        *admin_routes(history, master),
        Route("/overspill/ollama/refresh", refresh_ollama, methods=["POST"]),
    ]
    handlers: dict[Any, Callable[[Request, Exception], Awaitable[Response]]] = {
        OverspillError: _overspill_error,
        HTTPException: _http_error,
    }
    app = Starlette(routes=routes, exception_handlers=handlers, lifespan=lifespan)
    app.state.overspill = state
    return app


async def chat_completions(state: AppState, request: Request) -> Response:
    """POST /v1/chat/completions: auth, limit, parse, pipeline, respond; logs one line."""
    started = time.perf_counter()
    ctx = RequestContext(request_id=_request_id(request), tenant="anonymous")
    chat: ChatRequest | None = None
    try:
        ctx.tenant = authenticate(request.headers.get("authorization"), state.master_key)
        raw = await _read_body(request, state.settings.general_settings.max_body_bytes)
        chat = parse_chat_request(raw)
        ctx.model = _resolve_model(state, chat.model)
        if "documents" in chat.extensions and "documents" not in state.settings.middleware:
            raise InvalidChatRequest(
                "'documents' needs the documents layer: add it to middleware: in config.yaml",
                param="documents",
            )
        ctx.headers = request.headers
        response = await _until_disconnect(state.pipeline(chat, ctx), request)
    except ClientDisconnected:
        _log_request(ctx, chat, 499, started)
        return Response(status_code=499)
    except OverspillError as exc:
        _log_request(ctx, chat, exc.http_status(), started, error=exc)
        return _error_response(exc, ctx)
    except Exception:
        log.exception("unhandled error", extra={"request_id": ctx.request_id})
        error = OverspillError(f"internal error in overspill (request id {ctx.request_id})")
        _log_request(ctx, chat, 500, started, error=error)
        return _error_response(error, ctx)
    headers = {**response.headers, **_context_headers(ctx)}
    if response.stream is None:
        _log_request(ctx, chat, response.status, started)
        return Response(response.body, response.status, headers, media_type=_JSON)
    headers.update({"cache-control": "no-cache", "x-accel-buffering": "no"})
    return StreamingResponse(
        _relay_sse(response.stream, ctx, chat, started),
        response.status,
        headers,
        media_type="text/event-stream",
    )


def _resolve_model(state: AppState, name: str) -> ModelEntry:
    entry = state.entries.get(name)
    if entry is None:
        names = ", ".join(state.settings.model_names())
        raise ModelNotFound(
            f"model {name!r} is not configured in overspill; available models: {names}",
            param="model",
        )
    reason = state.unavailable.get(name)
    if reason is not None:
        raise ModelUnavailable(f"model {name!r} cannot be used: {reason}", param="model")
    return entry


async def _read_body(request: Request, limit: int) -> bytes:
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise _too_large(int(declared), limit)
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise _too_large(size, limit)
        chunks.append(chunk)
    if not size:
        raise InvalidChatRequest("request body is empty: send a JSON chat completion request")
    return b"".join(chunks)


def _too_large(size: int, limit: int) -> PayloadTooLarge:
    return PayloadTooLarge(
        f"request body is {size} bytes or more; the limit is {limit} bytes "
        "(general_settings.max_body_bytes)"
    )


async def _until_disconnect(call: Awaitable[ChatResponse], request: Request) -> ChatResponse:
    """Await the pipeline in this task; a watcher cancels it if the client disconnects."""
    task = asyncio.current_task()
    assert task is not None
    gone = False

    async def watch() -> None:
        nonlocal gone
        await _disconnected(request)
        gone = True
        task.cancel()

    watcher = asyncio.get_running_loop().create_task(watch())
    try:
        return await call
    except asyncio.CancelledError:
        if gone:
            task.uncancel()
            raise ClientDisconnected from None
        raise
    finally:
        watcher.cancel()


async def _disconnected(request: Request) -> None:
    while True:
        message = await request.receive()
        if message["type"] == "http.disconnect":
            return


async def _relay_sse(
    stream: AsyncIterator[bytes], ctx: RequestContext, chat: ChatRequest | None, started: float
) -> AsyncIterator[bytes]:
    """The stream to the client; a failure after the first byte ends it with an error event."""
    status = 200
    error: OverspillError | None = None
    try:
        async for chunk in stream:
            yield chunk
    except OverspillError as exc:
        status, error = exc.http_status(), exc
        yield sse_error_event(exc)
    except Exception:
        log.exception("unhandled error in stream", extra={"request_id": ctx.request_id})
        status = 500
        error = OverspillError(f"internal error in overspill (request id {ctx.request_id})")
        yield sse_error_event(error)
    finally:
        close = getattr(stream, "aclose", None)
        if close is not None:
            await close()
        _log_request(ctx, chat, status, started, error=error)


def _request_id(request: Request) -> str:
    given = request.headers.get("x-request-id")
    if given and _REQUEST_ID.fullmatch(given):
        return given
    return uuid.uuid4().hex


def _context_headers(ctx: RequestContext) -> dict[str, str]:
    headers = {"x-request-id": ctx.request_id}
    for key, value in ctx.notes.items():
        headers[f"x-overspill-{key}"] = value
    return headers


def _error_response(error: OverspillError, ctx: RequestContext) -> Response:
    headers = {**error.headers(), **_context_headers(ctx)}
    return Response(error.body_bytes(), error.http_status(), headers, media_type=_JSON)


def _log_request(
    ctx: RequestContext,
    chat: ChatRequest | None,
    status: int,
    started: float,
    error: OverspillError | None = None,
) -> None:
    fields: dict[str, Any] = {
        "request_id": ctx.request_id,
        "tenant": ctx.tenant,
        "model": chat.model if chat else None,
        "stream": chat.stream if chat else None,
        "status": status,
        "ms": round((time.perf_counter() - started) * 1000, 1),
    }
    if ctx.notes:
        fields["notes"] = ctx.notes
    if error is not None:
        fields["error"] = error.error_code()
        fields["error_message"] = error.message[:500]
    log.info("request", extra=fields)


async def _overspill_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, OverspillError)
    ctx = RequestContext(request_id=_request_id(request), tenant="anonymous")
    return _error_response(exc, ctx)


async def _http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    error: OverspillError
    if exc.status_code == 405:
        error = MethodNotAllowed(f"{request.method} is not allowed on {request.url.path}")
    elif exc.status_code == 404:
        error = NotFound(f"no route {request.method} {request.url.path}")
    else:
        error = InvalidChatRequest(f"{request.method} {request.url.path}: {exc.detail}")
    ctx = RequestContext(request_id=_request_id(request), tenant="anonymous")
    return _error_response(error, ctx)
