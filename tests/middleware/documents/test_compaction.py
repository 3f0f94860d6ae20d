"""Language detection and deterministic, meaning-first compaction per language."""

from __future__ import annotations

import ast

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kernel.tokens import count_text
from middleware.documents.compaction import BODY_LINES, compact, compact_text
from middleware.documents.language import detect_language
from middleware.documents.syntax import SQL as SQL_SYNTAX
from middleware.documents.syntax import strip_comments

PYTHON = (
    'import os\n\n# setup\n\ndef short(x):\n    """Short."""\n    return x  # same\n\n'
    'def long(a, b):\n    """Add things.\n\n    In detail.\n    """\n'
    + "".join(f"    v{i} = a + {i}  # step {i}\n" for i in range(BODY_LINES + 2))
    + "    return b\n"
)
CSHARP = (
    "using System;\nnamespace Shop\n{\n    // the orders\n    public class Orders\n    {\n"
    "        /// <summary>Total.</summary>\n        public int Total(int a)\n        {\n"
    + "".join(f'            var x{i} = a + {i}; // "{i}"\n' for i in range(BODY_LINES + 2))
    + "            return a;\n        }\n        public string Name { get; set; }\n"
    "        public int Twice(int a) { return a * 2; }\n    }\n}\n"
)
SQL = (
    "-- orders\nCREATE TABLE orders (id int, note text); /* legacy */\n\n"
    "INSERT INTO orders VALUES " + ", ".join(f"({i}, 'n{i}')" for i in range(20)) + ";\n"
    "SELECT id, note FROM orders WHERE note = '-- not a comment';\n"
    "CREATE PROCEDURE refresh AS\nBEGIN\n"
    + "".join(f"  UPDATE orders SET note = 'x{i}' WHERE id = {i};\n" for i in range(BODY_LINES + 2))
    + "END;\n"
)
JS = (
    "// helpers\nconst add = (a, b) => a + b;\n\n/* main */\nfunction main(items) {\n"
    + "".join(f"  console.log(items[{i}]);\n" for i in range(BODY_LINES + 2))
    + "}\nconst url = 'http://example.com/' + 'x';\n"
)
TS = "interface Order { id: number; note: string }\nexport const id = (o: Order): number => o.id;\n"


@pytest.mark.parametrize(
    ("text", "source", "expected"),
    [
        (PYTHON, None, "python"),
        (CSHARP, None, "csharp"),
        (SQL, None, "sql"),
        (JS, None, "javascript"),
        (TS, None, "typescript"),
        ("The order shipped on Monday. The customer was happy.", None, "text"),
        ("anything", "db/orders.SQL", "sql"),
        ("anything", "src\\Shop\\Orders.cs", "csharp"),
        ("anything", "web/app.tsx", "typescript"),
        (SQL, "notes/readme", "sql"),
    ],
)
def test_detect_language(text: str, source: str | None, expected: str) -> None:
    """By the source's extension first, else by the content's signs; prose is text."""
    assert detect_language(text, source) == expected


def test_python_drops_comments_and_elides_long_bodies_to_signatures() -> None:
    """Comments and blank lines go; a long body keeps its signature and docstring's first line,
    and says how many docstring lines went."""
    out = compact(PYTHON, "python")
    assert "#" not in out.replace("# [overspill", "")
    assert "\n\n" not in out
    assert 'def short(x):\n    """Short."""\n    return x' in out
    assert (
        'def long(a, b):\n    """Add things. [overspill: 1 more docstring line elided]"""\n'
        "    ...  # [overspill: 15 lines elided]"
    ) in out


def test_python_fragments_that_do_not_parse_still_lose_comments() -> None:
    """A snippet that is not valid Python keeps its lines but loses blank lines."""
    assert compact("x = (1,\n\n  2", "python") == "x = (1,\n  2"


def test_csharp_drops_comments_and_elides_long_method_bodies() -> None:
    """Comments (not inside strings) go; long methods become signatures; short ones stay."""
    out = compact(CSHARP, "csharp")
    assert "//" not in out
    assert (
        "public int Total(int a)\n        {\n            /* [overspill: 15 lines elided] */\n        }"
        in out
    )
    assert "public int Twice(int a) { return a * 2; }" in out
    assert "public string Name { get; set; }" in out


def test_sql_keeps_strings_and_elides_rows_and_bodies() -> None:
    """`--` inside a string stays; VALUES keeps two rows; a long BEGIN ... END is elided."""
    out = compact(SQL, "sql")
    assert "-- orders" not in out
    assert "legacy" not in out
    assert "'-- not a comment'" in out
    assert "(0, 'n0'),\n(1, 'n1')\n/* [overspill: 18 more rows elided] */" in out
    assert "BEGIN\n  /* [overspill: 14 lines elided] */\nEND;" in out


