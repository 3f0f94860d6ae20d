"""general_settings.store.url read as one Redis, a Redis Cluster or a Sentinel set."""

from __future__ import annotations

from types import SimpleNamespace
from typing import cast

import pytest
from pydantic import SecretStr

from kernel.config import StoreSettings
from kernel.records import StoreError
from kernel.redis_url import RedisTarget, parse_redis_url, redact
from kernel.store_redis import open_redis_store


@pytest.mark.parametrize(
    "url", ["redis://127.0.0.1:6379/0", "rediss://u:p@h", "unix:///run/redis.sock", "h:1"]
)
def test_other_urls_are_one_redis_for_redis_py(url: str) -> None:
    """A URL of no cluster or Sentinel scheme is one Redis, left whole for redis-py."""
    assert parse_redis_url(url) == RedisTarget("single", url)


def test_a_cluster_url_names_its_startup_nodes_and_credentials() -> None:
    """redis+cluster:// takes any nodes (port 6379 by default) and percent-encoded credentials."""
    found = parse_redis_url("redis+cluster://app:p%40ss@10.0.0.1:7000,node-b,[::1]:7001/")
    assert found.mode == "cluster"
    assert found.hosts == (("10.0.0.1", 7000), ("node-b", 6379), ("::1", 7001))
    assert (found.username, found.password, found.ssl) == ("app", "p@ss", False)
    assert parse_redis_url("rediss+cluster://h:1").ssl
    assert parse_redis_url("REDIS+CLUSTER://h:1").mode == "cluster"


def test_a_sentinel_url_names_its_service_database_and_sentinel_credentials() -> None:
    """redis+sentinel:// takes Sentinels (port 26379 by default), the service, a database and
    the Sentinels' own credentials."""
    found = parse_redis_url(
        "redis+sentinel://:pw@s1:26380,s2/my%20primary/2?sentinel_password=sp&sentinel_username=su"
    )
    assert found.mode == "sentinel"
    assert found.hosts == (("s1", 26380), ("s2", 26379))
    assert (found.service, found.db) == ("my primary", 2)
    assert (found.username, found.password) == (None, "pw")
    assert (found.sentinel_username, found.sentinel_password) == ("su", "sp")
    assert found.follows_failover
    assert not parse_redis_url("redis://h").follows_failover


@pytest.mark.parametrize(
    ("url", "problem"),
    [
        ("redis+cluster://h:1/3", "database 0 only"),
        ("redis+cluster://h:1?timeout=3", "takes no options, got timeout"),
        ("redis+cluster://", "names no host"),
        ("redis+cluster://h:1,,h:2", "names no host"),
        ("redis+cluster://h:port", "the port must be a number"),
        ("redis+cluster://h:70000", "the port must be a number"),
        ("redis+cluster://:7000", "names no host"),
        ("redis+sentinel://s1:26379", "names no service"),
        ("redis+sentinel://s1/svc/x", "must be a number"),
        ("redis+sentinel://s1/svc?password=x", "unknown option password"),
    ],
)
def test_a_url_that_cannot_be_used_says_what_to_write(url: str, problem: str) -> None:
    """Each unusable cluster or Sentinel URL is a ValueError saying what is wrong."""
    with pytest.raises(ValueError, match=problem):
        parse_redis_url(url)


def test_open_redis_store_names_the_setting_and_hides_the_password() -> None:
    """An unusable URL stops startup with a message naming general_settings.store.url, the
    password redacted."""
    settings = SimpleNamespace(backend="redis", url=SecretStr("redis+sentinel://u:s3cret@s1:1"))
    with pytest.raises(StoreError) as caught:
        open_redis_store(cast(StoreSettings, settings))
    message = str(caught.value)
    assert message.startswith("general_settings.store.url (redis+sentinel://u:***@s1:1)")
    assert "names no service" in message
    assert "s3cret" not in message


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("redis+cluster://u:pw@h1:1,h2:2", "redis+cluster://u:***@h1:1,h2:2"),
        (
            "redis+sentinel://:pw@s1,s2/svc?sentinel_password=sp&x=1",
            "redis+sentinel://:***@s1,s2/svc?sentinel_password=***&x=1",
        ),
    ],
)
def test_redact_hides_every_password_of_a_cluster_or_sentinel_url(url: str, shown: str) -> None:
    """The data nodes' and the Sentinels' passwords are both hidden."""
    assert redact(url) == shown
