"""Where a language's comments and string literals are: one small scanner for all of them.

Compaction drops comments and shortens long literals; language detection ignores what a
host language says inside its literals (the SQL in a C# string). Both need the same answer
to "is this character code, comment or literal?", and a wrong answer either side removes code
silently (a `//` inside a C# verbatim string is not a comment), so it is answered once, here.

The scanner is lexical, not a parser: it knows each family's quotes, escapes and comment
openers. Unterminated literals run to the end of their line (to the end of the text when they
may span lines), so an oddity makes it keep more, never drop more.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Literal

Kind = Literal["code", "comment", "literal"]


@dataclass(frozen=True, slots=True)
class Syntax:
    """A language family's comments and literals, as far as the scanner needs them."""

    line_comment: str
    block_comment: tuple[str, str] | None = None
    quotes: str = "\"'"
    """Literals that end at the end of their line."""
    multiline_quotes: str = ""
    """Literals that may span lines (JavaScript's template strings, SQL's strings)."""
    triple_quotes: bool = False
    """Python's `\"\"\"...\"\"\"` and `'''...'''`."""
    verbatim: bool = False
    """C#'s `@"..."` (a doubled `""` is a quote, no backslash escapes) and `\"\"\"raw\"\"\"`."""
    escapes_in_code: bool = False
    """A backslash outside literals escapes the next character (JavaScript regex literals)."""
    opener: re.Pattern[str] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        starts = [re.escape(self.line_comment)]
        if self.block_comment:
            starts.append(re.escape(self.block_comment[0]))
        if self.verbatim:
            starts += [r"\$?@\$?\"", r"\$*\"{3,}"]
        if self.triple_quotes:
            starts += ['"""', "'''"]
        starts += [re.escape(q) for q in self.quotes + self.multiline_quotes]
        if self.escapes_in_code:
            starts.append(r"\\")
        object.__setattr__(self, "opener", re.compile("|".join(starts)))


C_SHARP = Syntax("//", ("/*", "*/"), quotes="\"'", verbatim=True)
JAVASCRIPT = Syntax("//", ("/*", "*/"), quotes="\"'", multiline_quotes="`", escapes_in_code=True)
SQL = Syntax("--", ("/*", "*/"), quotes="", multiline_quotes="'\"")
PYTHON = Syntax("#", None, quotes="\"'", triple_quotes=True)
SYNTAXES = {"csharp": C_SHARP, "javascript": JAVASCRIPT, "typescript": JAVASCRIPT,
            "sql": SQL, "python": PYTHON}  # fmt: skip
"""The syntax of each language that has comments and literals (not `text`)."""


def spans(text: str, syntax: Syntax) -> Iterator[tuple[Kind, int, int]]:
    """The text cut into code, comment and literal spans, in order, covering all of it."""
    i, n = 0, len(text)
    while i < n:
        found = syntax.opener.search(text, i)
        if found is None:
            yield "code", i, n
            return
        if found.start() > i:
            yield "code", i, found.start()
        kind, end = _span_at(text, found.start(), found.group(), syntax)
        yield kind, found.start(), end
        i = end


def _span_at(text: str, start: int, opener: str, syntax: Syntax) -> tuple[Kind, int]:
    """The kind and end of the comment, literal or escape that `opener` starts."""
    if opener == syntax.line_comment:
        newline = text.find("\n", start)
        return "comment", len(text) if newline < 0 else newline
    if syntax.block_comment and opener == syntax.block_comment[0]:
        close = text.find(syntax.block_comment[1], start + len(opener))
        return "comment", len(text) if close < 0 else close + len(syntax.block_comment[1])
    if opener == "\\":
        return "code", min(len(text), start + 2)
    if opener.endswith('"') and "@" in opener:
        return "literal", _verbatim_end(text, start + len(opener))
    quotes = opener.lstrip("$")
    if len(quotes) >= 3:
        close = text.find(quotes, start + len(opener))
        return "literal", len(text) if close < 0 else close + len(quotes)
    multiline = opener in syntax.multiline_quotes
    return "literal", _string_end(text, start, opener, multiline)


def _string_end(text: str, start: int, quote: str, multiline: bool) -> int:
    """The index after a literal opened at `start` (backslash escapes honoured)."""
    i = start + 1
    while i < len(text):
        ch = text[i]
        if ch == "\\":
            i += 2
            continue
        if ch == quote:
            return i + 1
        if ch == "\n" and not multiline:
            return i
        i += 1
    return len(text)


def _verbatim_end(text: str, i: int) -> int:
    """The index after a C# verbatim literal whose content starts at `i` (`""` is a quote)."""
    while True:
        close = text.find('"', i)
        if close < 0:
            return len(text)
        if not text.startswith('""', close):
            return close + 1
        i = close + 2


def strip_comments(text: str, syntax: Syntax) -> str:
    """The text without its comments; a comment spanning lines leaves its line breaks, so
    no two lines of code are joined."""
    kept = (
        "\n" * text.count("\n", start, end) if kind == "comment" else text[start:end]
        for kind, start, end in spans(text, syntax)
    )
    return "".join(kept)


def code_only(text: str, syntax: Syntax) -> str:
    """The text without its comments and with every literal emptied to `""`."""
    kept = (
        text[start:end] if kind == "code" else '""' if kind == "literal" else ""
        for kind, start, end in spans(text, syntax)
    )
    return "".join(kept)
