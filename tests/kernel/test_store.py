"""Tests for kernel.store: the history entry record, the diskcache store, single flight."""

from __future__ import annotations

import asyncio
import logging
import sqlite3
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import diskcache.core
import orjson
import pytest
from pydantic import ValidationError

from kernel.config import StoreSettings
from kernel.config_loading import ConfigError, parse_config
from kernel.estimator import Estimator
from kernel.records import StoredFact, stored_facts
from kernel.store import SQLITE_CACHE_PAGES, DiskHistoryStore, HistoryEntry, StoreError
from proxy.stores import open_store
from tests.kernel.store_contract import (
    CONTRACT,
    Check,
    contract_id,
    make_batches,
    make_entry,
    make_response,
)

TTL = 3600.0


class Clock:
    """A settable unix clock."""

    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        """Move time forward."""
        self.now += seconds


@pytest.fixture
def clock() -> Clock:
    """A clock that starts at the real time (diskcache stamps expiry with time.time)."""
    return Clock(time.time())


@pytest.fixture
async def store(tmp_path: Path, clock: Clock) -> AsyncIterator[DiskHistoryStore]:
    """A store in a fresh directory, closed afterwards."""
    opened = DiskHistoryStore(tmp_path / "store", ttl_seconds=TTL, clock=clock)
    yield opened
    await opened.aclose()


@pytest.fixture
def disk_clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    """A fake clock that diskcache itself reads (store, expiry and eviction times)."""
    fake = Clock(1_000_000.0)
    monkeypatch.setattr(diskcache.core, "time", SimpleNamespace(time=fake, sleep=time.sleep))
    return fake


# --- the record ----------------------------------------------------------------------------


def test_entry_round_trips_through_json() -> None:
    """from_json(to_json(e)) == e."""
    entry = make_entry(extraction="naïve — 🚀")
    assert HistoryEntry.from_json(entry.to_json()) == entry


def test_integer_created_at_is_accepted() -> None:
    """A whole-number created_at written by another writer decodes as a float."""
    record = orjson.loads(make_entry().to_json())
    record["created_at"] = 1_700_000_000
    assert HistoryEntry.from_json(orjson.dumps(record)).created_at == 1_700_000_000.0


def test_an_entry_written_before_strategies_reads_as_an_extraction() -> None:
    """A stored entry without the `strategy` field decodes, made by `extract`."""
    record = orjson.loads(make_entry().to_json())
    del record["strategy"]
    assert HistoryEntry.from_json(orjson.dumps(record)).strategy == "extract"


def test_an_entry_written_before_ledger_records_decodes_with_none() -> None:
    """A stored entry without `notes` and `facts` (before x27) decodes with empty ones."""
    record = orjson.loads(make_entry().to_json())
    del record["notes"], record["facts"]
    record["v"] = 1
    entry = HistoryEntry.from_json(orjson.dumps(record))
    assert (entry.notes, entry.records()) == ("", ())


FACTS = (
    StoredFact(role="user", text="Our code is ZX-4471.", score=9, index=3, rule="said"),
    StoredFact(role="merged(4 facts)", text="`8443`", score=1, terms=("8443",), count=4),
    StoredFact(
        role="tool(read_file)", text="port = 8443", score=5, rule="settings", index=7,
        source="read_file app.toml", focused=True, confirmed="Yes, 8443.", asked="Which port?",
        supersedes="port = 80", left_out=2,
    ),
)  # fmt: skip


def test_an_entry_keeps_its_ledger_records_through_json() -> None:
    """The notes and the quoted facts' records come back field for field."""
    entry = make_entry(notes="- the trip", facts=stored_facts(FACTS))
    read = HistoryEntry.from_json(entry.to_json())
    assert (read, read.records()) == (entry, FACTS)


def test_a_ledger_record_is_stored_as_its_values_without_trailing_defaults() -> None:
    """A record is stored as an array of its values in field order, those at their defaults
    at the end left out, and reads back with them."""
    fact = StoredFact(role="user", text="Our code is ZX-4471.", score=9, index=3)
    stored = orjson.loads(make_entry(facts=stored_facts([fact])).to_json())["facts"]
    assert orjson.loads(stored) == [["user", "Our code is ZX-4471.", 9, "", 3]]
    assert make_entry(facts=stored).records() == (fact,)


