"""The stored responses of the Responses API: read one, list its input items, delete it.

    GET    /v1/responses/{id}               the response object as it was returned
    GET    /v1/responses/{id}/input_items   its turn's input items, paged as OpenAI pages them
    DELETE /v1/responses/{id}               removes it (a chain through it cannot be continued)

Every route runs as the caller's tenant: another key's response is not found, exactly as an
id that never existed (kernel/response_chains.py).
"""

from __future__ import annotations

import hashlib
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import orjson
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from kernel.errors import InvalidChatRequest
from kernel.records import StoredResponse
from proxy.endpoint import AppState
from proxy.responses import JSON_TYPE
from proxy.surfaces.responses import chains_of

Handler = Callable[[Request], Awaitable[Response]]
MAX_PAGE = 100


def stored_response_routes(state: AppState) -> list[Route]:
    """The routes over stored responses, with and without the `/v1` prefix."""

    async def get_one(request: Request) -> Response:
        tenant = state.keys.caller_of(request.headers).tenant
        found = await chains_of(state.system).response(tenant, request.path_params["id"])
        return Response(orjson.dumps(found.response), media_type=JSON_TYPE)

    async def delete_one(request: Request) -> Response:
        tenant = state.keys.caller_of(request.headers).tenant
        response_id = request.path_params["id"]
        await chains_of(state.system).delete(tenant, response_id)
        gone = {"id": response_id, "object": "response.deleted", "deleted": True}
        return Response(orjson.dumps(gone), media_type=JSON_TYPE)

    async def input_items(request: Request) -> Response:
        tenant = state.keys.caller_of(request.headers).tenant
        found = await chains_of(state.system).response(tenant, request.path_params["id"])
        page = items_page(found, request.query_params)
        return Response(orjson.dumps(page), media_type=JSON_TYPE)

    routes: list[Route] = []
    for prefix in ("/v1", ""):
        routes += [
            Route(f"{prefix}/responses/{{id}}", get_one, methods=["GET"]),
            Route(f"{prefix}/responses/{{id}}", delete_one, methods=["DELETE"]),
            Route(f"{prefix}/responses/{{id}}/input_items", input_items, methods=["GET"]),
        ]
    return routes


def items_page(record: StoredResponse, query: Mapping[str, str]) -> dict[str, Any]:
    """One page of a response's input items (`limit`, `order`, `after`, `before`)."""
    limit = _limit(query.get("limit"))
    order = query.get("order", "desc")
    if order not in ("asc", "desc"):
        raise InvalidChatRequest("'order' must be asc or desc", param="order")
    items = [listed(item, record.id, index) for index, item in enumerate(record.input)]
    if order == "desc":
        items.reverse()
    ids = [item["id"] for item in items]
    start, stop = 0, len(items)
    if (after := query.get("after")) is not None:
        start = ids.index(after) + 1 if after in ids else len(items)
    if (before := query.get("before")) is not None:
        stop = ids.index(before) if before in ids else 0
    window = items[start:stop]
    data = window[:limit]
    return {
        "object": "list",
        "data": data,
        "first_id": data[0]["id"] if data else None,
        "last_id": data[-1]["id"] if data else None,
        "has_more": len(window) > limit,
    }


def listed(item: Mapping[str, Any], response_id: str, index: int) -> dict[str, Any]:
    """An input item as the API lists it: with an id, and a message's text as parts."""
    shown = dict(item)
    if "id" not in shown:
        digest = hashlib.sha256(f"{response_id}:{index}".encode()).hexdigest()[:48]
        kind = shown.get("type")
        prefix = "msg" if kind == "message" else "fc" if kind == "function_call" else "item"
        shown["id"] = f"{prefix}_{digest}"
    if shown.get("type") == "message":
        content = shown.get("content")
        if isinstance(content, str):
            part = "output_text" if shown.get("role") == "assistant" else "input_text"
            shown["content"] = [{"type": part, "text": content}]
        shown.setdefault("status", "completed")
    return shown


def _limit(value: str | None) -> int:
    """`limit` (1 to 100, default 20), else a 400 naming it."""
    if value is None:
        return 20
    if not value.isascii() or not value.isdigit() or not 1 <= int(value) <= MAX_PAGE:
        raise InvalidChatRequest(f"'limit' must be a number from 1 to {MAX_PAGE}", param="limit")
    return int(value)
