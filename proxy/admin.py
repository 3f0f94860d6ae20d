"""Operator endpoints: look inside the history cache and clear it (master key required).

GET    /overspill/conversations               ids, tenants, sizes, ages   (?tenant=T)
GET    /overspill/conversations/{id}          metadata and the extraction  (?tenant=T)
DELETE /overspill/conversations/{id}          forget one conversation      (?tenant=T)
DELETE /overspill/conversations               forget all                   (?tenant=T)
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import orjson
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from kernel import redaction
from kernel.errors import NotFound
from kernel.store import HistoryEntry, HistoryStore, StoreError
from proxy.keys import Keyring

PREFIX = "/overspill/conversations"


def summary(entry: HistoryEntry, now: float) -> dict[str, Any]:
    """What the listing shows of one entry (no extraction text)."""
    return {
        "conversation_id": entry.conversation_id,
        "tenant": entry.tenant,
        "model": entry.model_id,
        "messages": entry.message_count,
        "summarised_messages": entry.historical_end_index,
        "tokens_before": entry.tokens_before,
        "tokens_after": entry.tokens_after,
        "extraction_chars": len(entry.extraction),
        "age_seconds": round(now - entry.created_at, 1),
    }


def require_master(request: Request, keys: Keyring) -> None:
    """Admin routes need the master key (and are off when none is configured); a client
    key gets 403, since it is a valid key of a tenant, not the admin's."""
    keys.require_admin(request.headers.get("authorization"))


def admin_routes(store: HistoryStore, keys: Keyring) -> list[Route]:
    """The admin routes, bound to a store and guarded by the master key."""

    def guard(request: Request) -> str | None:
        require_master(request, keys)
        return request.query_params.get("tenant") or None

    async def listing(request: Request) -> Response:
        tenant = guard(request)
        if request.method == "DELETE":
            return _json({"deleted": await store.clear(tenant)})
        now = time.time()
        entries = sorted(await store.entries(tenant), key=lambda e: -e.created_at)
        return _json({"object": "list", "data": [summary(e, now) for e in entries]})

    async def one(request: Request) -> Response:
        tenant = guard(request)
        conversation = request.path_params["conversation_id"]
        tenants = await tenants_of(store, conversation, tenant)
        if request.method == "DELETE":
            deleted = sum([await store.delete(t, conversation) for t in tenants])
            if not deleted:
                raise NotFound(f"no cached conversation {conversation!r}")
            return _json({"deleted": deleted})
        data = [await detail(store, t, conversation) for t in tenants]
        found = [item for item in data if item is not None]
        if not found:
            raise NotFound(f"no cached conversation {conversation!r}")
        return _json({"data": found})

    handlers: list[tuple[str, Callable[[Request], Any]]] = [
        (PREFIX, listing),
        (PREFIX + "/{conversation_id}", one),
    ]
    return [Route(path, handler, methods=["GET", "DELETE"]) for path, handler in handlers]


async def tenants_of(store: HistoryStore, conversation: str, tenant: str | None) -> list[str]:
    """The tenants to look in: the one named, else those with an extraction of that id."""
    if tenant is not None:
        return [tenant]
    return [e.tenant for e in await store.entries() if e.conversation_id == conversation]


async def detail(store: HistoryStore, tenant: str, conversation: str) -> dict[str, Any] | None:
    """One conversation's cached state: its extraction and its earlier document batches."""
    entry = await store.get(tenant, conversation)
    batches = await store.get_batches(tenant, conversation)
    if entry is None and batches is None:
        return None
    found: dict[str, Any] = {"conversation_id": conversation, "tenant": tenant}
    if entry is not None:
        found |= {**summary(entry, time.time()), **entry.model_dump(exclude={"v", "facts"})}
        found |= facts_of(entry)
    placed = batches.batches if batches else ()
    found["document_batches"] = len(placed)
    found["document_batch_positions"] = [batch.position for batch in placed]
    return found


def facts_of(entry: HistoryEntry) -> dict[str, Any]:
    """An entry's ledger records as objects (their fields at defaults left out), or what is
    wrong with them."""
    try:
        records = entry.records()
    except StoreError as exc:
        return {"facts": None, "facts_error": str(exc)}
    return {"facts": [record.model_dump(exclude_defaults=True) for record in records]}


def _json(payload: Any) -> Response:
    """An admin answer, through the redactor like every error and log line."""
    body = redaction.redactor.redact_bytes(orjson.dumps(payload))
    return Response(body, media_type="application/json")
