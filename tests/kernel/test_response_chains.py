"""Responses chains in the store: walked in batches, remembered per process, tenant-scoped."""

from __future__ import annotations

from typing import Any

import pytest

from kernel.errors import ResponseNotFound
from kernel.response_chains import NO_CHAIN, Chain, ResponseChains
from kernel.store import DiskHistoryStore


def response(number: int) -> dict[str, Any]:
    """A response object answering turn `number`."""
    text = {"type": "output_text", "text": f"answer {number}", "annotations": []}
    item = {"type": "message", "role": "assistant", "content": [text]}
    return {"id": f"resp_{number}", "object": "response", "output": [item]}


async def grow(chains: ResponseChains, turns: int, tenant: str = "acme") -> Chain:
    """A chain of `turns` responses, each continuing the last."""
    chain = NO_CHAIN
    for number in range(turns):
        asked = [{"type": "message", "role": "user", "content": f"question {number}"}]
        await chains.save(tenant, "conv", chain, asked, response(number))
        chain = await chains.load(tenant, f"resp_{number}")
    return chain


async def test_a_long_chain_is_walked_from_the_store_in_batches(store: DiskHistoryStore) -> None:
    """A process that never saw the chain reads it whole, oldest first, past 64 links."""
    await grow(ResponseChains(store), 150)
    fresh = ResponseChains(store)
    chain = await fresh.load("acme", "resp_149")
    assert [link.id for link in chain.links] == [f"resp_{n}" for n in range(150)]
    items = chain.items
    assert items[0]["content"] == "question 0"
    assert items[-1]["content"][0]["text"] == "answer 149"
    assert chain.conversation_id == "conv"
    assert len(chain.ancestors_of_next()) == 64


async def test_a_remembered_chain_costs_one_read(store: DiskHistoryStore) -> None:
    """Continuing a chain this process stored reads only the named link."""
    chains = ResponseChains(store)
    await grow(chains, 5)
    reads: list[str] = []
    original = store.get_response

    async def counted(tenant: str, response_id: str) -> Any:
        reads.append(response_id)
        return await original(tenant, response_id)

    store.get_response = counted  # type: ignore[method-assign]
    chain = await chains.load("acme", "resp_4")
    assert len(chain.links) == 5
    assert reads == ["resp_4"]


async def test_another_tenant_cannot_load_or_delete(store: DiskHistoryStore) -> None:
    """Another tenant's response id is not found, whether remembered or not."""
    chains = ResponseChains(store)
    await grow(chains, 2, tenant="alice")
    with pytest.raises(ResponseNotFound):
        await chains.load("bob", "resp_1")
    with pytest.raises(ResponseNotFound):
        await chains.delete("bob", "resp_1")
    assert len((await chains.load("alice", "resp_1")).links) == 2


async def test_a_deleted_link_breaks_the_chain_through_it(store: DiskHistoryStore) -> None:
    """Once a middle link is deleted, the chain after it can no longer be continued here or
    on a process that walks it from the store."""
    chains = ResponseChains(store)
    await grow(chains, 4)
    await chains.delete("acme", "resp_1")
    for process in (chains, ResponseChains(store)):
        with pytest.raises(ResponseNotFound, match="resp_1"):
            await process.load("acme", "resp_3")
    with pytest.raises(ResponseNotFound):
        await chains.response("acme", "resp_1")


async def test_memory_is_bounded(store: DiskHistoryStore) -> None:
    """A process remembers at most its bound of chains, the most recent ones."""
    chains = ResponseChains(store, remembered=3)
    for name in ("a", "b", "c", "d", "e"):
        await grow(chains, 1, tenant=name)
    assert len(chains._chains) == 3
    assert {tenant for tenant, _ in chains._chains} == {"c", "d", "e"}
