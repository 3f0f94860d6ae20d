"""Deterministic, meaning-first compaction of retrieved documents, per language.

Compaction removes what carries least meaning first, and marks every elision visibly:

- all code: comments and blank lines go (`syntax` tells comments from string literals), and
  nothing else goes silently: every other removal leaves an `[overspill: ... elided]` marker
  where it was (`#region` lines stay: a marker would cost more than the line);
- long literal data is elided: one-line string literals over `LONG_LITERAL` characters keep
  their head and closing quotes; SQL `INSERT ... VALUES` keeps its first rows; an array/list
  literal spanning more than `BODY_LINES` lines keeps its opening line;
- bodies longer than `BODY_LINES` lines are elided to their signatures: Python functions
  (found with `ast`; a docstring keeps its first line and counts the rest), C#/JavaScript/
  TypeScript methods and functions (a `(...)` header opening a brace block), SQL
  `BEGIN ... END` and `AS $$ ... $$`;
- plain text: trailing spaces and runs of blank lines and spaces collapse; no words go.

The same input always gives the same output.
"""

from __future__ import annotations

import ast
import io
import re
import tokenize
from collections.abc import Callable
from functools import partial

from middleware.documents.syntax import (
    C_SHARP,
    JAVASCRIPT,
    PYTHON,
    SQL,
    Syntax,
    spans,
    strip_comments,
)

BODY_LINES = 12
LONG_LITERAL = 160
KEEP_ROWS = 2
_CONTROL = re.compile(
    r"^\s*(\}\s*)?(if|else|for|foreach|while|do|switch|catch|try|finally|using|lock|fixed|return)\b"
)


def compact(text: str, language: str) -> str:
    """The compacted text of a document in a (canonical) language; deterministic."""
    compactor = _COMPACTORS.get(language, compact_text)
    return compactor(text)


def compact_text(text: str) -> str:
    """Plain text: trailing spaces, runs of spaces and of blank lines collapse."""
    lines = [re.sub(r"[ \t]{2,}", " ", line.rstrip()) for line in text.splitlines()]
    return re.sub(r"\n{3,}", "\n\n", "\n".join(lines)).strip("\n")


def _drop_blank(text: str) -> str:
    return "\n".join(line.rstrip() for line in text.splitlines() if line.strip())


def elide_literals(text: str, syntax: Syntax) -> str:
    """One-line string literals longer than LONG_LITERAL characters keep their head, a marker
    and their closing quotes."""
    out: list[str] = []
    for kind, start, end in spans(text, syntax):
        literal = text[start:end]
        close = _closing_quotes(literal)
        if kind == "literal" and len(literal) > LONG_LITERAL and "\n" not in literal and close:
            cut = len(literal) - 60 - len(close)
            literal = f"{literal[:60]}[overspill: {cut} chars elided]{close}"
        out.append(literal)
    return "".join(out)


def _closing_quotes(literal: str) -> str:
    """What closes a literal (`"`, or three quotes for Python's and C#'s triple-quoted ones);
    empty when it is unterminated."""
    opener = literal.lstrip("@$")
    run = len(opener) - len(opener.lstrip(opener[:1]))
    close = opener[:3] if run >= 3 else opener[:1]
    return close if len(literal) > len(close) and literal.endswith(close) else ""


def elide_brace_bodies(text: str, is_header: Callable[[str], bool]) -> str:
    """Brace blocks longer than BODY_LINES lines whose header passes `is_header` become
    the header and a marker."""
    lines = text.splitlines()
    out: list[str] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        opens = line.rstrip().endswith(("{", "["))
        header = line if line.strip() not in ("{", "[") else (out[-1] if out else "")
        end = _block_end(lines, i) if opens and is_header(header) else None
        if end is not None and end - i - 1 > BODY_LINES:
            indent = _indent(lines[i + 1])
            out += [line, f"{indent}/* [overspill: {end - i - 1} lines elided] */", lines[end]]
            i = end + 1
            continue
        out.append(line)
        i += 1
    return "\n".join(out)


def _block_end(lines: list[str], start: int) -> int | None:
    """The line closing the bracket opened at the end of `lines[start]`."""
    opener = lines[start].rstrip()[-1]
    closer = "}" if opener == "{" else "]"
    depth = 0
    for index in range(start, len(lines)):
        bare = re.sub(r"\"(?:\\.|[^\"\\])*\"|'(?:\\.|[^'\\])*'", "", lines[index])
        depth += bare.count(opener) - bare.count(closer)
        if depth <= 0:
            return index
    return None


def _c_header(header: str) -> bool:
    """A method/function/lambda or literal-data header, not a control statement or a type."""
    if _CONTROL.match(header):
        return False
    stripped = header.rstrip()
    is_call = ("(" in header and ")" in header) or "=>" in header
    return is_call or stripped.endswith(("= [", "= {", "=[", "={", "= new[] {", "=> {"))


def compact_c_like(text: str, syntax: Syntax = JAVASCRIPT) -> str:
    """C#, JavaScript, TypeScript: comments and blank lines go; long literals and long
    method/function bodies and array literals are elided. `#region` lines stay: they name
    the code's parts, and a marker would cost more than the line it replaced."""
    text = strip_comments(text, syntax)
    text = elide_literals(_drop_blank(text), syntax)
    return elide_brace_bodies(text, _c_header)