def test_a_format_1_entry_decodes_with_its_records() -> None:
    """An entry stored before format 2 (its facts an array of objects) decodes, and its
    records read back the same; it is written back as format 2."""
    record = orjson.loads(make_entry().to_json())
    record |= {"v": 1, "facts": [fact.model_dump(exclude_defaults=True) for fact in FACTS]}
    entry = HistoryEntry.from_json(orjson.dumps(record))
    assert entry.records() == FACTS
    assert orjson.loads(entry.to_json())["v"] == 2


def test_a_format_1_entry_whose_facts_are_not_an_array_is_a_store_error() -> None:
    """A format 1 entry's facts must be an array: anything else is a corrupt record."""
    record = orjson.loads(make_entry().to_json()) | {"v": 1, "facts": "[]"}
    with pytest.raises(StoreError, match="facts: a format 1 entry keeps its facts as an array"):
        HistoryEntry.from_json(orjson.dumps(record))


def test_an_entry_decodes_without_validating_its_ledger_records() -> None:
    """Reading an entry (what a splice needs) does not validate its records: an entry whose
    facts are corrupt decodes whole, and its records are a StoreError when asked for."""
    record = orjson.loads(make_entry().to_json()) | {"facts": '[["user"]]'}
    entry = HistoryEntry.from_json(orjson.dumps(record))
    assert entry.extraction == make_entry().extraction
    with pytest.raises(StoreError, match=r"HistoryEntry record: facts\.0\.text: Field required"):
        entry.records()


@pytest.mark.parametrize(
    ("change", "problem"),
    [
        (lambda r: {**r, "score": "9"}, "score: .* integer"),
        (lambda r: {**r, "score": 9.0}, "score: .* integer"),
        (lambda r: {**r, "focused": 1}, "focused: .* boolean"),
        (lambda r: {**r, "count": 0}, "count: .* greater than or equal to 1"),
        (lambda r: {**r, "index": -2}, "index: .* greater than or equal to -1"),
        (lambda r: {**r, "role": ""}, "role: .* at least 1"),
        (lambda r: {**r, "terms": [8443]}, "terms.0: .* string"),
    ],
)
@pytest.mark.parametrize("shape", ["row", "object"])
def test_a_bad_ledger_record_is_a_store_error(
    change: Callable[[dict[str, Any]], dict[str, Any]], problem: str, shape: str
) -> None:
    """A stored fact record that does not validate, stored as a row or (format 1) as an
    object, makes the entry's records a StoreError naming it."""
    fields = change(FACTS[0].model_dump())
    stored = list(fields.values()) if shape == "row" else fields
    entry = make_entry(facts=orjson.dumps([stored]).decode())
    with pytest.raises(StoreError, match=f"facts.0.{problem}"):
        entry.records()


@pytest.mark.parametrize(
    ("facts", "problem"),
    [
        ("[[", "facts: not JSON"),
        ('{"role": "user"}', "facts: Input should be a valid tuple"),
        ('["user"]', "facts.0: Input should be a valid dictionary or instance of StoredFact"),
        ('[{"role": "user", "text": "x", "score": 9, "why": 1}]', "facts.0.why: Extra inputs"),
        (orjson.dumps([[*FACTS[2].row(), 1]]).decode(), "facts.0: 14 values for 13 fields"),
    ],
)
def test_a_corrupt_facts_array_is_a_store_error(facts: str, problem: str) -> None:
    """Facts that are not an array of records make the entry's records a StoreError."""
    with pytest.raises(StoreError, match=problem):
        make_entry(facts=facts).records()


