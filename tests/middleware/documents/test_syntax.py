"""The comment and literal scanner: what is code, comment or literal in each language family."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from middleware.documents.syntax import (
    C_SHARP,
    JAVASCRIPT,
    PYTHON,
    SQL,
    Syntax,
    code_only,
    spans,
    strip_comments,
)

ALL = [C_SHARP, JAVASCRIPT, SQL, PYTHON]


def kinds(text: str, syntax: Syntax) -> list[tuple[str, str]]:
    return [(kind, text[start:end]) for kind, start, end in spans(text, syntax)]


@given(st.text(alphabet="ab@$\"'`/*-#\\\n ", max_size=200), st.sampled_from(ALL))
def test_spans_cover_the_text_in_order(text: str, syntax: Syntax) -> None:
    """The spans are contiguous and together are exactly the text."""
    found = list(spans(text, syntax))
    assert "".join(text[start:end] for _, start, end in found) == text
    assert all(start < end for _, start, end in found)


@given(st.text(alphabet="ab@$\"'`/*-#\\\n ", max_size=200), st.sampled_from(ALL))
def test_stripping_comments_keeps_every_line_and_never_grows(text: str, syntax: Syntax) -> None:
    """Comments go but their line breaks stay, so lines of code are never joined."""
    stripped = strip_comments(text, syntax)
    assert len(stripped) <= len(text)
    assert stripped.count("\n") == text.count("\n")


def test_a_csharp_verbatim_string_is_one_literal_with_its_comment_lookalikes() -> None:
    """`//`, `/*` and `--` inside @"..." (across lines, with "" quotes) are string content."""
    text = 'var sql = @"SELECT a -- x\n  FROM b // y\n  WHERE c = ""q"" /* z */"; // real\n'
    assert strip_comments(text, C_SHARP) == text.replace("// real", "")
    assert kinds(text, C_SHARP)[1] == ("literal", text[10 : text.index(";")])


def test_a_csharp_verbatim_string_has_no_backslash_escapes() -> None:
    """@"C:\\temp\\" ends at its quote, so the comment after it is found."""
    text = 'var dir = @"C:\\temp\\"; // where\n'
    assert strip_comments(text, C_SHARP) == 'var dir = @"C:\\temp\\"; \n'


def test_csharp_raw_and_interpolated_strings() -> None:
    """C# 11 raw strings (three or more quotes) and $@"..." are literals."""
    raw = 'var q = """\n  SELECT 1 -- one\n  /* hint */\n  """;'
    assert strip_comments(raw, C_SHARP) == raw
    interpolated = 'var q = $@"SELECT {x} // n"; // c'
    assert strip_comments(interpolated, C_SHARP) == 'var q = $@"SELECT {x} // n"; '


def test_javascript_regex_escapes_and_template_strings() -> None:
    """An escaped slash is not a comment opener; template strings span lines."""
    text = "const re = /\\/\\//; // c\nconst t = `a // b\n/* c */`;"
    assert strip_comments(text, JAVASCRIPT) == "const re = /\\/\\//; \nconst t = `a // b\n/* c */`;"


def test_sql_strings_span_lines() -> None:
    """A multi-line SQL string keeps its `--` and `/* */`."""
    text = "INSERT INTO notes VALUES ('first -- line\nsecond /* line */'); -- done"
    assert (
        strip_comments(text, SQL)
        == "INSERT INTO notes VALUES ('first -- line\nsecond /* line */'); "
    )


def test_a_block_comment_over_lines_leaves_its_line_breaks() -> None:
    """Code before and after a multi-line block comment stays on separate lines."""
    assert strip_comments("a = 1; /* x\ny */ b = 2;", C_SHARP) == "a = 1; \n b = 2;"


@pytest.mark.parametrize(
    ("text", "syntax", "expected"),
    [
        ('q = """SELECT 1\nFROM t"""  # c', PYTHON, 'q = ""  '),
        ("x = 'a' -- c", SQL, 'x = "" '),
        ('c.Query("SELECT 1") /* c */', C_SHARP, 'c.Query("") '),
    ],
)
def test_code_only_empties_literals_and_drops_comments(
    text: str, syntax: Syntax, expected: str
) -> None:
    """What a language's own code says, without its literals or comments."""
    assert code_only(text, syntax) == expected
