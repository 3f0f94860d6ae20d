"""The Starlette app: the routes over a built `System`, and one handler for the error tree."""

from __future__ import annotations

import contextlib
import re
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import orjson
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from kernel import redaction, tracing
from kernel.errors import (
    InvalidChatRequest,
    MethodNotAllowed,
    NotFound,
    OverspillError,
    StoreUnavailable,
)
from kernel.store import StoreError
from kernel.types import RequestContext
from kernel.usage import UsageLedger
from proxy.admin import admin_routes, require_master
from proxy.browsers import Browsers
from proxy.endpoint import AppState, serve, traced_serve
from proxy.health import health_body
from proxy.hosts import Hosts
from proxy.keys import Keyring
from proxy.metrics import metrics_route
from proxy.models import model_body, models_body
from proxy.origins import Origins
from proxy.responses import JSON_TYPE, error_response, request_id
from proxy.stored_responses import stored_response_routes
from proxy.surfaces import messages
from proxy.surfaces.chat import ChatSurface
from proxy.surfaces.compaction import CompactSurface
from proxy.surfaces.messages import CountTokensSurface, MessagesSurface
from proxy.surfaces.responses import ResponsesSurface
from proxy.surfaces.responses_count import InputTokensSurface
from proxy.surfaces.routes import RouteSurface
from proxy.surfaces.surface import Surface
from proxy.system import System
from proxy.usage import usage_routes

Reload = Callable[[], Awaitable[dict[str, Any]]]
"""Re-reads the config and swaps it in (proxy/live.py); raises InvalidConfig."""


def create_app(
    system: System, reload: Reload | None = None, served_on: str | None = None
) -> Starlette:
    """The ASGI app over a built system (proxy/system.py wires it); it closes the system.
    With `reload`, `POST /overspill/config/reload` (master key) calls it. `served_on` is the
    address it is served on: on loopback, a request's `Host` is checked (proxy/hosts.py)."""
    general = system.settings.general_settings
    state = AppState(system, Keyring.of(system.settings), Origins(general.allowed_origins))
    hosts = Hosts(general.allowed_hosts, served_on)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        yield
        await system.aclose()

    handlers: dict[Any, Callable[[Request, Exception], Awaitable[Response]]] = {
        OverspillError: _overspill_error,
        StoreError: _store_error,
        HTTPException: _http_error,
        Exception: _internal_error,  # Starlette still logs it and re-raises it to the server
    }
    app = Starlette(
        routes=[*routes(state), *reload_routes(state, reload)],
        exception_handlers=handlers,
        middleware=[
            Middleware(Browsers, origins=state.origins, hosts=hosts, refuse=_overspill_error)
        ],
        lifespan=lifespan,
    )
    # A path with a trailing slash is a 404, never a redirect: Starlette's redirect would point
    # at the client's own Host header (anyone's URL), and clients do not resend bodies on 307.
    app.router.redirect_slashes = False
    app.state.overspill = state
    return app


