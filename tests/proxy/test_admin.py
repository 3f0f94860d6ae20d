"""Operators can list, read and forget cached conversations, over HTTP and from the CLI."""

from __future__ import annotations

import asyncio
import secrets
import time
from pathlib import Path

import httpx
import pytest

from cli.main import main
from kernel.records import EXTRACTIONS, StoredFact, stored_facts
from kernel.store import DiskHistoryStore, HistoryEntry
from kernel.store_redis import RedisHistoryStore
from providers.fake import ScriptedProvider, json_response
from proxy.app import create_app
from proxy.stores import open_store
from proxy.system import build_system
from tests.conftest import AppClient, settings_from
from tests.kernel.store_contract import make_batches
from tests.redis_ha import ClusterSet


def entry(
    tenant: str, conversation: str, text: str = "Notes: the user planned a trip"
) -> HistoryEntry:
    return HistoryEntry(
        tenant=tenant, conversation_id=conversation, model_id="local", historical_end_index=40,
        message_count=62, extraction=text, chain="c" * 64, prompt_version="x1",
        tokens_before=3000, tokens_after=120, created_at=time.time() - 5,
    )  # fmt: skip


@pytest.fixture
async def seeded(store: DiskHistoryStore) -> DiskHistoryStore:
    await store.put(entry("tenant-a", "conv-1"))
    await store.put(entry("tenant-b", "conv-2"))
    return store


async def test_listing_needs_the_master_key(
    app_client: AppClient, seeded: DiskHistoryStore
) -> None:
    """Without the master key the admin routes answer 401; with it they list every tenant."""
    client = app_client(
        {"local": [ScriptedProvider([json_response("x")])]}, key="sk-client-not-master"
    )
    assert (await client.get("/overspill/conversations")).status_code == 401
    admin = app_client({"local": [ScriptedProvider([json_response("x")])]})
    listing = (await admin.get("/overspill/conversations")).json()["data"]
    assert {(row["tenant"], row["conversation_id"]) for row in listing} == {
        ("tenant-a", "conv-1"),
        ("tenant-b", "conv-2"),
    }
    assert listing[0]["tokens_after"] == 120
    assert "extraction" not in listing[0]
    only_a = (await admin.get("/overspill/conversations", params={"tenant": "tenant-a"})).json()[
        "data"
    ]
    assert [row["conversation_id"] for row in only_a] == ["conv-1"]


async def test_show_and_forget_one(app_client: AppClient, seeded: DiskHistoryStore) -> None:
    """One conversation shows its extraction; DELETE forgets it and only it."""
    admin = app_client({"local": [ScriptedProvider([json_response("x")])]})
    shown = (await admin.get("/overspill/conversations/conv-1")).json()["data"][0]
    assert shown["extraction"] == "Notes: the user planned a trip"
    assert (await admin.delete("/overspill/conversations/conv-1")).json() == {"deleted": 1}
    assert (await admin.get("/overspill/conversations/conv-1")).status_code == 404
    assert await seeded.get("tenant-b", "conv-2") is not None
    assert (await admin.delete("/overspill/conversations")).json() == {"deleted": 1}
    assert await seeded.entries() == []


async def test_a_conversation_shows_its_ledger_records(
    app_client: AppClient, seeded: DiskHistoryStore
) -> None:
    """The detail lists the extraction's ledger records as objects (defaults left out), and
    says what is wrong with them when they are corrupt instead of failing."""
    fact = StoredFact(role="user", text="Our code is ZX-4471.", score=9, index=3, rule="said")
    with_facts = entry("tenant-a", "conv-1").model_copy(update={"facts": stored_facts([fact])})
    await seeded.put(with_facts)
    await seeded.put(entry("tenant-b", "conv-2").model_copy(update={"facts": '[["user"]]'}))
    admin = app_client({"local": [ScriptedProvider([json_response("x")])]})
    (shown,) = (await admin.get("/overspill/conversations/conv-1")).json()["data"]
    assert shown["facts"] == [
        {"role": "user", "text": "Our code is ZX-4471.", "score": 9, "rule": "said", "index": 3}
    ]
    (corrupt,) = (await admin.get("/overspill/conversations/conv-2")).json()["data"]
    assert (corrupt["facts"], corrupt["facts_error"]) == (
        None,
        "HistoryEntry record: facts.0.text: Field required",
    )
    assert corrupt["extraction"] == "Notes: the user planned a trip"


async def test_admin_is_off_without_a_master_key(
    app_client: AppClient, seeded: DiskHistoryStore
) -> None:
    """With no master key configured nobody can use the admin routes."""
    settings = settings_from(
        "model_list:\n  - {model_name: local, litellm_params: {model: openai/a}}\n"
    )
    client = app_client(
        {"local": [ScriptedProvider([json_response("x")])]}, settings=settings, key=None
    )
    response = await client.get("/overspill/conversations")
    assert response.status_code == 403
    assert "general_settings.master_key" in response.json()["error"]["message"]


