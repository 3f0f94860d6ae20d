"""The `documents` request extension: `documents` and `overspill.compact`, validated.

Clients send `documents: [{id?, text, score?, source?, language?}]` and optionally
`overspill: {compact: [languages]}` beside `messages`. Both are pydantic models validated
strictly (no coercion of "1.5" into a score); the first problem is an InvalidChatRequest (400)
whose `param` is the field's path (`documents[3].score`) and whose message says what to fix.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Annotated

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    Strict,
    TypeAdapter,
    ValidationError,
)
from pydantic_core import ErrorDetails, PydanticCustomError

from kernel.documents_config import ANY_LANGUAGE, known_languages, normalize_language
from kernel.errors import InvalidChatRequest
from kernel.json_values import is_int


def _non_blank(value: str) -> str:
    if not value.strip():
        raise PydanticCustomError("blank", "must not be blank")
    return value


def _one_line(value: str) -> str:
    """No line break of any kind (`\r`, `\u2028`...): ids and sources are header lines."""
    if value.splitlines() not in ([], [value]):
        raise PydanticCustomError("multiline", "must be one line")
    return value


def _canonical_language(name: str) -> str:
    canonical = normalize_language(name)
    if canonical is None:
        raise _unknown_language(name, known_languages())
    return canonical


def _compact_language(name: str) -> str:
    if name == ANY_LANGUAGE:
        return name
    canonical = normalize_language(name)
    if canonical is None:
        raise _unknown_language(name, f"{known_languages()}, {ANY_LANGUAGE}")
    return canonical


def _unknown_language(name: str, known: str) -> PydanticCustomError:
    return PydanticCustomError(
        "unknown_language",
        "{name} is unknown (known: {known})",
        {"name": repr(name), "known": known},
    )


def _int_as_text(value: object) -> object:
    """Integer ids are accepted and kept as their decimal text (booleans are not integers)."""
    return str(value) if is_int(value) else value


OneLine = Annotated[str, AfterValidator(_one_line)]
Id = Annotated[
    str, BeforeValidator(_int_as_text), AfterValidator(_non_blank), AfterValidator(_one_line)
]
Language = Annotated[OneLine, AfterValidator(_canonical_language)]


class SentDocument(BaseModel):
    """One document as the client sent it (the wire form; ids not yet defaulted)."""

    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)

    id: Id | None = None
    text: Annotated[str, AfterValidator(_non_blank)]
    score: Annotated[float | None, Field(allow_inf_nan=False)] = None
    source: OneLine | None = None
    language: Language | None = None


DOCUMENT_FIELDS = tuple(SentDocument.model_fields)


@dataclass(frozen=True, slots=True)
class Document:
    """One retrieved document as planned: its position, id (defaulted) and canonical language."""

    index: int
    text: str
    id: str
    score: float | None = None
    source: str | None = None
    language: str | None = None


_DOCUMENTS = TypeAdapter(Annotated[list[SentDocument], Strict()])
_COMPACT = TypeAdapter(Annotated[list[Annotated[str, AfterValidator(_compact_language)]], Strict()])
_DOCUMENT_RULES = {
    "": "must be an array of objects",
    "[]": "must be an object",
    "id": "must be a non-empty one-line string (or an integer)",
    "text": "must be a non-empty string",
    "score": "must be a finite number",
    "source": "must be a one-line string",
    "language": f"must be a language name (known: {known_languages()})",
}
_COMPACT_RULES = {
    "": "must be an array of language names, or true",
    "[]": f"must be a language name (known: {known_languages()}, *)",
}


def parse_documents(value: object) -> tuple[Document, ...]:
    """The `documents` extension, validated; raises InvalidChatRequest naming the field."""
    try:
        sent = _DOCUMENTS.validate_python(value)
    except ValidationError as error:
        raise _invalid("documents", error, _DOCUMENT_RULES) from None
    documents = tuple(_document(index, doc) for index, doc in enumerate(sent))
    _refuse_repeated_ids(documents, sent)
    return documents


def _document(index: int, sent: SentDocument) -> Document:
    return Document(
        index=index,
        text=sent.text,
        id=sent.id if sent.id is not None else f"doc-{index + 1}",
        score=sent.score,
        source=sent.source,
        language=sent.language,
    )


def _refuse_repeated_ids(documents: Sequence[Document], sent: Sequence[SentDocument]) -> None:
    """Ids name documents in traces and chunk ids, so each must be unique."""
    seen: dict[str, int] = {}
    for doc in documents:
        if doc.id in seen:
            where = f"documents[{doc.index}].id"
            first = f"documents[{seen[doc.id]}]"
            told = sent[doc.index].id is not None
            message = (
                f"{where!r} repeats the id {doc.id!r} of {first}"
                if told
                else f"'documents[{doc.index}]' has no id and its default {doc.id!r} is the id "
                f"of {first}: give it an id"
            )
            raise InvalidChatRequest(message, param=where)
        seen[doc.id] = doc.index


def parse_compact(value: object) -> frozenset[str]:
    """`overspill.compact`: languages compacted on demand (`true` or `"*"`: every language)."""
    if value is None or value is False:
        return frozenset()
    if value is True or value == ANY_LANGUAGE:
        return frozenset({ANY_LANGUAGE})
    try:
        return frozenset(_COMPACT.validate_python(value))
    except ValidationError as error:
        raise _invalid("overspill.compact", error, _COMPACT_RULES) from None


def _invalid(root: str, error: ValidationError, rules: Mapping[str, str]) -> InvalidChatRequest:
    """The first problem as a 400: `param` is its path, the message says what to fix."""
    detail = _first(error.errors(include_url=False))
    where, field = _path(root, detail["loc"])
    return InvalidChatRequest(f"{where!r} {_what_to_fix(detail, field, rules)}", param=where)


def _first(details: Sequence[ErrorDetails]) -> ErrorDetails:
    """The first item's problem; an unknown field before the others, since a misspelt field
    (`txt`) is why a required one is missing."""
    return min(details, key=lambda d: (_item(d["loc"]), d["type"] != "extra_forbidden"))


def _item(loc: tuple[int | str, ...]) -> int:
    return loc[0] if loc and isinstance(loc[0], int) else -1


def _path(root: str, loc: tuple[int | str, ...]) -> tuple[str, str]:
    """`documents[3].score` and the rule key (`score`; `[]` for an item, `` for the root);
    pydantic's inner parts after the field (union members, validator names) are dropped."""
    path, field = root, ""
    for part in loc:
        if isinstance(part, int) and not field:
            path, field = f"{path}[{part}]", "[]"
        elif isinstance(part, str) and field == "[]":
            path, field = f"{path}.{part}", part
    return path, field


def _what_to_fix(detail: ErrorDetails, field: str, rules: Mapping[str, str]) -> str:
    kind = detail["type"]
    if kind == "extra_forbidden":
        return f"is not a document field (fields: {', '.join(DOCUMENT_FIELDS)})"
    rule = rules.get(field, rules["[]"])
    if kind == "missing":
        return f"is missing: it {rule}"
    return str(detail["msg"]) if kind == "unknown_language" else rule
