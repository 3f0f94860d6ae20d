"""Slots: conversations that open identically each keep their own cached extraction.

A derived conversation id (no `X-Conversation-Id`, no `metadata.conversation_id`) hashes the
tenant, the opening system messages and the first user message (kernel/conversation.py). It
must stay the same from the first turn on, so two conversations that open the same way (one
system prompt, a templated first message) share it; with one entry per id they overwrote each
other's extraction on every turn, each paying a fresh extraction.

So a derived id names a bucket of `SLOTS` entries: slot 0 is stored under the id itself (the
key it always had), slot k under `<id>.<k>`. Each entry's prefix chain says which history it
summarised; the entry a request uses is the one whose chain its messages continue, the longest
when several do (a branch that took over an older one). A new extraction goes to the slot of the
entry it extends, else to the first empty slot, else over the entry written longest ago: one
growing conversation rewrites its own slot, and a fifth conversation of a full bucket evicts
the least recently extended one, never a busy one.

Cost: a bucket whose slot 0 is empty is one store read, as before; only a bucket that holds an
entry reads its other slots (`SLOTS - 1` more reads), which happens when a splice or an
extraction is near. A client-given id is the client's word that it is one conversation: one
entry, as before. Writes stay serialised by the store's single flight on the bucket's id.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

from kernel.store import HistoryEntry, HistoryStore, StoreError
from kernel.types import RequestContext

log = logging.getLogger("overspill.condense")

SLOTS = 4
"""Entries one derived id keeps (conversations sharing an opening, kept apart)."""


@dataclass(frozen=True, slots=True)
class Found:
    """What a lookup found in a conversation's slots."""

    entry: HistoryEntry | None
    """The entry the request may use (None: none applies)."""
    first: HistoryEntry | None
    """Slot 0's entry, applying or not (its miss reason is what gets logged)."""
    slot: str
    """The conversation id an extraction of this request is stored under."""


def slot_id(conversation_id: str, index: int) -> str:
    """The store id of a bucket's slot `index` (slot 0 is the id itself)."""
    return conversation_id if index == 0 else f"{conversation_id}.{index}"


async def look_up(
    store: HistoryStore, ctx: RequestContext, applies: Callable[[HistoryEntry], bool]
) -> Found:
    """The entry this request continues, and where its next extraction goes.

    A store that fails is logged and counts as empty: the request goes on without the cache.
    """
    base = ctx.conversation_id
    first = await _get(store, ctx.tenant, base)
    if first is None or ctx.conversation_hint is not None:
        usable = first if first is not None and applies(first) else None
        return Found(usable, first, base)
    entries = [first] + [await _get(store, ctx.tenant, slot_id(base, k)) for k in range(1, SLOTS)]
    best: tuple[int, int] | None = None
    for index, item in enumerate(entries):
        if item is not None and applies(item):
            rank = (item.historical_end_index, -index)
            best = rank if best is None or rank > best else best
    if best is not None:
        index = -best[1]
        return Found(entries[index], first, slot_id(base, index))
    empty = [index for index, item in enumerate(entries) if item is None]
    if empty:
        return Found(None, first, slot_id(base, empty[0]))
    _, oldest = min((item.created_at, k) for k, item in enumerate(entries) if item is not None)
    return Found(None, first, slot_id(base, oldest))


async def _get(store: HistoryStore, tenant: str, conversation_id: str) -> HistoryEntry | None:
    try:
        return await store.get(tenant, conversation_id)
    except StoreError as exc:
        log.error("history store read failed; going on without it", extra={"error": str(exc)})
        return None
