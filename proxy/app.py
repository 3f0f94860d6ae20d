"""The Starlette app: routes, one error handler, and the wiring of layers and providers."""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from typing import Any

import httpx
import orjson
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from kernel.config import ModelEntry, Settings
from kernel.errors import (
    InvalidChatRequest,
    MethodNotAllowed,
    NotFound,
    OverspillError,
)
from kernel.services import Services
from kernel.store import HistoryStore, StoreError
from kernel.types import Provider, RequestContext
from middleware.pipeline import LAYERS, LayerFactory, build_layers, compose
from providers.model_info import context_window
from providers.ollama import DiscoveryFailed, OllamaWindows, api_base_of, native
from providers.openai_compat import OpenAICompatProvider
from providers.router import Router
from proxy.admin import admin_routes, require_master
from proxy.chat import JSON_TYPE, AppState, chat_completions, error_response, request_id
from proxy.http import authenticate
from proxy.stores import open_store

log = logging.getLogger("overspill.request")


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


async def _local_ollama_models(ollama: OllamaWindows, entry: ModelEntry) -> list[dict[str, Any]]:
    """An Ollama server's local models (`/api/tags`) with their windows, for /v1/models."""
    base = api_base_of(entry)
    try:
        local = await ollama.local_models(base)
    except DiscoveryFailed as exc:
        log.warning(
            "cannot list Ollama's local models", extra={"api_base": base, "error": str(exc)}
        )
        return []
    listed = []
    for model in local:
        params = entry.litellm_params.model_copy(update={"model": f"ollama_chat/{model.name}"})
        window = await ollama.window(entry.model_copy(update={"litellm_params": params}))
        listed.append(
            {
                "id": model.name,
                "object": "model",
                "created": 0,
                "owned_by": "ollama",
                "context_window": window.num_ctx,
                "context_window_source": window.source,
                "configured": False,
                "server": entry.model_name,
            }
        )
    return listed


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
    ollama: OllamaWindows | None = None,
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
    owns_ollama = ollama is None
    ollama = ollama or OllamaWindows()
    services = Services(settings, router.internal, windows.get, history, ollama)
    layers = build_layers(services, LAYERS if registry is None else registry)
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
        if owns_ollama:
            await ollama.aclose()
        if client is None:
            await http.aclose()

    async def chat(request: Request) -> Response:
        return await chat_completions(state, request)

    listing = [e for e in settings.model_list if e.ollama.list_local_models and not e.missing_env]

    async def models(request: Request) -> Response:
        authenticate(request.headers.get("authorization"), state.master_key)
        if not listing:
            return Response(state.models_body, media_type=JSON_TYPE)
        payload = orjson.loads(state.models_body)
        for entry in listing:
            payload["data"] += await _local_ollama_models(ollama, entry)
        return Response(orjson.dumps(payload), media_type=JSON_TYPE)

    async def liveness(request: Request) -> Response:
        return Response(b'{"status":"alive"}', media_type=JSON_TYPE)

    async def readiness(request: Request) -> Response:
        try:
            await history.ping()
        except StoreError as exc:
            failing = {"status": "unavailable", "store": str(exc)}
            return Response(orjson.dumps(failing), 503, media_type=JSON_TYPE)
        body = {
            "status": "ready",
            "store": "ok",
            "models": len(settings.model_names()),
            "unavailable_models": dict(state.unavailable),
            "layers": list(settings.middleware),
        }
        return Response(orjson.dumps(body), media_type=JSON_TYPE)

    async def refresh_ollama(request: Request) -> Response:
        require_master(request, master)
        return Response(orjson.dumps({"dropped": ollama.refresh()}), media_type=JSON_TYPE)

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


async def _overspill_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, OverspillError)
    ctx = RequestContext(request_id=request_id(request), tenant="anonymous")
    return error_response(exc, ctx)


async def _http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    error: OverspillError
    if exc.status_code == 405:
        error = MethodNotAllowed(f"{request.method} is not allowed on {request.url.path}")
    elif exc.status_code == 404:
        error = NotFound(f"no route {request.method} {request.url.path}")
    else:
        error = InvalidChatRequest(f"{request.method} {request.url.path}: {exc.detail}")
    ctx = RequestContext(request_id=request_id(request), tenant="anonymous")
    return error_response(error, ctx)
