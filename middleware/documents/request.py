"""The `documents` request extension: `documents` and `overspill.compact`, validated.

Clients send `documents: [{id?, text, score?, source?, language?}]` and optionally
`overspill: {compact: [languages]}` beside `messages`; a bad field is a 400 naming it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from kernel.documents_config import ANY_LANGUAGE, known_languages
from kernel.documents_config import normalize_language as _language
from kernel.errors import InvalidChatRequest

DOCUMENT_FIELDS = ("id", "text", "score", "source", "language")


@dataclass(frozen=True, slots=True)
class Document:
    """One retrieved document as the client sent it (language canonical when declared)."""

    index: int
    text: str
    id: str
    score: float | None = None
    source: str | None = None
    language: str | None = None


def parse_documents(value: object) -> tuple[Document, ...]:
    """The `documents` extension, validated; raises InvalidChatRequest naming the field."""
    if not isinstance(value, list):
        raise InvalidChatRequest("'documents' must be an array of objects", param="documents")
    documents = tuple(_document(index, item) for index, item in enumerate(value))
    seen: dict[str, int] = {}
    for doc in documents:
        if doc.id in seen:
            where = f"documents[{doc.index}].id"
            raise InvalidChatRequest(
                f"{where!r} repeats the id {doc.id!r} of documents[{seen[doc.id]}]", param=where
            )
        seen[doc.id] = doc.index
    return documents


def _document(index: int, item: object) -> Document:
    where = f"documents[{index}]"
    if not isinstance(item, dict):
        raise InvalidChatRequest(f"{where!r} must be an object", param=where)
    for key in item:
        if key not in DOCUMENT_FIELDS:
            raise InvalidChatRequest(
                f"'{where}.{key}' is not a document field (fields: {', '.join(DOCUMENT_FIELDS)})",
                param=f"{where}.{key}",
            )
    text = item.get("text")
    if not isinstance(text, str) or not text.strip():
        raise InvalidChatRequest(
            f"'{where}.text' must be a non-empty string", param=f"{where}.text"
        )
    return Document(
        index=index,
        text=text,
        id=_id(where, item.get("id"), index),
        score=_score(where, item.get("score")),
        source=_optional_str(where, "source", item.get("source")),
        language=_declared_language(where, item.get("language")),
    )


def _id(where: str, value: object, index: int) -> str:
    if value is None:
        return f"doc-{index + 1}"
    if isinstance(value, bool) or not isinstance(value, str | int) or str(value).strip() == "":
        raise InvalidChatRequest(f"'{where}.id' must be a non-empty string", param=f"{where}.id")
    if "\n" in str(value):
        raise InvalidChatRequest(f"'{where}.id' must be one line", param=f"{where}.id")
    return str(value)


def _score(where: str, value: object) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise InvalidChatRequest(f"'{where}.score' must be a finite number", param=f"{where}.score")
    return float(value)


def _optional_str(where: str, key: str, value: object) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or "\n" in value:
        raise InvalidChatRequest(
            f"'{where}.{key}' must be a one-line string", param=f"{where}.{key}"
        )
    return value


def _declared_language(where: str, value: object) -> str | None:
    name = _optional_str(where, "language", value)
    if name is None:
        return None
    canonical = _language(name)
    if canonical is None:
        raise InvalidChatRequest(
            f"'{where}.language' {name!r} is unknown (known: {known_languages()})",
            param=f"{where}.language",
        )
    return canonical


def parse_compact(value: object) -> frozenset[str]:
    """`overspill.compact`: languages compacted on demand (`true` or `"*"`: every language)."""
    if value is None or value is False:
        return frozenset()
    if value is True or value == ANY_LANGUAGE:
        return frozenset({ANY_LANGUAGE})
    if not isinstance(value, list):
        raise InvalidChatRequest(
            "'overspill.compact' must be an array of language names, or true",
            param="overspill.compact",
        )
    names: set[str] = set()
    for index, name in enumerate(value):
        canonical = ANY_LANGUAGE if name == ANY_LANGUAGE else None
        if isinstance(name, str) and canonical is None:
            canonical = _language(name)
        if canonical is None:
            where = f"overspill.compact[{index}]"
            raise InvalidChatRequest(
                f"{where!r} must be a language name (known: {known_languages()}, *)", param=where
            )
        names.add(canonical)
    return frozenset(names)
