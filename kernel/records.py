"""What the store keeps, as validated records: one kind of state per record type.

    HistoryEntry      a cached extraction of one conversation's older turns     kind extractions
    DocumentBatches   the document batches placed in a conversation's turns    kind documents
    StoredResponse    one Responses API response, a link of its chain          kind responses
    (calibration)     a model's token-ratio samples, a plain list of floats    kind calibration

Records are frozen pydantic models in strict mode (an `int` field takes no bool, no string)
with unknown fields refused; each is stored as its JSON with a format version `v`. A stored
record that does not validate is a `StoreError` saying what is wrong, which the backends treat
as a corrupt record: logged, deleted, a miss. One part is validated later: an entry's ledger
records, kept as JSON text that only a growth reads (`HistoryEntry.records`, a StoreError
too: the condenser logs it and grows as on a miss), so a turn that only splices the cached
extraction in never pays for them.

A `Kind` names a record type for the backends: its name (the config's per-kind TTLs), the
letter its keys start with and the model it decodes to. Every record belongs to a tenant and is
keyed by its `key_id`: its conversation's id, or (a response) its own id. The backends build
every key, lock and size bound from (kind, tenant, key_id) alone, so a new kind needs only its
entry in `TENANT_KINDS`: its keys share their owner's Redis Cluster hash tag
(kernel/redis_keys.py), and clear, listing, TTL and the size bound cover it; a kind in
`CONVERSATION_KINDS` also goes when its conversation is deleted.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Literal, TypeVar

import orjson
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    TypeAdapter,
    ValidationError,
    ValidationInfo,
    model_validator,
)
from pydantic_core import PydanticSerializationError

__all__ = [
    "ANCESTORS_KEPT",
    "CALIBRATION",
    "CALIBRATION_SAMPLES",
    "CONVERSATION_KINDS",
    "DEFAULT_TTLS",
    "DOCUMENTS",
    "EXTRACTIONS",
    "RESPONSES",
    "RETAINED",
    "TENANT_KINDS",
    "DocumentBatches",
    "HistoryEntry",
    "Kind",
    "Record",
    "StoreError",
    "StoredBatch",
    "StoredFact",
    "StoredResponse",
    "decode",
    "read_facts",
    "stored_facts",
]

ANCESTORS_KEPT = 64
"""How many of its nearest earlier links a stored response names (StoredResponse.ancestors)."""
CALIBRATION_SAMPLES = 16
"""A model's newest calibration samples kept (the moving average forgets older ones)."""
_R = TypeVar("_R", bound="Record")
STORED: dict[str, bool] = {"stored": True}
"""Validation context of records read back from the store."""


class StoreError(Exception):
    """The store cannot be used, or a record in it is unusable; the message says what."""


class Record(BaseModel):
    """A stored record: frozen, strict, no unknown fields, with its format version."""

    model_config = ConfigDict(frozen=True, extra="forbid", strict=True, allow_inf_nan=False)

    v: Literal[1] = 1
    tenant: str
    conversation_id: str

    @model_validator(mode="before")
    @classmethod
    def _stored_carries_its_version(cls, data: Any, info: ValidationInfo) -> Any:
        """A record read back from the store must say which format it is."""
        if info.context is STORED and isinstance(data, dict) and "v" not in data:
            raise ValueError("no format version (v)")
        return data

    @property
    def key_id(self) -> str:
        """The id its key ends with (after the kind and the tenant): its conversation's."""
        return self.conversation_id

    def to_json(self) -> bytes:
        """The record as stored; raises StoreError when it cannot be serialised."""
        try:
            return self.model_dump_json().encode()
        except PydanticSerializationError as exc:
            raise StoreError(f"cannot serialise the {type(self).__name__} record: {exc}") from None

    @classmethod
    def from_json(cls: type[_R], raw: bytes) -> _R:
        """Decode a stored record; raises StoreError saying what is wrong with it."""
        return decode(cls, raw)