def routes(state: AppState) -> list[Route]:
    """Every route: chat, models, health, and the operator endpoints."""
    system = state.system
    tracer = tracing.tracer

    def endpoint(surface: Surface) -> Callable[[Request], Awaitable[Response]]:
        async def route(request: Request) -> Response:
            if tracer is not None:  # tracing was configured before the app was built
                return await traced_serve(state, request, surface, tracer)
            return await serve(state, request, surface)

        return route

    chat = endpoint(ChatSurface())
    responses = endpoint(ResponsesSurface())
    compact = endpoint(CompactSurface())
    input_tokens = endpoint(InputTokensSurface())
    messages = endpoint(MessagesSurface())
    count_tokens = endpoint(CountTokensSurface())
    embeddings = endpoint(RouteSurface("embeddings"))
    completions = endpoint(RouteSurface("completions"))

    async def models(request: Request) -> Response:
        caller = state.keys.caller_of(request.headers)
        allows = caller.allows if caller.access else None
        body = await models_body(system, allows, request.query_params)
        return Response(body, media_type=JSON_TYPE)

    async def model(request: Request) -> Response:
        caller = state.keys.caller_of(request.headers)
        name = request.path_params["model"]
        if not name:  # "/v1/models/": the 404 that says to drop the slash
            raise HTTPException(404)
        body = await model_body(system, name, caller.allows if caller.access else None)
        return Response(body, media_type=JSON_TYPE)

    async def liveness(request: Request) -> Response:
        return Response(b'{"status":"alive"}', media_type=JSON_TYPE)

    async def readiness(request: Request) -> Response:
        return await _readiness(system)

    async def health(request: Request) -> Response:
        caller = state.keys.caller_of(request.headers)
        admin = caller.admin or not state.keys.closed
        only = request.query_params.get("model") or None
        status, body = await health_body(system, caller, admin, only)
        return Response(body, status, media_type=JSON_TYPE)

    async def refresh_ollama(request: Request) -> Response:
        require_master(request, state.keys)
        dropped = system.ollama.refresh()
        return Response(orjson.dumps({"dropped": dropped}), media_type=JSON_TYPE)

    return [
        Route("/v1/chat/completions", chat, methods=["POST"]),
        Route("/chat/completions", chat, methods=["POST"]),
        Route("/v1/responses", responses, methods=["POST"]),
        Route("/responses", responses, methods=["POST"]),
        Route("/v1/responses/compact", compact, methods=["POST"]),
        Route("/responses/compact", compact, methods=["POST"]),
        Route("/v1/responses/input_tokens", input_tokens, methods=["POST"]),
        Route("/responses/input_tokens", input_tokens, methods=["POST"]),
        *stored_response_routes(state),
        Route("/v1/messages", messages, methods=["POST"]),
        Route("/messages", messages, methods=["POST"]),
        Route("/v1/messages/count_tokens", count_tokens, methods=["POST"]),
        Route("/messages/count_tokens", count_tokens, methods=["POST"]),
        Route("/v1/embeddings", embeddings, methods=["POST"]),
        Route("/embeddings", embeddings, methods=["POST"]),
        Route("/v1/completions", completions, methods=["POST"]),
        Route("/completions", completions, methods=["POST"]),
        Route("/v1/models", models, methods=["GET"]),
        Route("/models", models, methods=["GET"]),
        Route("/v1/models/{model:path}", model, methods=["GET"]),
        Route("/models/{model:path}", model, methods=["GET"]),
        Route("/health/liveness", liveness, methods=["GET"]),
        # LiteLLM's name for it, which its Kubernetes examples probe: a deployment moved
        # over from LiteLLM keeps its manifests
        Route("/health/liveliness", liveness, methods=["GET"]),
        Route("/health/readiness", readiness, methods=["GET"]),
        Route("/health", health, methods=["GET"]),
        *admin_routes(system.store, state.keys),
        *usage_routes(system.ledger or UsageLedger(system.store, system.settings), state.keys),
        Route("/overspill/ollama/refresh", refresh_ollama, methods=["POST"]),
        metrics_route(state),
    ]


def reload_routes(state: AppState, reload: Reload | None) -> list[Route]:
    """`POST /overspill/config/reload` when the app is served live (proxy/live.py)."""
    if reload is None:
        return []

    async def reload_config(request: Request) -> Response:
        require_master(request, state.keys)
        outcome = redaction.redactor.redact_bytes(orjson.dumps(await reload()))
        return Response(outcome, media_type=JSON_TYPE)

    return [Route("/overspill/config/reload", reload_config, methods=["POST"])]


async def _readiness(system: System) -> Response:
    """Ready when the store answers; never calls a model."""
    try:
        await system.store.ping()
    except StoreError as exc:
        failing = {"status": "unavailable", "store": redaction.redact(str(exc))}
        return Response(orjson.dumps(failing), 503, media_type=JSON_TYPE)
    body = {
        "status": "ready",
        "store": "ok",
        "models": len(system.settings.model_names()),
        "unavailable_models": dict(system.unavailable),
        "layers": list(system.pipeline.names),
    }
    return Response(orjson.dumps(body), media_type=JSON_TYPE)


ANTHROPIC_PATHS = ("/v1/messages", "/messages")
"""Where Anthropic's API is served: errors there are in its shape."""