@pytest.mark.parametrize(
    ("change", "problem"),
    [
        (lambda r: b"{not json", "Invalid JSON"),
        (lambda r: orjson.dumps([r]), "should be an object"),
        (lambda r: orjson.dumps({**r, "v": 3}), "v: Input should be 2"),
        (lambda r: orjson.dumps({k: v for k, v in r.items() if k != "chain"}), "chain: Field"),
        (lambda r: orjson.dumps({**r, "message_count": "12"}), "message_count: .* integer"),
        (lambda r: orjson.dumps({**r, "tokens_after": True}), "tokens_after: .* integer"),
        (lambda r: orjson.dumps({**r, "historical_end_index": 13}), "outside 0..message_count"),
        (lambda r: orjson.dumps({**r, "surprise": 1}), "surprise: Extra inputs"),
        (lambda r: orjson.dumps({k: v for k, v in r.items() if k != "v"}), "no format version"),
        (lambda r: orjson.dumps(r).replace(b"1700000000.0", b"NaN"), "finite number"),
    ],
)
def test_corrupt_records_raise_store_error(
    change: Callable[[dict[str, Any]], bytes], problem: str
) -> None:
    """A record that is not a valid entry raises StoreError saying what is wrong."""
    record = orjson.loads(make_entry().to_json())
    with pytest.raises(StoreError, match=problem):
        HistoryEntry.from_json(change(record))


def test_entry_rejects_end_past_message_count() -> None:
    """An entry cannot summarise more messages than its request had."""
    with pytest.raises(ValueError, match="historical_end_index"):
        make_entry(historical_end_index=13, message_count=12)


# --- get / put / delete --------------------------------------------------------------------


async def test_entries_survive_reopening(tmp_path: Path) -> None:
    """The store is persistent: another instance on the same directory reads the entry."""
    first = DiskHistoryStore(tmp_path / "s")
    await first.put(make_entry())
    await first.aclose()
    second = DiskHistoryStore(tmp_path / "s")
    try:
        assert await second.get("acme", "conv-1") == make_entry()
    finally:
        await second.aclose()


# --- atomicity and corruption --------------------------------------------------------------


