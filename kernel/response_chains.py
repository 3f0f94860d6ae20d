"""Responses API state: a `previous_response_id` turned into the conversation it continues.

A stored response (kernel/records.py `StoredResponse`) is an immutable link: its turn's input
items, the response object, the previous link's id, and the ids of its nearest earlier links.
The conversation a response continues is every link's input and output items, oldest first.

Loading always reads the named link from the store (which proves it exists, unexpired, and is
this tenant's). Its earlier links come from this process's memory when it loaded or stored the
previous link recently (a chain continued turn after turn on one replica costs one store read
per turn, not one per link), else from the store: the named link's ancestors in one batch, then
theirs, 1 + n / ANCESTORS_KEPT reads for a chain of n links, and a link missing in the middle
(deleted, expired) fails the whole chain rather than silently skipping turns. Links are never
rewritten, so two replicas, or two branches from one response, never race; a link deleted on
another replica may still be part of a chain this replica remembers until it forgets it.

Everything is scoped to the tenant: another key's response id is not found, exactly as an id
that never existed.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from kernel.errors import ResponseNotFound
from kernel.records import ANCESTORS_KEPT, StoredResponse
from kernel.store import HistoryStore

MAX_LINKS = 100_000
"""A chain longer than this is refused (no client gets there; a guard against a corrupt store)."""
REMEMBERED_CHAINS = 512
"""Chains a process keeps in memory by their last link (least recently used go first)."""


@dataclass(frozen=True, slots=True)
class Chain:
    """What a new response continues: the earlier links, oldest first."""

    links: tuple[StoredResponse, ...]

    @property
    def items(self) -> tuple[dict[str, Any], ...]:
        """Every earlier input and output item, oldest first."""
        return tuple(item for link in self.links for item in (*link.input, *link.output()))

    @property
    def conversation_id(self) -> str | None:
        """The conversation the chain belongs to (its first link's, shared by all)."""
        return self.links[-1].conversation_id if self.links else None

    def ancestors_of_next(self) -> tuple[str, ...]:
        """The `ancestors` a response continuing this chain names."""
        return tuple(link.id for link in self.links[-ANCESTORS_KEPT:])


NO_CHAIN = Chain(())
"""What a response that continues nothing continues."""


class ResponseChains:
    """Reads and writes the Responses API's stored responses, one per system."""

    def __init__(self, store: HistoryStore, remembered: int = REMEMBERED_CHAINS) -> None:
        self.store = store
        self.remembered = remembered
        self._chains: OrderedDict[tuple[str, str], Chain] = OrderedDict()
        """Recent chains by (tenant, last link's id)."""

    async def response(self, tenant: str, response_id: str) -> StoredResponse:
        """The tenant's stored response; ResponseNotFound when there is none."""
        found = await self.store.get_response(tenant, response_id)
        if found is None:
            raise not_found(response_id)
        return found

    async def load(self, tenant: str, response_id: str) -> Chain:
        """The chain ending with `response_id` (the `previous_response_id` of a new request)."""
        tip = await self.store.get_response(tenant, response_id)
        if tip is None:
            raise not_found(response_id, param="previous_response_id")
        if tip.previous_response_id is None:
            return self._remember(tenant, Chain((tip,)))
        known = self._chains.get((tenant, tip.previous_response_id))
        if known is not None:
            return self._remember(tenant, Chain((*known.links, tip)))
        return self._remember(tenant, Chain(tuple(await self._walk(tenant, tip))))

    async def _walk(self, tenant: str, tip: StoredResponse) -> list[StoredResponse]:
        """The links before `tip` and `tip`, read from the store in batches of ancestors."""
        links = [tip]
        oldest = tip
        while oldest.previous_response_id is not None:
            wanted = oldest.ancestors or (oldest.previous_response_id,)
            found = await self.store.get_responses(tenant, wanted)
            earlier = [link for link in found if link is not None]
            if len(earlier) != len(wanted) or len(links) + len(earlier) > MAX_LINKS:
                gone = next((i for i, link in zip(wanted, found, strict=True) if link is None), "")
                raise ResponseNotFound(
                    f"response {tip.id!r} continues a chain whose earlier response {gone!r} no "
                    "longer exists (deleted or expired): start a new chain, or send the "
                    "conversation's items in `input`",
                    param="previous_response_id",
                )
            links[:0] = earlier
            oldest = earlier[0]
        return links

    async def save(
        self,
        tenant: str,
        conversation_id: str,
        chain: Chain,
        turn_input: Sequence[Mapping[str, Any]],
        response: dict[str, Any],
    ) -> None:
        """Store a new response as the next link of `chain` (StoreError when it cannot)."""
        previous = chain.links[-1].id if chain.links else None
        record = StoredResponse(
            tenant=tenant,
            conversation_id=chain.conversation_id or conversation_id,
            id=str(response["id"]),
            previous_response_id=previous,
            ancestors=chain.ancestors_of_next(),
            created_at=time.time(),
            input=tuple(dict(item) for item in turn_input),
            response=response,
        )
        await self.store.put_response(record)
        self._remember(tenant, Chain((*chain.links, record)))

    async def delete(self, tenant: str, response_id: str) -> None:
        """Remove the tenant's stored response; ResponseNotFound when there is none."""
        held = [
            key for key, chain in self._chains.items() if _holds(key, chain, tenant, response_id)
        ]
        for key in held:
            del self._chains[key]
        if not await self.store.delete_response(tenant, response_id):
            raise not_found(response_id)

    def _remember(self, tenant: str, chain: Chain) -> Chain:
        """Keep `chain` by its last link, forgetting the least recently used past the bound."""
        key = (tenant, chain.links[-1].id)
        self._chains[key] = chain
        self._chains.move_to_end(key)
        while len(self._chains) > self.remembered:
            self._chains.popitem(last=False)
        return chain


def _holds(key: tuple[str, str], chain: Chain, tenant: str, response_id: str) -> bool:
    """Whether a remembered chain of `tenant` has the link `response_id`."""
    return key[0] == tenant and any(link.id == response_id for link in chain.links)


def not_found(response_id: str, param: str | None = None) -> ResponseNotFound:
    """The error for an id this tenant has no response for."""
    shown = response_id if len(response_id) <= 100 else response_id[:100] + "..."
    return ResponseNotFound(f"no response found with id {shown!r}", param=param)
