"""Where the Redis store keeps each record: keys, Cluster hash tags, and the size bound's buckets.

One Redis (or a Sentinel-managed primary), `buckets == 1`, the layout every release had:

    {prefix}h:<len(tenant)>:<tenant>:<id>       a record (`h:` extractions, `d:` documents...)
    {prefix}lock:<len(tenant)>:<tenant>:<id>    the conversation's single-flight lock
    {prefix}index                               the size bound's sorted set (member: a record key)

A Redis Cluster, `buckets == CLUSTER_BUCKETS`: the same keys behind a hash tag naming the
conversation's bucket, `crc32("<len>:<tenant>:<id>") % buckets`:

    {prefix}{417}h:4:acme:conv-1    {prefix}{417}lock:4:acme:conv-1    {prefix}{417}index

Every key of one conversation (each kind of record, its lock) carries the same tag, so they
share a slot: a fenced write checks the lock and writes the record and its bucket's index in
one script, which a cluster runs only when all its keys share a slot. The bucket's index and
its share of the size bound are on that slot too, so eviction is atomic as with one Redis; the
bound is split into equal shares (least recently stored within a bucket, instead of overall).
1,024 buckets spread over the cluster's 16,384 slots, a few hundred per primary on a cluster of
up to a few dozen primaries. The tag is the text between the first `{` and the next `}`: any
key prefix works (one holding a whole `{...}` puts every key on one slot). Keys without a
conversation: `{prefix}c:<model>` (calibration) and `{prefix}ping`, each a key on its own.
"""

from __future__ import annotations

import re
import zlib

from kernel.records import TENANT_KINDS, Kind
from kernel.store import key_of, prefix_of

__all__ = ["CLUSTER_BUCKETS", "KeyLayout", "glob_escape"]

CLUSTER_BUCKETS = 1024
LOCK = "lock:"
_TAG = re.compile(r"\{(\d+)\}")


class KeyLayout:
    """The keys of one deployment: its prefix and how many buckets bound its size."""

    __slots__ = ("buckets", "prefix")

    def __init__(self, prefix: str, buckets: int = 1) -> None:
        if buckets < 1:
            raise ValueError(f"buckets must be positive, got {buckets}")
        self.prefix = prefix
        self.buckets = buckets

    def bucket(self, tenant: str, owner: str) -> int:
        """The bucket of a conversation (or of a record that belongs to none)."""
        if self.buckets == 1:
            return 0
        return zlib.crc32(key_of("", tenant, owner).encode()) % self.buckets

    def record(self, kind: Kind, tenant: str, owner: str) -> str:
        """A record's key."""
        return self._in(self.bucket(tenant, owner), key_of(kind.key, tenant, owner))

    def lock(self, tenant: str, owner: str) -> str:
        """The single-flight lock's key, on the conversation's slot."""
        return self._in(self.bucket(tenant, owner), key_of(LOCK, tenant, owner))

    def index(self, bucket: int) -> str:
        """The sorted set that bounds a bucket's records."""
        return self._in(bucket, "index")

    def share(self, bucket: int, max_records: int) -> int:
        """A bucket's share of the bound: equal shares that add up to `max_records`."""
        return max_records // self.buckets + (bucket < max_records % self.buckets)

    def pattern(self, kind: Kind, tenant: str | None) -> str:
        """A SCAN pattern that finds the kind's keys of a tenant (of all when None); it may
        find others too: check each with `parse`."""
        tag = "" if self.buckets == 1 else "{*}"
        return glob_escape(self.prefix) + tag + glob_escape(prefix_of(kind.key, tenant)) + "*"

    def parse(self, key: str) -> tuple[Kind, str, str] | None:
        """(kind, tenant, id) of a record key of this layout; None for any other key."""
        if not key.startswith(self.prefix):
            return None
        rest = key[len(self.prefix) :]
        if self.buckets > 1:
            tag = _TAG.match(rest)
            if tag is None:
                return None
            rest = rest[tag.end() :]
        for kind in TENANT_KINDS:
            if rest.startswith(kind.key):
                found = _split(rest[len(kind.key) :])
                if found is not None and self.record(kind, *found) == key:
                    return kind, *found
        return None

    def calibration(self, model: str) -> str:
        """A model's calibration samples."""
        return f"{self.prefix}c:{model}"

    def ping(self) -> str:
        """The readiness probe's key."""
        return f"{self.prefix}ping"

    def _in(self, bucket: int, rest: str) -> str:
        return self.prefix + rest if self.buckets == 1 else f"{self.prefix}{{{bucket}}}{rest}"


def glob_escape(text: str) -> str:
    """`text` as a literal in a Redis MATCH pattern."""
    return re.sub(r"([\\*?\[\]])", r"\\\1", text)


def _split(body: str) -> tuple[str, str] | None:
    """(tenant, id) of `<len>:<tenant>:<id>`; None when it is not that."""
    length, colon, rest = body.partition(":")
    if not colon or not (length.isascii() and length.isdigit()) or len(rest) <= int(length):
        return None
    size = int(length)
    if rest[size] != ":":
        return None
    return rest[:size], rest[size + 1 :]
