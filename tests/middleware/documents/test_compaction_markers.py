"""No compaction removes code silently: every line that is not blank and not a comment either
survives or is accounted for by an `[overspill: ... elided]` marker where it was.

Programs are composed by hypothesis from realistic pieces, each piece knowing which of its
lines are code (and what the code of a line with a trailing comment is). The output is aligned
with those code lines (a longest common subsequence, trailing spaces ignored). Each run of code
lines missing from the output faces some output lines, which must account for all of them: a
line that is only a marker accounts for the lines it says it elided, a line with code and a
marker for itself and those, a changed line without a marker for itself alone, and lines with
no marker among them for nothing.
"""

from __future__ import annotations

import ast
import difflib
import re

from hypothesis import given, settings
from hypothesis import strategies as st

from middleware.documents.compaction import BODY_LINES, LONG_LITERAL, compact

MARKER = re.compile(r"\[overspill: (?:(\d+) (?:more )?(?:\w+ )?(?:lines?|rows) )?[^\]]*elided\]")
MARKER_ONLY = re.compile(r"[\s.#/*;]*")
Line = tuple[str, str | None]
"""A source line and its code (None: a blank or comment line, which may go silently)."""
Piece = list[Line]


def code(text: str) -> Line:
    return (text, text)


def comment(text: str) -> Line:
    return (text, None)


def trailing(statement: str, note: str) -> Line:
    return (f"{statement}  {note}", statement)


def _normal(line: str) -> str:
    return line.rstrip()


def accounts_for(line: str) -> int:
    """How many source lines an output line that replaced some can stand for."""
    found = MARKER.search(line)
    if found is None:
        return 1
    elided = int(found.group(1) or 0)
    rest = MARKER.sub("", line)
    return elided if MARKER_ONLY.fullmatch(rest) else 1 + elided


def unaccounted(lines: list[Line], output: str) -> list[str]:
    """The code lines missing from the output that the lines facing them do not account for."""
    wanted = [_normal(c) for _, c in lines if c is not None and c.strip()]
    got = [_normal(line) for line in output.splitlines()]
    matcher = difflib.SequenceMatcher(a=wanted, b=got, autojunk=False)
    missing: list[str] = []
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        facing = got[j1:j2]
        marked = any(MARKER.search(line) for line in facing)
        if tag != "equal" and (not marked or sum(map(accounts_for, facing)) < i2 - i1):
            missing += wanted[i1:i2]
    return missing


def numbered(piece: Piece, number: int) -> Piece:
    """The piece with `ID` replaced by its number, so that pieces drawn alike still differ."""
    return [(t.replace("ID", str(number)), c and c.replace("ID", str(number))) for t, c in piece]


def check(pieces: list[Piece], language: str) -> None:
    lines = [line for number, piece in enumerate(pieces) for line in numbered(piece, number)]
    source = "\n".join(text for text, _ in lines)
    output = compact(source, language)
    assert unaccounted(lines, output) == [], output
    assert compact(source, language) == output
    if language == "python":
        ast.parse(output)


words = st.sampled_from(["orders", "total", "customer", "note", "status", "line", "price"])
counts = st.integers(0, BODY_LINES + 6)
long_text = st.integers(LONG_LITERAL, LONG_LITERAL * 2).map(lambda n: "x" * n)

# --- C# ------------------------------------------------------------------------------------


@st.composite
def csharp_method(draw: st.DrawFn) -> Piece:
    body: Piece = []
    for i in range(draw(counts)):
        statement = f"var {draw(words)}ID_{i} = a + {i};"
        body.append(draw(st.sampled_from([code(statement), trailing(statement, f"// step {i}")])))
        if draw(st.booleans()):
            body += [code(f"if (a > {i})"), code("{"), code("    a++;"), code("}")]
    return [
        comment("/// <summary>What it computes.</summary>"),
        code(f"public int {draw(words).title()}ID(int a)"),
        code("{"),
        *[(f"    {text}", c and f"    {c}") for text, c in body],
        code("    return a + ID;"),
        code("}"),
    ]