class StoredFact(BaseModel):
    """One record of an extraction's fact ledger (middleware/condensing/ledger/records.py's
    `Fact`, field for field): what a growth reads back instead of the rendered text.

    Stored as a JSON array of its values in the order declared here (`row`), without the
    trailing ones at their defaults: the fields most records set come first. A new field goes
    at the end (an older array then reads it as its default); reordering or removing one is
    a new format (`HistoryEntry.v`). Format 1 entries stored each as an object naming its
    fields (`HistoryEntry.records` reads both)."""

    model_config = ConfigDict(frozen=True, extra="forbid", strict=True, allow_inf_nan=False)

    role: str = Field(min_length=1)
    text: str
    score: int
    rule: str = ""
    index: int = Field(default=-1, ge=-1)
    source: str = ""
    focused: bool = False
    confirmed: str = ""
    asked: str = ""
    supersedes: str = ""
    terms: tuple[str, ...] = Field(default=(), strict=False)
    """(A stored JSON array of strings.)"""
    count: int = Field(default=1, ge=1)
    left_out: int = Field(default=0, ge=0)

    def row(self) -> list[Any]:
        """The record as stored: its values in field order, the trailing defaults left out."""
        fields = list(type(self).model_fields.values())
        values = [getattr(self, name) for name in type(self).model_fields]
        while not fields[len(values) - 1].is_required() and (
            values[-1] == fields[len(values) - 1].default
        ):
            values.pop()
        return values


_FACTS: TypeAdapter[tuple[StoredFact, ...]] = TypeAdapter(tuple[StoredFact, ...])
_FACT_FIELDS = tuple(StoredFact.model_fields)


def stored_facts(facts: Iterable[StoredFact]) -> str:
    """Ledger records as a `HistoryEntry` keeps them (`HistoryEntry.records` reads them)."""
    return orjson.dumps([fact.row() for fact in facts]).decode()


class HistoryEntry(Record):
    """One cached extraction: `messages[:historical_end_index]` condensed into `extraction`,
    with what it was made of: its `notes` and the `facts` its ledger quotes.

    Format 2 keeps the facts as JSON text, decoded and validated by `records` when a growth
    starts from the entry, never on the reads that only splice `extraction` in (every turn of
    a long conversation; bench/micro/test_store.py measures both). Format 1 stored them as an
    array of objects, each validated on every read: such an entry still decodes (its array
    becomes the text, validated by `records` alike)."""

    v: Literal[2] = 2  # type: ignore[assignment]  # Record's 1: this kind's format is 2
    model_id: str
    historical_end_index: int = Field(ge=0)
    message_count: int = Field(ge=0)
    extraction: str
    chain: str
    prompt_version: str
    tokens_before: int = Field(ge=0)
    tokens_after: int = Field(ge=0)
    created_at: float
    strategy: str = "extract"
    """What made `extraction` (a condensing strategy's name); entries written before the
    field existed read as `extract`."""
    notes: str = ""
    """The notes section of `extraction` (a model's notes, or a masked or cut transcript)."""
    facts: str = "[]"
    """The ledger's records `extraction` renders, the merged line among them, which the next
    growth reads back: a JSON array of `StoredFact.row`s as text (`stored_facts`), read by
    `records`. Entries written before the field existed decode with none; their prompt
    version keeps them from reuse."""

    @model_validator(mode="before")
    @classmethod
    def _format_1(cls, data: Any) -> Any:
        """A format 1 entry read as format 2: its facts array as text, not validated yet."""
        if not isinstance(data, dict) or data.get("v") != 1:
            return data
        facts = data.get("facts", [])
        if not isinstance(facts, list):
            raise ValueError("facts: a format 1 entry keeps its facts as an array")
        return {**data, "v": 2, "facts": orjson.dumps(facts).decode()}

    @model_validator(mode="after")
    def _end_within_count(self) -> HistoryEntry:
        if self.historical_end_index > self.message_count:
            raise ValueError(
                f"historical_end_index {self.historical_end_index} is outside "
                f"0..message_count ({self.message_count})"
            )
        return self

    def records(self) -> tuple[StoredFact, ...]:
        """The ledger's records, each validated strictly; raises StoreError naming the first
        that does not validate (the entry's `extraction` stays usable: only a growth needs
        them)."""
        return read_facts(self.facts, type(self).__name__)


def read_facts(facts: str, owner: str = "HistoryEntry") -> tuple[StoredFact, ...]:
    """Ledger records kept as `HistoryEntry.facts` keeps them, each validated strictly;
    raises StoreError naming the first that does not validate (as `owner`'s record)."""
    try:
        rows = orjson.loads(facts)
        if isinstance(rows, list):
            rows = [_fields(at, row) for at, row in enumerate(rows)]
        return _FACTS.validate_python(rows)
    except orjson.JSONDecodeError as exc:
        problem = f"facts: not JSON ({exc})"
    except ValidationError as exc:
        problem = _problem(exc, "facts")
    except ValueError as exc:  # a row longer than a record (_fields)
        problem = str(exc)
    raise StoreError(f"{owner} record: {problem}")