def _in_shape(
    request: Request, error: OverspillError, ctx: RequestContext | None = None
) -> Response:
    """An error no API route rendered (an unknown path, a wrong method, a refusal before any
    route), in the shape of the API its path belongs to: Anthropic's, else OpenAI's."""
    ctx = ctx or RequestContext(request_id=request_id(request), tenant="anonymous")
    path: str = request.scope.get("path", "")
    if any(path == api or path.startswith(api + "/") for api in ANTHROPIC_PATHS):
        return messages.error_response(error, ctx)
    return error_response(error, ctx)


async def _overspill_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, OverspillError)
    return _in_shape(request, exc)


async def _store_error(request: Request, exc: Exception) -> Response:
    """A route that needs the store (the admin endpoints) found it unusable: 503, in JSON."""
    assert isinstance(exc, StoreError)
    error = StoreUnavailable(
        f"the history store is unavailable, try again shortly ({exc}); "
        "see GET /health/readiness and general_settings.store"
    )
    return _in_shape(request, error)


async def _http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    error: OverspillError
    if exc.status_code == 405:
        error = MethodNotAllowed(f"{request.method} is not allowed on {request.scope.get('path')}")
    elif exc.status_code == 404:
        path = request.scope.get("path", "")
        error = NotFound(_no_route(request.method, path, _api_routes(request.app.routes)))
    else:
        error = InvalidChatRequest(f"{request.method} {request.scope.get('path')}: {exc.detail}")
    return _in_shape(request, error)


async def _internal_error(request: Request, exc: Exception) -> Response:
    """A route's unexpected failure, in its API's error shape (the traceback goes to the log)."""
    ctx = RequestContext(request_id=request_id(request), tenant="anonymous")
    error = OverspillError(f"internal error in overspill (request id {ctx.request_id})")
    return _in_shape(request, error, ctx)


OPENAI_APIS_NOT_SERVED = (
    "audio", "images", "moderations", "files", "uploads", "batches", "fine_tuning",
    "vector_stores", "assistants", "threads", "realtime", "evals", "containers", "videos",
)  # fmt: skip
"""OpenAI's APIs overspill does not serve (docs/api/embeddings-and-completions.md says why)."""


def _no_route(method: str, path: str, served: str) -> str:
    """Why a path has no route: the route meant when it was only a trailing slash, else the
    API routes overspill serves (and, for an OpenAI API it does not, where to send it)."""
    shown = path if len(path) <= 200 else path[:200] + "..."
    if len(path) > 1 and path.endswith("/"):
        return f"no route {method} {shown}: drop the trailing slash ({shown.rstrip('/')})"
    if path == "/health" or path.startswith("/health/"):
        return (
            f"no route {method} {shown}: overspill's health routes are GET /health/liveness "
            "(the process is up; also /health/liveliness, LiteLLM's name), GET "
            "/health/readiness (the config and store; never calls a model) and GET /health "
            "(each model deployment asked for one token; ?model=NAME for one model's)"
        )
    api = path.removeprefix("/v1/").lstrip("/").partition("/")[0]
    if api in OPENAI_APIS_NOT_SERVED:
        return (
            f"no route {method} {shown}: overspill does not serve OpenAI's {api} API; send "
            f"those requests to the provider itself. overspill serves {served}"
        )
    return f"no route {method} {shown}; overspill's API routes: {served}"


def _api_routes(routes: list[BaseRoute]) -> str:
    """The app's `/v1/` routes and their methods (and whether each is served without `/v1`)."""
    paths = {getattr(route, "path", "") for route in routes}
    listed = []
    for route in routes:
        path = getattr(route, "path", "")
        if path.startswith("/v1/"):
            methods = sorted(set(getattr(route, "methods", None) or ()) - {"HEAD"})
            shown = re.sub(r"\{(\w+):\w+\}", r"{\1}", path)  # {model:path} is {model}
            listed.append(f"{'/'.join(methods)} {shown}")
    bare = all(path[3:] in paths for path in paths if path.startswith("/v1/"))
    return ", ".join(listed) + (" (each also without /v1)" if bare else "")
