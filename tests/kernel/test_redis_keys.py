"""The Redis store's key layout: one Redis keeps the old keys, a cluster tags them per bucket."""

from __future__ import annotations

import re

from hypothesis import given
from hypothesis import strategies as st

from kernel.records import DOCUMENTS, EXTRACTIONS, Kind
from kernel.redis_keys import CLUSTER_BUCKETS, KeyLayout


def test_one_redis_keeps_the_layout_of_every_release() -> None:
    """Without buckets the keys are those one Redis always had (an upgrade finds its data)."""
    layout = KeyLayout("overspill:")
    assert layout.record(EXTRACTIONS, "acme", "c-1") == "overspill:h:4:acme:c-1"
    assert layout.record(DOCUMENTS, "acme", "c-1") == "overspill:d:4:acme:c-1"
    assert layout.lock("acme", "c-1") == "overspill:lock:4:acme:c-1"
    assert layout.index(layout.bucket("acme", "c-1")) == "overspill:index"
    assert layout.pattern(EXTRACTIONS, "a*") == "overspill:h:2:a\\*:*"


def test_a_cluster_tags_every_key_of_a_conversation_with_its_bucket() -> None:
    """In a cluster the record, lock and index of a conversation carry one `{bucket}` tag."""
    layout = KeyLayout("overspill:", CLUSTER_BUCKETS)
    bucket = layout.bucket("acme", "c-1")
    keys = [
        layout.record(EXTRACTIONS, "acme", "c-1"),
        layout.record(DOCUMENTS, "acme", "c-1"),
        layout.lock("acme", "c-1"),
        layout.index(bucket),
    ]
    assert keys[0] == f"overspill:{{{bucket}}}h:4:acme:c-1"
    assert {re.search(r"\{(.*?)\}", key).group(1) for key in keys} == {str(bucket)}  # type: ignore[union-attr]
    assert layout.pattern(DOCUMENTS, None) == "overspill:{*}d:*"


def test_buckets_spread_conversations_evenly() -> None:
    """10,000 conversations fill every bucket, none with more than twice its share."""
    layout = KeyLayout("p:", CLUSTER_BUCKETS)
    counts = [0] * CLUSTER_BUCKETS
    for index in range(10_000):
        counts[layout.bucket("acme", f"conversation-{index}")] += 1
    assert min(counts) > 0
    assert max(counts) < 2 * 10_000 / CLUSTER_BUCKETS


def test_the_shares_of_the_bound_add_up_to_it() -> None:
    """Equal shares (the first ones one larger) add up to max_entries exactly."""
    layout = KeyLayout("p:", 8)
    assert [layout.share(bucket, 20) for bucket in range(8)] == [3, 3, 3, 3, 2, 2, 2, 2]
    assert sum(KeyLayout("p:", CLUSTER_BUCKETS).share(b, 32768) for b in range(1024)) == 32768


kinds = st.sampled_from([EXTRACTIONS, DOCUMENTS])
text = st.text(alphabet=st.characters(codec="utf-8"), max_size=12)


@given(kind=kinds, tenant=text, owner=text, prefix=text, buckets=st.sampled_from([1, 1024]))
def test_parse_gives_back_what_a_key_was_made_of(
    kind: Kind, tenant: str, owner: str, prefix: str, buckets: int
) -> None:
    """Every record key parses back to its kind, tenant and id (braces and colons included),
    and a lock or index key parses to nothing."""
    layout = KeyLayout(prefix, buckets)
    assert layout.parse(layout.record(kind, tenant, owner)) == (kind, tenant, owner)
    assert layout.parse(layout.lock(tenant, owner)) is None
    assert layout.parse(layout.index(layout.bucket(tenant, owner))) is None