VERBATIM_SQL = [
    code('private const string SqlID = @"'),
    code("    SELECT o.Id -- the id"),
    code("    FROM Orders o /* hint */"),
    code('    WHERE o.Note = ""// not a comment"";'),
    code('";'),
]
DAPPER = [
    code("public Task<IEnumerable<Order>> LargeID(decimal min) =>"),
    code('    _db.QueryAsync<Order>("SELECT * FROM Orders WHERE Total > @min", new { min });'),
]
csharp_pieces = st.one_of(
    csharp_method(),
    st.just([code("public string NameID { get; set; }")]),
    st.just([code("public int TwiceID(int a) => a * 2;")]),
    st.just([code("#region QueriesID")]),
    st.just([code("#endregion")]),
    st.just([code("[HttpGet]")]),
    st.just([comment("// a note about the orders"), comment("")]),
    st.just([comment("/* the orders,"), comment("   by customer */")]),
    st.just([trailing("private int _countID;", "/* cached */")]),
    st.just(VERBATIM_SQL),
    st.just([code('private const string RawID = """'), code("    SELECT 1 // one"), code('""";')]),
    long_text.map(lambda x: [code(f'private const string DataID = "{x}";')]),
    st.just(DAPPER),
)


@settings(max_examples=80, deadline=None)
@given(st.lists(csharp_pieces, max_size=8))
def test_csharp_compaction_accounts_for_every_line_of_code(members: list[Piece]) -> None:
    """C#: comments and blank lines go silently; everything else stays or is marked."""
    head = [code("using System;"), code("namespace Shop"), code("{"), code("public class Orders")]
    check([head, [code("{")], *members, [code("}"), code("}")]], "csharp")


# --- JavaScript / TypeScript ---------------------------------------------------------------


@st.composite
def js_function(draw: st.DrawFn) -> Piece:
    steps = [code("  console.log(items[{i}]);"), trailing("  total += {i};", "// add")]
    body = [
        (text.format(i=i), c and c.format(i=i))
        for i in range(draw(counts))
        for text, c in [draw(st.sampled_from(steps))]
    ]
    return [code(f"function {draw(words)}ID(items) {{"), *body, code("}")]


@st.composite
def js_array(draw: st.DrawFn) -> Piece:
    rows = [code(f"  {{ id: {i}, note: 'n{i}' }},") for i in range(draw(counts))]
    return [code("const rowsID = ["), *rows, code("];")]


TEMPLATE_SQL = [
    code("const queryID = `"),
    code("  SELECT id -- id"),
    code("  FROM orders // all"),
    code("`;"),
]
js_pieces = st.one_of(
    js_function(),
    js_array(),
    st.just([code("import { pool } from './db';")]),
    st.just([comment("// helpers"), comment("/**"), comment(" * Adds."), comment(" */")]),
    st.just([trailing("const addID = (a, b) => a + b;", "/* pure */")]),
    st.just([trailing("const slashesID = /\\/\\//g;", "// two slashes")]),
    st.just(TEMPLATE_SQL),
    st.just([trailing("const urlID = 'http://example.com/' + path;", "// the home page")]),
    long_text.map(lambda x: [code(f"const dataID = '{x}';")]),
    st.just([code("export interface OrderID { id: number; note: string }")]),
)


@settings(max_examples=80, deadline=None)
@given(st.lists(js_pieces, max_size=8), st.sampled_from(["javascript", "typescript"]))
def test_javascript_compaction_accounts_for_every_line_of_code(
    pieces: list[Piece], language: str
) -> None:
    """JavaScript and TypeScript: only comments and blank lines go without a marker."""
    check(pieces, language)


# --- SQL -----------------------------------------------------------------------------------


@st.composite
def sql_insert(draw: st.DrawFn) -> Piece:
    rows = [f"({i}, 'n{i}')" for i in range(1, draw(st.integers(2, 12)))]
    if draw(st.booleans()):
        return [code(f"INSERT INTO ordersID (id, note) VALUES {', '.join(rows)};")]
    lines = [code(f"  {row}{',' if i < len(rows) - 1 else ';'}") for i, row in enumerate(rows)]
    return [code("INSERT INTO ordersID (id, note) VALUES"), *lines]


@st.composite
def sql_procedure(draw: st.DrawFn) -> Piece:
    steps = [
        code("  UPDATE orders SET note = 'x{i}' WHERE id = {i};"),
        trailing("  DELETE FROM lines WHERE order_id = {i};", "-- tidy"),
    ]
    body = [
        (text.format(i=i), c and c.format(i=i))
        for i in range(draw(counts))
        for text, c in [draw(st.sampled_from(steps))]
    ]
    return [code("CREATE PROCEDURE refreshID AS"), code("BEGIN"), *body, code("END;")]


@st.composite
def sql_function(draw: st.DrawFn) -> Piece:
    body = [code(f"  total := total + {i};") for i in range(draw(counts))]
    return [
        code("CREATE FUNCTION add_allID() RETURNS int AS $$"),
        code("BEGIN"),
        *body,
        code("  RETURN total;"),
        code("END;"),
        code("$$ LANGUAGE plpgsql;"),
    ]