def test_cli_reads_the_store_directly(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`overspill conversations ls|show|rm --config` works on the store the config names."""
    config = tmp_path / "config.yaml"
    config.write_text("model_list:\n  - {model_name: local, litellm_params: {model: openai/a}}\n"
                      "general_settings: {store: {path: st}}\n")  # fmt: skip
    settings = settings_from(config.read_text())

    async def seed() -> None:
        store = open_store(settings.general_settings.store, base_dir=str(tmp_path))
        await store.put(entry("tenant-a", "conv-1"))
        await store.aclose()

    asyncio.run(seed())

    assert main(["conversations", "ls", "--config", str(config)]) == 0
    table = capsys.readouterr().out.splitlines()
    assert table[0].split()[:3] == ["conversation_id", "tenant", "model"]
    assert table[1].split()[:3] == ["conv-1", "tenant-a", "local"]
    assert main(["conversations", "show", "conv-1", "--config", str(config)]) == 0
    assert "the user planned a trip" in capsys.readouterr().out
    assert main(["conversations", "rm", "conv-1", "--config", str(config)]) == 0
    assert main(["conversations", "show", "conv-1", "--config", str(config)]) == 1
    assert "no cached conversation 'conv-1'" in capsys.readouterr().err


async def test_a_conversation_shows_and_forgets_its_document_batches(
    app_client: AppClient, seeded: DiskHistoryStore
) -> None:
    """The detail lists a conversation's earlier document batches; a tenant's batches-only
    conversation can be read and forgotten too, with both kinds gone after DELETE."""
    await seeded.put_batches(make_batches(tenant="tenant-a", conversation_id="conv-1"))
    await seeded.put_batches(make_batches(tenant="tenant-b", conversation_id="docs-only"))
    client = app_client({"local": [ScriptedProvider([json_response("x")])]})
    (shown,) = (await client.get("/overspill/conversations/conv-1")).json()["data"]
    assert (shown["document_batches"], shown["document_batch_positions"]) == (2, [1, 3])
    assert shown["extraction"].startswith("Notes")
    only = await client.get("/overspill/conversations/docs-only", params={"tenant": "tenant-b"})
    assert only.json()["data"][0]["document_batches"] == 2
    gone = await client.delete("/overspill/conversations/conv-1")
    assert gone.json() == {"deleted": 1}
    assert await seeded.get_batches("tenant-a", "conv-1") is None
    missing = await client.get("/overspill/conversations/conv-1")
    assert missing.status_code == 404


async def test_admin_lists_and_forgets_across_a_clusters_slots(
    redis_cluster: ClusterSet, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """On a Redis Cluster the admin API lists the conversations of every primary, forgets one
    and clears a tenant's; `overspill conversations ls --config` sees the same."""
    prefix = f"admin-{secrets.token_hex(3)}:"
    store = RedisHistoryStore(redis_cluster.url, key_prefix=prefix, timeout_seconds=10)
    names = [(tenant, f"conv-{i}") for tenant in ("tenant-a", "tenant-b") for i in range(12)]
    for tenant, conversation in names:
        await store.put(entry(tenant, conversation))
    assert {redis_cluster.primary_of(store.layout.record(EXTRACTIONS, *n)) for n in names} == set(
        redis_cluster.primaries()
    )
    system = build_system(settings_from(), providers={"local": []}, store=store)
    transport = httpx.ASGITransport(app=create_app(system))
    async with httpx.AsyncClient(
        transport=transport, base_url="http://o.test", headers={"authorization": "Bearer sk-master"}
    ) as admin:
        listing = (await admin.get("/overspill/conversations")).json()["data"]
        assert {(row["tenant"], row["conversation_id"]) for row in listing} == set(names)
        gone = await admin.delete("/overspill/conversations/conv-3", params={"tenant": "tenant-a"})
        assert gone.json() == {"deleted": 1}
        cleared = await admin.delete("/overspill/conversations", params={"tenant": "tenant-b"})
        assert cleared.json() == {"deleted": 12}
    await system.aclose(0)
    config = tmp_path / "config.yaml"
    config.write_text(
        "model_list:\n  - {model_name: local, litellm_params: {model: openai/a}}\n"
        f"general_settings: {{store: {{backend: redis, url: '{redis_cluster.url}', "
        f"key_prefix: '{prefix}', timeout_seconds: 10}}}}\n"
    )
    assert await asyncio.to_thread(main, ["conversations", "ls", "--config", str(config)]) == 0
    rows = [line.split()[:2] for line in capsys.readouterr().out.splitlines()[1:]]
    assert sorted(rows) == sorted(
        [c, "tenant-a"] for c in (f"conv-{i}" for i in range(12)) if c != "conv-3"
    )