def compact_sql(text: str) -> str:
    """SQL: comments and blank lines go; long literals, extra VALUES rows and long
    BEGIN ... END / $$ ... $$ bodies are elided."""
    text = _drop_blank(strip_comments(text, SQL))
    text = elide_literals(text, SQL)
    text = _elide_rows(text)
    return _elide_sql_bodies(text)


def _elide_rows(text: str) -> str:
    """`VALUES (...), (...), ...` keeps its first KEEP_ROWS rows."""
    rows = re.compile(r"(?is)(\bvalues\s*)((?:\([^()]*\)\s*,\s*)+\([^()]*\))")

    def keep(match: re.Match[str]) -> str:
        found = re.findall(r"\([^()]*\)", match.group(2))
        if len(found) <= KEEP_ROWS + 1:
            return match.group(0)
        head = ",\n".join(found[:KEEP_ROWS])
        return (
            f"{match.group(1)}{head}\n/* [overspill: {len(found) - KEEP_ROWS} more rows elided] */"
        )

    return rows.sub(keep, text)


def _elide_sql_bodies(text: str) -> str:
    """Procedure and function bodies over BODY_LINES lines keep their signature; a short
    body is kept whole and skipped, so that its closing `$$` never opens another."""
    lines = text.splitlines()
    out: list[str] = []
    i = 0
    while i < len(lines):
        end = _sql_body_end(lines, i)
        if end is None:
            out.append(lines[i])
            i += 1
        elif end - i - 1 > BODY_LINES:
            out += [lines[i], f"  /* [overspill: {end - i - 1} lines elided] */", lines[end]]
            i = end + 1
        else:
            out += lines[i : end + 1]
            i = end + 1
    return "\n".join(out)


def _sql_body_end(lines: list[str], start: int) -> int | None:
    """The line ending a BEGIN ... END or $$ ... $$ body opened on `lines[start]`."""
    line = lines[start]
    if line.count("$$") == 1:
        return next((j for j in range(start + 1, len(lines)) if "$$" in lines[j]), None)
    if not re.search(r"(?i)\bbegin\s*$", line):
        return None
    depth = 0
    for j in range(start, len(lines)):
        depth += len(re.findall(r"(?i)\bbegin\b|\bcase\b", lines[j]))
        depth -= len(re.findall(r"(?i)\bend\b", lines[j]))
        if depth <= 0:
            return j
    return None


def compact_python(text: str) -> str:
    """Python: comments, blank lines and docstrings past their first line go; long string
    literals and function bodies are elided (with `ast`; a fragment that does not parse
    keeps its bodies)."""
    text = _strip_python_comments(text)
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError):
        return elide_literals(_drop_blank(text), PYTHON)
    lines = text.splitlines()
    cuts: list[tuple[int, int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            cuts += _python_cut(node, lines)
    for first, last, marker in reversed(_outermost(cuts)):
        lines[first:last] = [marker]
    return elide_literals(_drop_blank("\n".join(lines)), PYTHON)


def _python_cut(
    node: ast.FunctionDef | ast.AsyncFunctionDef, lines: list[str]
) -> list[tuple[int, int, str]]:
    """The lines of a long function body to replace (0-based, end exclusive) and the marker;
    a docstring over several lines keeps its first line and says how many more went."""
    body = node.body
    doc = ast.get_docstring(node, clean=True)
    start = body[1].lineno if doc and len(body) > 1 else body[0].lineno
    end = node.end_lineno or start
    elided = sum(1 for line in lines[start - 1 : end] if line.strip())
    if elided <= BODY_LINES:
        return []
    indent = _indent(lines[body[0].lineno - 1])
    cuts = [(start - 1, end, f"{indent}...  # [overspill: {elided} lines elided]")]
    more = [line for line in (doc or "").splitlines()[1:] if line.strip()]
    if doc and more:
        first = doc.splitlines()[0]
        marker = f"[overspill: {len(more)} more docstring {_lines(len(more))} elided]"
        cuts.append(
            (body[0].lineno - 1, body[0].end_lineno or start, f'{indent}"""{first} {marker}"""')
        )
    return cuts


def _lines(count: int) -> str:
    return "line" if count == 1 else "lines"


def _outermost(cuts: list[tuple[int, int, str]]) -> list[tuple[int, int, str]]:
    """The cuts in order, without those inside an earlier one (nested functions)."""
    kept: list[tuple[int, int, str]] = []
    for cut in sorted(cuts, key=lambda c: (c[0], -c[1])):
        if not kept or cut[0] >= kept[-1][1]:
            kept.append(cut)
    return kept


def _indent(line: str) -> str:
    return line[: len(line) - len(line.lstrip())]


def _strip_python_comments(text: str) -> str:
    """Drop `#` comments with the tokenizer; a fragment that does not tokenize is kept as is."""
    try:
        tokens = list(tokenize.generate_tokens(io.StringIO(text).readline))
    except (tokenize.TokenError, IndentationError, SyntaxError):
        return text
    lines = text.splitlines(keepends=True)
    for token in reversed(tokens):
        if token.type == tokenize.COMMENT:
            row, col = token.start
            line = lines[row - 1]
            lines[row - 1] = line[:col].rstrip() + ("\n" if line.endswith("\n") else "")
    return "".join(lines)


_COMPACTORS: dict[str, Callable[[str], str]] = {
    "sql": compact_sql,
    "python": compact_python,
    "text": compact_text,
    "csharp": partial(compact_c_like, syntax=C_SHARP),
    "javascript": compact_c_like,
    "typescript": compact_c_like,
}