def test_javascript_and_typescript() -> None:
    """Comments go, long function bodies are elided, short code stays whole."""
    out = compact(JS, "javascript")
    assert "helpers" not in out
    assert "main */" not in out
    assert "const add = (a, b) => a + b;" in out
    assert "function main(items) {\n  /* [overspill: 14 lines elided] */\n}" in out
    assert "'http://example.com/'" in out
    assert compact(TS, "typescript") == TS.strip()


def test_long_literals_are_elided_with_a_marker() -> None:
    """A string literal over 160 characters keeps its head and says how much went."""
    out = compact(f"const data = '{'x' * 500}';", "javascript")
    assert "[overspill: 441 chars elided]" in out
    assert len(out) < 120


def test_plain_text_loses_no_words() -> None:
    """Text only collapses whitespace."""
    text = "Para one.   Still one.  \n\n\n\nPara two.\t\tEnd."
    assert compact(text, "text") == "Para one. Still one.\n\nPara two. End."


@pytest.mark.parametrize(
    ("text", "language"), [(PYTHON, "python"), (CSHARP, "csharp"), (SQL, "sql"), (JS, "javascript")]
)
def test_compaction_shrinks_and_is_deterministic(text: str, language: str) -> None:
    """Compacted code costs fewer tokens, and the same input gives the same output."""
    out = compact(text, language)
    assert count_text(out) < count_text(text) * 0.6
    assert compact(text, language) == out


@given(st.text(max_size=400))
def test_plain_text_never_grows(text: str) -> None:
    """Whitespace collapsing never lengthens a text."""
    assert len(compact_text(text)) <= len(text)


@given(st.text(alphabet="ab'\"/*-\n ", max_size=200))
def test_comment_stripping_never_grows(text: str) -> None:
    """The comment scanner only ever removes characters."""
    assert len(strip_comments(text, SQL_SYNTAX)) <= len(text)


def test_csharp_strings_that_look_like_comments_survive_compaction() -> None:
    """A verbatim SQL string's `/* hint */` and `//` are string content, not comments."""
    text = (
        'const string Sql = @"\n    SELECT /* +INDEX(o) */ o.Id\n    FROM Orders o // all\n";\n'
        "// the query\n"
    )
    assert compact(text, "csharp") == (
        'const string Sql = @"\n    SELECT /* +INDEX(o) */ o.Id\n    FROM Orders o // all\n";'
    )


def test_a_multiline_sql_string_keeps_its_dashes() -> None:
    """`--` inside a string that spans lines is data."""
    text = "INSERT INTO notes VALUES ('line one\n-- not a comment');\n-- a comment\n"
    assert compact(text, "sql") == "INSERT INTO notes VALUES ('line one\n-- not a comment');"


def test_a_long_verbatim_literal_keeps_its_closing_quote() -> None:
    """@"..." over 160 characters keeps its head, a marker and its closing quote."""
    out = compact(f'var path = @"C:\\{"x" * 300}";', "csharp")
    assert out.endswith(' chars elided]";')
    assert out.startswith('var path = @"C:\\xxx')


@pytest.mark.parametrize(
    ("text", "language", "closing"),
    [
        (f'DATA = """{"x" * 300}"""', "python", '"""'),
        (f"DATA = '''{'x' * 300}'''", "python", "'''"),
        (f'var data = """{"x" * 300}""";', "csharp", '""";'),
        (f"SELECT '{'x' * 300}';", "sql", "';"),
    ],
)
def test_a_shortened_literal_is_still_closed(text: str, language: str, closing: str) -> None:
    """Triple-quoted literals keep all three closing quotes; Python output still parses."""
    out = compact(text, language)
    assert out.endswith(f"chars elided]{closing}")
    if language == "python":
        ast.parse(out)


def test_an_unterminated_long_literal_is_left_whole() -> None:
    """A literal that runs to the end of its line without closing is not cut."""
    text = "x = 'never closed " + "y" * 300
    assert compact(text, "javascript") == text


def test_the_end_of_a_short_dollar_quoted_body_opens_nothing() -> None:
    """`$$ LANGUAGE plpgsql;` closes a body: the statements after it are not a body."""
    short = (
        "CREATE FUNCTION one() RETURNS int AS $$\nBEGIN\n  RETURN 1;\nEND;\n$$ LANGUAGE plpgsql;\n"
    )
    after = "".join(
        f"UPDATE orders SET note = 'n{i}' WHERE id = {i};\n" for i in range(BODY_LINES + 2)
    )
    text = short + after + "CREATE FUNCTION two() RETURNS int AS $$ SELECT 2; $$ LANGUAGE sql;\n"
    assert compact(text, "sql") == text.strip()