async def test_failed_write_rolls_back(
    store: DiskHistoryStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A failure inside the write transaction (after the row changed) leaves the old entry."""
    await store.put(make_entry())

    def fail(*args: object, **kwargs: object) -> None:
        raise sqlite3.OperationalError("disk I/O error")

    monkeypatch.setattr(store._cache, "_cull", fail)
    with pytest.raises(StoreError, match=r"cannot write .* disk I/O error"):
        await store.put(make_entry(extraction="half-written"))
    monkeypatch.undo()
    assert await store.get("acme", "conv-1") == make_entry()


async def test_corrupt_record_is_a_logged_miss_and_deleted(
    store: DiskHistoryStore, caplog: pytest.LogCaptureFixture
) -> None:
    """A record that does not decode is logged, deleted and reported as a miss."""
    await store.put(make_entry())
    key = "h:4:acme:conv-1"
    assert store._cache.set(key, b'{"v": 1, "tenant": ')
    with caplog.at_level(logging.WARNING, logger="overspill.store"):
        assert await store.get("acme", "conv-1") is None
    assert "corrupt history record" in caplog.text
    assert key not in store._cache


async def test_corrupt_batches_are_a_miss_and_deleted(store: DiskHistoryStore) -> None:
    """Batches that do not validate (a field of the wrong type) are a miss and are deleted."""
    key = "d:4:acme:conv-1"
    record = make_batches().to_json().replace(b'"position":1', b'"position":"1"')
    assert store._cache.set(key, record)
    assert await store.get_batches("acme", "conv-1") is None
    assert key not in store._cache


ONE_MODEL = "model_list:\n  - {model_name: local, litellm_params: {model: openai/smollm2}}\n"


async def test_batches_and_calibration_survive_reopening(tmp_path: Path) -> None:
    """A restart keeps the document batches and what was learned about each model."""
    first = DiskHistoryStore(tmp_path / "s")
    await first.put_batches(make_batches())
    await first.add_calibration("local", 1.25)
    await first.aclose()
    second = DiskHistoryStore(tmp_path / "s")
    try:
        assert await second.get_batches("acme", "conv-1") == make_batches()
        entry = parse_config(ONE_MODEL, "c", {}).settings.model_list[0]
        assert await Estimator(second).scale(entry) == 1.25
    finally:
        await second.aclose()


async def test_sqlite_keeps_a_small_page_cache(store: DiskHistoryStore) -> None:
    """SQLite is told to cache 4 MiB of pages, not diskcache's 32 MiB per connection."""
    await store.put(make_entry())
    pages = store._cache._sql("PRAGMA cache_size").fetchone()[0]
    assert pages == SQLITE_CACHE_PAGES == 1024


async def test_calibration_samples_expire_with_the_ttl(store: DiskHistoryStore) -> None:
    """A model's samples carry the store's TTL, renewed by each new sample."""
    await store.add_calibration("local", 1.1)
    _, expire_time = store._cache.get("c:local", expire_time=True)
    assert expire_time is not None


async def test_record_under_wrong_key_is_a_miss(store: DiskHistoryStore) -> None:
    """A record whose tenant/id differ from its key is never returned."""
    store._cache.set("h:4:acme:conv-1", make_entry(tenant="evil").to_json())
    assert await store.get("acme", "conv-1") is None


async def test_non_bytes_record_is_a_miss(store: DiskHistoryStore) -> None:
    """A value of another type under a history key is treated as corrupt."""
    store._cache.set("h:4:acme:conv-1", 42)
    assert await store.get("acme", "conv-1") is None
    assert await store.entries() == []


# --- expiry and size -----------------------------------------------------------------------


async def test_entry_expires_after_ttl_by_injected_clock(
    store: DiskHistoryStore, clock: Clock
) -> None:
    """An entry is served until ttl_seconds have passed on the store's clock, then missed."""
    await store.put(make_entry())
    clock.advance(TTL - 1)
    assert await store.get("acme", "conv-1") is not None
    clock.advance(2)
    assert await store.get("acme", "conv-1") is None
    assert await store.entries() == []


async def test_each_kind_expires_after_its_own_ttl(tmp_path: Path, clock: Clock) -> None:
    """ttl_by_kind gives document batches and calibration their own TTL; extractions keep
    ttl_seconds."""
    ttls = {"documents": 60.0, "calibration": 30.0}
    store = DiskHistoryStore(tmp_path / "s", ttl_seconds=TTL, ttl_by_kind=ttls, clock=clock)
    try:
        await store.put(make_entry())
        await store.put_batches(make_batches())
        await store.add_calibration("local", 1.1)
        _, samples_expire = store._cache.get("c:local", expire_time=True)
        assert samples_expire is not None
        assert samples_expire - time.time() <= 30
        clock.advance(61)
        assert await store.get_batches("acme", "conv-1") is None
        assert await store.get("acme", "conv-1") == make_entry()
    finally:
        await store.aclose()


def test_store_settings_name_an_unknown_kind() -> None:
    """A TTL for a kind the store does not keep is a config error naming the setting and the
    kinds there are."""
    text = "model_list: []\ngeneral_settings:\n  store: {ttl_seconds_by_kind: {chats: 5}}\n"
    with pytest.raises(ConfigError) as caught:
        parse_config(text, "config.yaml", {})
    found = " ".join(caught.value.problems)
    assert "general_settings.store.ttl_seconds_by_kind" in found
    assert "unknown kind chats; kinds: extractions, documents, responses, calibration" in found


async def test_diskcache_expires_and_removes_entries(tmp_path: Path, disk_clock: Clock) -> None:
    """The TTL is diskcache's `expire=`: past it, the entry is gone and culled from disk."""
    store = DiskHistoryStore(tmp_path / "s", ttl_seconds=60, clock=disk_clock)
    try:
        await store.put(make_entry())
        disk_clock.advance(59)
        assert await store.get("acme", "conv-1") is not None
        disk_clock.advance(2)
        assert await store.get("acme", "conv-1") is None
        assert store._cache.expire() == 1
    finally:
        await store.aclose()


async def test_size_limit_evicts_least_recently_stored(tmp_path: Path, disk_clock: Clock) -> None:
    """Past size_limit_bytes, the oldest-written entries go and the newest stay."""
    limit = 1 << 20
    store = DiskHistoryStore(tmp_path / "s", size_limit_bytes=limit, clock=disk_clock)
    try:
        for index in range(80):
            disk_clock.advance(1)
            await store.put(make_entry(conversation_id=f"c{index}", extraction="x" * 30_000))
        kept = {entry.conversation_id for entry in await store.entries()}
        assert "c0" not in kept
        assert {f"c{index}" for index in range(70, 80)} <= kept
        assert len(kept) < 80
        assert store._cache.volume() <= limit + 11 * 32 * 1024
    finally:
        await store.aclose()


# --- health and lifecycle ------------------------------------------------------------------


async def test_ping_succeeds_on_a_working_store(store: DiskHistoryStore) -> None:
    """ping returns quietly when the store can be written and read."""
    await store.ping()


async def test_ping_raises_store_error_when_writes_fail(
    store: DiskHistoryStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """ping raises StoreError naming the store's path when the backend fails."""

    def fail(*args: object, **kwargs: object) -> None:
        raise sqlite3.OperationalError("database or disk is full")

    monkeypatch.setattr(store._cache, "set", fail)
    with pytest.raises(StoreError, match=str(store.path)):
        await store.ping()


async def test_aclose_twice_is_harmless(tmp_path: Path) -> None:
    """Closing an already closed store does nothing."""
    store = DiskHistoryStore(tmp_path / "s")
    await store.aclose()
    await store.aclose()


def test_rejects_non_positive_limits(tmp_path: Path) -> None:
    """A zero TTL or size limit is a programming error."""
    with pytest.raises(ValueError, match="ttl_seconds"):
        DiskHistoryStore(tmp_path / "s", ttl_seconds=0)
    with pytest.raises(ValueError, match="size_limit_bytes"):
        DiskHistoryStore(tmp_path / "s", size_limit_bytes=0)


def test_unopenable_directory_raises_store_error(tmp_path: Path) -> None:
    """A store path that is a file raises StoreError naming it."""
    (tmp_path / "file").write_text("x")
    with pytest.raises(StoreError, match="cannot open the history store"):
        DiskHistoryStore(tmp_path / "file")


# --- open_store ----------------------------------------------------------------------------


async def test_open_store_resolves_relative_path_under_base_dir(tmp_path: Path) -> None:
    """A relative path is created under base_dir."""
    store = open_store(StoreSettings(path="var/store"), base_dir=str(tmp_path))
    try:
        assert isinstance(store, DiskHistoryStore)
        assert store.path == tmp_path / "var" / "store"
        assert store.path.is_dir()
        assert store.ttl_seconds == 7 * 24 * 3600
    finally:
        await store.aclose()


def test_open_store_names_config_key_when_path_unusable(tmp_path: Path) -> None:
    """A path that cannot be created raises StoreError naming general_settings.store.path."""
    (tmp_path / "file").write_text("x")
    settings = StoreSettings(path=str(tmp_path / "file" / "store"))
    with pytest.raises(StoreError, match=r"general_settings\.store\.path"):
        open_store(settings)


# --- single flight -------------------------------------------------------------------------


def test_entry_is_frozen() -> None:
    """Entries cannot be changed in place."""
    with pytest.raises(ValidationError, match="frozen"):
        make_entry().tenant = "other"


@pytest.mark.parametrize("check", CONTRACT, ids=contract_id)
async def test_disk_store_keeps_the_store_contract(store: DiskHistoryStore, check: Check) -> None:
    """The disk store passes the same behaviour checks as every other backend."""
    await check(store)


async def test_response_writes_of_one_loop_iteration_share_one_transaction(
    store: DiskHistoryStore,
) -> None:
    """Concurrent response writes go to the writer thread together and all land."""
    groups: list[int] = []
    write = store._write_group

    def counted(writes: list[tuple[str, bytes, float]]) -> None:
        groups.append(len(writes))
        write(writes)

    store._grouped._write = counted
    records = [make_response(id=f"r{n}") for n in range(8)]
    await asyncio.gather(*(store.put_response(record) for record in records))
    assert groups == [8]
    found = await store.get_responses("acme", [f"r{n}" for n in range(8)])
    assert found == records


async def test_a_failed_group_write_fails_every_writer(store: DiskHistoryStore) -> None:
    """When the group's transaction fails, each of its writers gets the StoreError."""

    def broken(writes: list[tuple[str, bytes, float]]) -> None:
        raise OSError("disk full")

    store._grouped._write = broken
    outcomes = await asyncio.gather(
        *(store.put_response(make_response(id=f"r{n}")) for n in range(3)),
        return_exceptions=True,
    )
    assert all(isinstance(outcome, StoreError) for outcome in outcomes)
    assert "disk full" in str(outcomes[0])
