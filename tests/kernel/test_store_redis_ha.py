"""The Redis store on a Redis Cluster (3 primaries, 3 replicas) and on a Sentinel set (1 primary,
1 replica, 3 Sentinels), real servers from Debian's redis-server."""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

from kernel.store_redis import RedisHistoryStore
from tests.kernel.store_contract import CONTRACT, Check, contract_id
from tests.redis_ha import ClusterSet, SentinelSet, redis_cluster, redis_sentinel  # noqa: F401

LONG_TTL = 3600.0

StoreFactory = Callable[..., RedisHistoryStore]


@pytest.fixture(params=["cluster", "sentinel"])
def ha_url(request: pytest.FixtureRequest) -> str:
    """The URL of the session's cluster or Sentinel set."""
    found: ClusterSet | SentinelSet = request.getfixturevalue(f"redis_{request.param}")
    return found.url


@pytest.fixture
async def make_ha_store(ha_url: str) -> AsyncIterator[StoreFactory]:
    """Build stores ("replicas") on one deployment under one fresh key prefix."""
    prefix = f"test-{secrets.token_hex(4)}:"
    opened: list[RedisHistoryStore] = []

    def build(**options: Any) -> RedisHistoryStore:
        options.setdefault("key_prefix", prefix)
        options.setdefault("ttl_seconds", LONG_TTL)
        store = RedisHistoryStore(options.pop("url", ha_url), **options)
        opened.append(store)
        return store

    yield build
    for store in opened:
        await store.aclose()


@pytest.mark.parametrize("check", CONTRACT, ids=contract_id)
async def test_contract(make_ha_store: StoreFactory, check: Check) -> None:
    """The store keeps every promise of the HistoryStore contract on a cluster and behind
    Sentinels."""
    await check(make_ha_store())