def _fields(at: int, row: object) -> object:
    """A stored record's fields by name (a row's values in `StoredFact`'s field order; a
    format 1 object as it is)."""
    if not isinstance(row, list):
        return row
    if len(row) > len(_FACT_FIELDS):
        raise ValueError(f"facts.{at}: {len(row)} values for {len(_FACT_FIELDS)} fields")
    return dict(zip(_FACT_FIELDS, row, strict=False))


class StoredBatch(BaseModel):
    """One batch of documents placed before client message `position` in an earlier turn."""

    model_config = ConfigDict(frozen=True, extra="forbid", strict=True, allow_inf_nan=False)

    position: int = Field(ge=0)
    prefix: str
    """The chain (kernel.conversation.chain) of the messages before it."""
    message: dict[str, Any]
    """The `user` message that was inserted."""
    condensed: bool = False


class DocumentBatches(Record):
    """The document batches a conversation's earlier turns placed (its existing context)."""

    batches: tuple[StoredBatch, ...] = Field(strict=False)
    """(A stored JSON array; each batch is validated strictly.)"""
    created_at: float


class StoredResponse(Record):
    """A Responses API response as its client saw it, and the input items of its turn.

    Records are immutable links: a response's whole conversation is its chain's inputs and
    outputs, oldest first, walked back through `previous_response_id` (each link is written
    once, so replicas and branches never race). `conversation_id` is the chain's
    conversation: the client's id, else the first response's id, shared by every link.
    """

    id: str = Field(min_length=1)
    previous_response_id: str | None = None
    ancestors: tuple[str, ...] = Field(default=(), strict=False)
    """The ids of the nearest earlier links (at most `ANCESTORS_KEPT`), oldest first, the last
    one `previous_response_id`: a chain of n links is read in n / ANCESTORS_KEPT batches, and
    a record stays small however long its chain grows."""
    created_at: float
    input: tuple[dict[str, Any], ...] = Field(strict=False)
    """This turn's input items (normalised), without the chain's earlier ones."""
    response: dict[str, Any]
    """The response object as returned (its `output` continues the chain)."""

    @property
    def key_id(self) -> str:
        """Responses are keyed by their own id."""
        return self.id

    def output(self) -> list[dict[str, Any]]:
        """The response's output items."""
        items = self.response.get("output")
        return [item for item in items if isinstance(item, dict)] if isinstance(items, list) else []


def decode(kind: type[_R], raw: bytes) -> _R:
    """A stored record of `kind`; raises StoreError saying what is wrong with it."""
    try:
        return kind.model_validate_json(raw, context=STORED)
    except ValidationError as exc:
        raise StoreError(f"{kind.__name__} record: {_problem(exc)}") from None


def _problem(exc: ValidationError, *within: str) -> str:
    """Where the first error of a validation is (the field path), and what it says."""
    problem = exc.errors()[0]
    where = ".".join(str(part) for part in (*within, *problem["loc"])) or "the record"
    return f"{where}: {problem['msg']}"


@dataclass(frozen=True, slots=True)
class Kind:
    """A kind of conversation record: its name, the prefix of its keys, its record type."""

    name: str
    key: str
    """How its keys start (`h:`): unique, and no kind's key starts another's."""
    record: type[Record]


EXTRACTIONS = Kind("extractions", "h:", HistoryEntry)
DOCUMENTS = Kind("documents", "d:", DocumentBatches)
RESPONSES = Kind("responses", "r:", StoredResponse)
CONVERSATION_KINDS: tuple[Kind, ...] = (EXTRACTIONS, DOCUMENTS)
"""The kinds kept per conversation: deleted with it."""
TENANT_KINDS: tuple[Kind, ...] = (*CONVERSATION_KINDS, RESPONSES)
"""Every kind of record a tenant owns: cleared, listed, bounded and expired alike."""
CALIBRATION = "calibration"
"""The name of a model's calibration samples (not a Record: a list of floats per model)."""
RETAINED = (*(kind.name for kind in TENANT_KINDS), CALIBRATION)
"""Every kind's name, as `general_settings.store.ttl_seconds_by_kind` takes them."""
DEFAULT_TTLS: dict[str, float] = {RESPONSES.name: 30 * 24 * 3600.0}
"""Kinds kept longer than `ttl_seconds` unless configured: a Responses chain 30 days, as
OpenAI keeps them."""
