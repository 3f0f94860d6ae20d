"""The request extension: `documents` and `overspill.compact` as strict models, clear 400s."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kernel.errors import InvalidChatRequest
from middleware.documents.request import DOCUMENT_FIELDS, Document, parse_compact, parse_documents


def refusal(value: object) -> InvalidChatRequest:
    with pytest.raises(InvalidChatRequest) as caught:
        parse_documents(value)
    return caught.value


@pytest.mark.parametrize(
    ("value", "param", "message"),
    [
        ({"text": "x"}, "documents", "'documents' must be an array of objects"),
        (["x"], "documents[0]", "'documents[0]' must be an object"),
        (
            [{"text": "x"}, {"text": "y", "score": "0.5"}],
            "documents[1].score",
            "'documents[1].score' must be a finite number",
        ),
        (
            [{"text": "x", "score": float("inf")}],
            "documents[0].score",
            "'documents[0].score' must be a finite number",
        ),
        ([{"text": "  \n"}], "documents[0].text", "'documents[0].text' must be a non-empty string"),
        (
            [{"id": "a"}],
            "documents[0].text",
            "'documents[0].text' is missing: it must be a non-empty string",
        ),
        (
            [{"text": "x", "id": "a\nb"}],
            "documents[0].id",
            "'documents[0].id' must be a non-empty one-line string (or an integer)",
        ),
        (
            [{"text": "x", "id": False}],
            "documents[0].id",
            "'documents[0].id' must be a non-empty one-line string (or an integer)",
        ),
        (
            [{"text": "x", "id": "a\rb"}],
            "documents[0].id",
            "'documents[0].id' must be a non-empty one-line string (or an integer)",
        ),
        (
            [{"text": "x", "source": "a\u2028b"}],
            "documents[0].source",
            "'documents[0].source' must be a one-line string",
        ),
        (
            [{"text": "x"}, {"txt": "y", "score": "high"}],
            "documents[1].txt",
            "'documents[1].txt' is not a document field (fields: id, text, score, source, "
            "language)",
        ),
        (
            [{"text": "x", "source": "a\nb"}],
            "documents[0].source",
            "'documents[0].source' must be a one-line string",
        ),
        (
            [{"text": "x", "title": "t"}],
            "documents[0].title",
            "'documents[0].title' is not a document field (fields: id, text, score, source, "
            "language)",
        ),
        (
            [{"text": "x", "id": 7}, {"text": "y", "id": "7"}],
            "documents[1].id",
            "'documents[1].id' repeats the id '7' of documents[0]",
        ),
        (
            [{"text": "x", "id": "doc-2"}, {"text": "y"}],
            "documents[1].id",
            "'documents[1]' has no id and its default 'doc-2' is the id of documents[0]: give "
            "it an id",
        ),
    ],
)
def test_each_refusal_names_the_field_and_says_what_to_fix(
    value: object, param: str, message: str
) -> None:
    """The 400's `param` is the field's path and its message says what the field must be."""
    error = refusal(value)
    assert (error.param, error.message) == (param, message)
    assert error.http_status() == 400


def test_an_unknown_language_is_named_with_the_known_ones() -> None:
    """The refused name is quoted and the accepted names (aliases too) are listed."""
    error = refusal([{"text": "x", "language": "cobol"}])
    assert error.param == "documents[0].language"
    assert error.message.startswith("'documents[0].language' 'cobol' is unknown (known: sql, ")
    assert "dotnet" in error.message


def test_integer_ids_are_kept_as_text_and_nulls_mean_absent() -> None:
    """`id: 17` is the id "17"; explicit nulls are the defaults."""
    (doc,) = parse_documents(
        [{"id": 17, "text": "x", "score": None, "source": None, "language": None}]
    )
    assert doc == Document(index=0, text="x", id="17")


def test_the_document_fields_are_the_models() -> None:
    """The field list in error messages is the model's own."""
    assert DOCUMENT_FIELDS == ("id", "text", "score", "source", "language")


@given(st.integers(-(10**30), 10**30) | st.floats(allow_nan=False, allow_infinity=False))
def test_any_finite_number_is_a_score(score: int | float) -> None:
    """Integers and finite floats are accepted as scores, as floats."""
    (doc,) = parse_documents([{"text": "x", "score": score}])
    assert doc.score == float(score)


@pytest.mark.parametrize(
    ("value", "param", "message"),
    [
        ("sql", "overspill.compact", "must be an array of language names, or true"),
        ({"sql": True}, "overspill.compact", "must be an array of language names, or true"),
        ([3], "overspill.compact[0]", "must be a language name (known: sql, "),
        (["sql", "cobol"], "overspill.compact[1]", "'cobol' is unknown (known: sql, "),
    ],
)
def test_bad_compact_values_are_named(value: object, param: str, message: str) -> None:
    """`overspill.compact` refusals name the item and list the languages (and `*`)."""
    with pytest.raises(InvalidChatRequest) as caught:
        parse_compact(value)
    assert caught.value.param == param
    assert caught.value.message.startswith(f"{param!r} {message}")
    assert caught.value.message.endswith(", *)") or "array" in message


def test_compact_accepts_star_in_a_list() -> None:
    """`["*"]` is every language, like `true`."""
    assert parse_compact(["*", "ts"]) == {"*", "typescript"}
    assert parse_compact(False) == frozenset()
