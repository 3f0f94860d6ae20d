"""`general_settings.store.url` read as a Redis deployment: one server, a Cluster or Sentinel.

    redis://[user[:password]@]host[:port][/db]        one Redis (also rediss://, unix://:
                                                       whatever redis-py's from_url takes)
    redis+cluster://[user[:password]@]host[:port][,host[:port]...]
                                                       a Redis Cluster: any of its nodes (the
                                                       client learns the others); database 0
    redis+sentinel://[user[:password]@]host[:port][,host[:port]...]/service[/db]
                                                       the primary the Sentinels at those
                                                       addresses name for `service`, followed
                                                       across failovers
    rediss+cluster://, rediss+sentinel://              the same over TLS

The userinfo is the data nodes' credentials. Sentinels that want credentials of their own take
`?sentinel_username=...&sentinel_password=...`. Ports default to 6379 (cluster nodes) and 26379
(Sentinels). A URL that cannot be read raises `ValueError` saying what to write instead; the
caller names the setting. `redact` hides every password before a URL is shown.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal
from urllib.parse import parse_qsl, unquote

__all__ = ["CLUSTER_SCHEMES", "SENTINEL_SCHEMES", "RedisTarget", "parse_redis_url", "redact"]

Mode = Literal["single", "cluster", "sentinel"]
CLUSTER_SCHEMES = ("redis+cluster", "rediss+cluster")
SENTINEL_SCHEMES = ("redis+sentinel", "rediss+sentinel")
CLUSTER_PORT = 6379
SENTINEL_PORT = 26379
_SENTINEL_OPTIONS = frozenset({"sentinel_username", "sentinel_password"})
_PASSWORD_PARAMETER = re.compile(r"(?i)([?&][a-z_]*password=)[^&#]*")


@dataclass(frozen=True, slots=True)
class RedisTarget:
    """Where the store's Redis is: the mode, the addresses and the credentials to use."""

    mode: Mode
    url: str
    """The URL as configured (secret: shown only through `redact`)."""
    hosts: tuple[tuple[str, int], ...] = ()
    """Cluster nodes or Sentinels to start from (empty for one Redis: `url` says it all)."""
    service: str = ""
    db: int = 0
    username: str | None = None
    password: str | None = None
    ssl: bool = False
    sentinel_username: str | None = None
    sentinel_password: str | None = None

    @property
    def follows_failover(self) -> bool:
        """Whether another server takes over when the primary fails (Cluster, Sentinel)."""
        return self.mode != "single"


def parse_redis_url(url: str) -> RedisTarget:
    """The deployment a store URL names; ValueError saying what is wrong with it."""
    scheme, sep, rest = url.partition("://")
    scheme = scheme.lower()
    if not sep or scheme not in CLUSTER_SCHEMES + SENTINEL_SCHEMES:
        return RedisTarget("single", url)
    rest, _, query = rest.partition("?")
    userinfo, at, where = rest.rpartition("@")  # a raw "@" in a password stays in userinfo
    netloc, _, path = where.partition("/")
    username, password = _credentials(userinfo) if at else (None, None)
    options = dict(parse_qsl(query, keep_blank_values=True))
    ssl = scheme.startswith("rediss")
    if scheme in CLUSTER_SCHEMES:
        if options:
            raise ValueError(f"a cluster URL takes no options, got {', '.join(sorted(options))}")
        if path.strip("/") not in ("", "0"):
            raise ValueError("a Redis Cluster has database 0 only: leave the path out")
        hosts = _hosts(netloc, CLUSTER_PORT)
        return RedisTarget("cluster", url, hosts, "", 0, username, password, ssl)
    unknown = set(options) - _SENTINEL_OPTIONS
    if unknown:
        raise ValueError(
            f"unknown option {', '.join(sorted(unknown))}; a Sentinel URL takes "
            f"{' and '.join(sorted(_SENTINEL_OPTIONS))}"
        )
    service, _, db = path.strip("/").partition("/")
    if not service:
        raise ValueError(
            "names no service: write redis+sentinel://host:26379[,host:port...]/<service>"
        )
    return RedisTarget(
        "sentinel", url, _hosts(netloc, SENTINEL_PORT), unquote(service), _db(db),
        username, password, ssl,
        options.get("sentinel_username") or None, options.get("sentinel_password") or None,
    )  # fmt: skip


def redact(url: str) -> str:
    """The URL with any password (userinfo or a `...password=` parameter) replaced by `***`."""
    scheme, sep, rest = url.partition("://")
    if sep and "@" in rest:
        userinfo, _, where = rest.rpartition("@")  # a raw "@" in a password stays hidden
        name, colon, _ = userinfo.partition(":")
        rest = f"{name}:***@{where}" if colon else rest
    return scheme + sep + _PASSWORD_PARAMETER.sub(r"\1***", rest)


def _credentials(userinfo: str) -> tuple[str | None, str | None]:
    name, colon, password = userinfo.partition(":")
    return unquote(name) or None, unquote(password) if colon else None


def _hosts(netloc: str, default_port: int) -> tuple[tuple[str, int], ...]:
    found: list[tuple[str, int]] = []
    for part in netloc.split(","):
        if not part:
            raise ValueError("names no host: write host:port[,host:port...] after ://")
        host, port = _host_port(part, default_port)
        found.append((host, port))
    return tuple(found)


def _host_port(part: str, default_port: int) -> tuple[str, int]:
    if part.startswith("["):  # [ipv6]:port
        host, _, tail = part[1:].partition("]")
        port_text = tail.removeprefix(":")
    else:
        host, _, port_text = part.rpartition(":") if ":" in part else (part, "", "")
    if not host:
        raise ValueError(f"{part!r} names no host")
    if not port_text:
        return host, default_port
    if not port_text.isdigit() or not 0 < int(port_text) < 65536:
        raise ValueError(f"{part!r}: the port must be a number from 1 to 65535")
    return host, int(port_text)


def _db(text: str) -> int:
    if not text:
        return 0
    if not text.isdigit():
        raise ValueError(f"the database after the service must be a number, got {text!r}")
    return int(text)