SELECT = [
    trailing("SELECT id, note, ID", "-- the columns"),
    code("FROM orders"),
    trailing("WHERE note = '-- not a comment'", "/* real */"),
]
sql_pieces = st.one_of(
    sql_insert(),
    sql_procedure(),
    sql_function(),
    st.just([comment("-- orders by customer"), comment("")]),
    st.just([comment("/* legacy:"), comment("   kept for reports */")]),
    st.just(SELECT),
    st.just([code("INSERT INTO notesID VALUES ('line one"), code("-- still the string');")]),
    long_text.map(lambda x: [code(f"UPDATE ordersID SET note = '{x}';")]),
)


@settings(max_examples=80, deadline=None)
@given(st.lists(sql_pieces, max_size=8))
def test_sql_compaction_accounts_for_every_line_of_code(pieces: list[Piece]) -> None:
    """SQL: only comments and blank lines go without a marker (rows and bodies are marked)."""
    check(pieces, "sql")


# --- Python --------------------------------------------------------------------------------


quotes: Line = ('    """', None)
"""A docstring's quotes on a line of their own: syntax that a shortened docstring restates."""
DOCSTRINGS = [
    [],
    [code('    """Add things ID."""')],
    [code('    """Add things ID.'), comment(""), code("    In detail."), quotes],
    [quotes, code("    Add things ID."), code("    More."), quotes],
]


@st.composite
def python_function(draw: st.DrawFn) -> Piece:
    steps = [code("    vID_{i} = a + {i}"), trailing("    vID_{i} = a * {i}", "# why")]
    body = [
        (text.format(i=i), c and c.format(i=i))
        for i in range(draw(counts))
        for text, c in [draw(st.sampled_from(steps))]
    ]
    nested = [code("    def innerID(b):"), code("        return b")] if draw(st.booleans()) else []
    doc = draw(st.sampled_from(DOCSTRINGS))
    return [code(f"def {draw(words)}ID(a, b):"), *doc, *nested, *body, code("    return a + ID")]


QUERY = [
    code('QUERY_ID = """'),
    code("SELECT id  # not a comment"),
    code("FROM orders"),
    code('"""'),
]
python_pieces = st.one_of(
    python_function(),
    st.just([code("import os")]),
    st.just([comment("# setup"), comment("")]),
    st.just([code("class OrdersID:"), code("    total = 0"), code("    name = 'x'")]),
    st.just(QUERY),
    long_text.map(lambda x: [code(f"DATA_ID = '{x}'")]),
    long_text.map(lambda x: [code(f'NOTE_ID = """{x}"""')]),
    st.just([code("@cache"), code("def cachedID(a):"), code("    return a")]),
)


@settings(max_examples=80, deadline=None)
@given(st.lists(python_pieces, max_size=8))
def test_python_compaction_accounts_for_every_line_of_code(pieces: list[Piece]) -> None:
    """Python: comments and blank lines go; bodies and docstring tails leave markers."""
    check(pieces, "python")


# --- text ----------------------------------------------------------------------------------


@given(st.text(max_size=400))
def test_text_compaction_keeps_every_word(text: str) -> None:
    """Plain text loses whitespace only: the words are the same, in the same order."""
    assert compact(text, "text").split() == text.split()


# --- the checker itself --------------------------------------------------------------------


def test_the_checker_catches_a_silent_removal() -> None:
    """A line dropped with no marker where it was is reported."""
    lines = [code("a = 1"), code("b = 2"), code("c = 3")]
    assert unaccounted(lines, "a = 1\nc = 3") == ["b = 2"]
    assert unaccounted(lines, "a = 1\n# [overspill: 1 line elided]\nc = 3") == []
    assert unaccounted(lines, "a = 1\nc = 3\n# [overspill: 1 line elided]") == ["b = 2"]


def test_the_checker_counts_what_a_marker_says() -> None:
    """A marker for one line does not cover two, and a changed line covers only itself."""
    lines = [code("a = 1"), code("b = 2"), code("c = 3"), code("d = 4")]
    assert unaccounted(lines, "a = 1\n/* [overspill: 1 lines elided] */\nd = 4") == [
        "b = 2",
        "c = 3",
    ]
    assert unaccounted(lines, "a = 1\nb = 2 [overspill: 1 more line elided]\nd = 4") == []
    assert unaccounted(lines, "a = 1\nb = 2;\nd = 4") == ["b = 2", "c = 3"]
    assert unaccounted(lines, "a = 1\nb = 2\nc =\nd = 4") == ["c = 3"]
