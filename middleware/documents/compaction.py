"""Language detection and deterministic, meaning-first compaction of retrieved documents.

Compaction removes what carries least meaning first, and marks every elision visibly:

- all code: comments and blank lines go (string literals are respected);
- long literal data is elided: string literals over `LONG_LITERAL` characters keep their head;
  SQL `INSERT ... VALUES` keeps its first rows; an array/list literal spanning more than
  `BODY_LINES` lines keeps its opening line;
- bodies longer than `BODY_LINES` lines are elided to their signatures: Python functions
  (found with `ast`, docstring's first line kept), C#/JavaScript/TypeScript methods and
  functions (a `(...)` header opening a brace block), SQL `BEGIN ... END` and `AS $$ ... $$`;
- plain text: trailing spaces and runs of blank lines and spaces collapse; no words go.

Every marker reads `[overspill: ... elided]`. The same input always gives the same output.
"""

from __future__ import annotations

import ast
import io
import re
import tokenize
from collections.abc import Callable
from pathlib import PurePosixPath

BODY_LINES = 12
LONG_LITERAL = 160
KEEP_ROWS = 2
SAMPLE_CHARS = 3000
"""Detection reads this much of a document; each sign is pre-checked by a keyword."""
_EXTENSIONS = {
    ".sql": "sql", ".cs": "csharp", ".csx": "csharp", ".py": "python", ".pyi": "python",
    ".js": "javascript", ".mjs": "javascript", ".cjs": "javascript", ".jsx": "javascript",
    ".ts": "typescript", ".tsx": "typescript", ".mts": "typescript", ".txt": "text",
    ".md": "text", ".rst": "text",
}  # fmt: skip
_SIGNS: dict[str, tuple[tuple[str, str], ...]] = {
    "sql": (
        ("select", r"(?is)\bselect\b.+?\bfrom\b"),
        ("create", r"(?i)\bcreate\s+(or\s+replace\s+)?(table|view|procedure|function|index)\b"),
        ("insert", r"(?i)\binsert\s+into\b"),
        ("update", r"(?is)\bupdate\b\s+\w+\s+set\b"),
        ("join", r"(?i)\bjoin\b.+\bon\b"),
        ("where", r"(?i)\bwhere\b.+="),
        ("by", r"(?i)\bgroup\s+by\b|\border\s+by\b"),
    ),
    "csharp": (
        ("using", r"\busing\s+System\b"),
        ("namespace", r"\bnamespace\s+[\w.]+"),
        ("public", r"\bpublic\s+(sealed\s+|static\s+|partial\s+)*class\b"),
        ("get;", r"\{\s*get;"),
        ("task", r"\basync\s+Task\b"),
        ("console.write", r"\bConsole\.Write"),
        ("]", r"(?m)^\s*\[\w+(\(.*\))?\]\s*$"),
        (
            "(",
            r"\b(public|private|protected|internal)\s+(static\s+)?(void|string|int|bool)\s+\w+\s*\(",
        ),
    ),
    "python": (
        ("def", r"(?m)^\s*def\s+\w+\(.*\)\s*(->\s*[^:]+)?:\s*$"),
        ("import", r"(?m)^\s*(import\s+\w+|from\s+[\w.]+\s+import\b)"),
        ("class", r"(?m)^\s*class\s+\w+(\(.*\))?:\s*$"),
        ("self.", r"\bself\."),
        ("elif", r"(?m)^\s*elif\b"),
        ("none", r"\bNone\b"),
        ("@", r"(?m)^\s*@\w+"),
    ),
    "typescript": (
        ("interface", r"\binterface\s+\w+\s*(<.*>)?\s*\{"),
        (":", r":\s*(string|number|boolean|void|unknown)\b"),
        ("type", r"(?m)^\s*(export\s+)?type\s+\w+\s*="),
        ("const", r"\bas\s+const\b"),
        (":", r"\b(private|readonly)\s+\w+\s*:"),
    ),
    "javascript": (
        ("function", r"\bfunction\s*\w*\s*\("),
        ("=", r"\b(const|let)\s+\w+\s*="),
        ("=>", r"=>"),
        ("console.log", r"\bconsole\.log\("),
        ("require(", r"\brequire\("),
        ("port", r"(?m)^\s*(import\s.+\sfrom\s+['\"]|export\s+(default|const|function|class)\b)"),
    ),
}
_C_LIKE = ("csharp", "javascript", "typescript")
_CONTROL = re.compile(
    r"^\s*(\}\s*)?(if|else|for|foreach|while|do|switch|catch|try|finally|using|lock|fixed|return)\b"
)


def detect_language(text: str, source: str | None = None) -> str:
    """The language of a document: from its source's extension, else by its content's signs."""
    if source:
        found = _EXTENSIONS.get(PurePosixPath(source.replace("\\", "/")).suffix.lower())
        if found:
            return found
    sample = text[:SAMPLE_CHARS]
    lowered = sample.lower()
    scores = {
        language: sum(key in lowered and bool(re.search(p, sample)) for key, p in signs)
        for language, signs in _SIGNS.items()
    }
    if scores["typescript"] and scores["javascript"] + scores["typescript"] >= 2:
        scores["typescript"] += scores["javascript"]
    best = max(scores, key=lambda lang: scores[lang])
    return best if scores[best] >= 2 else "text"


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


def strip_comments(text: str, line: str, block: tuple[str, str] | None, quotes: str) -> str:
    """Remove line and block comments outside string literals (a small scanner)."""
    out: list[str] = []
    i, n = 0, len(text)
    while i < n:
        ch = text[i]
        if ch in quotes:
            end = _string_end(text, i, ch)
            out.append(text[i:end])
            i = end
        elif text.startswith(line, i):
            newline = text.find("\n", i)
            i = n if newline < 0 else newline
        elif block and text.startswith(block[0], i):
            close = text.find(block[1], i + len(block[0]))
            i = n if close < 0 else close + len(block[1])
        else:
            out.append(ch)
            i += 1
    return "".join(out)


def _string_end(text: str, start: int, quote: str) -> int:
    """The index after a string literal opened at `start` (backslash escapes honoured)."""
    i = start + 1
    while i < len(text):
        if text[i] == "\\":
            i += 2
            continue
        if text[i] == quote:
            return i + 1
        if text[i] == "\n" and quote != "`":
            return i
        i += 1
    return len(text)


def elide_literals(text: str, quotes: str) -> str:
    """String literals longer than LONG_LITERAL characters keep their head and a marker."""
    pattern = "|".join(
        rf"{re.escape(q)}(?:\\.|[^{re.escape(q)}\\\n])*{re.escape(q)}" for q in quotes
    )

    def shorten(match: re.Match[str]) -> str:
        literal = match.group(0)
        if len(literal) <= LONG_LITERAL:
            return literal
        quote = literal[0]
        cut = len(literal) - 62
        return f"{literal[:60]}[overspill: {cut} chars elided]{quote}"

    return re.sub(pattern, shorten, text)


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


def compact_c_like(text: str) -> str:
    """C#, JavaScript, TypeScript: comments, #region lines and blank lines go; long literals
    and long method/function bodies and array literals are elided."""
    text = strip_comments(text, "//", ("/*", "*/"), "\"'`")
    text = "\n".join(ln for ln in text.splitlines() if not re.match(r"\s*#(end)?region\b", ln))
    text = elide_literals(_drop_blank(text), "\"'`")
    return elide_brace_bodies(text, _c_header)


def compact_sql(text: str) -> str:
    """SQL: comments and blank lines go; long literals, extra VALUES rows and long
    BEGIN ... END / $$ ... $$ bodies are elided."""
    text = _drop_blank(strip_comments(text, "--", ("/*", "*/"), "'\""))
    text = elide_literals(text, "'")
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
    """Procedure and function bodies over BODY_LINES lines keep their signature."""
    lines = text.splitlines()
    out: list[str] = []
    i = 0
    while i < len(lines):
        end = _sql_body_end(lines, i)
        if end is not None and end - i - 1 > BODY_LINES:
            out += [lines[i], f"  /* [overspill: {end - i - 1} lines elided] */", lines[end]]
            i = end + 1
            continue
        out.append(lines[i])
        i += 1
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
        return elide_literals(_drop_blank(text), "\"'")
    lines = text.splitlines()
    cuts: list[tuple[int, int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            cuts += _python_cut(node, lines)
    for first, last, marker in reversed(_outermost(cuts)):
        lines[first:last] = [marker]
    return elide_literals(_drop_blank("\n".join(lines)), "\"'")


def _python_cut(
    node: ast.FunctionDef | ast.AsyncFunctionDef, lines: list[str]
) -> list[tuple[int, int, str]]:
    """The lines of a long function body to replace (0-based, end exclusive) and the marker."""
    body = node.body
    doc = ast.get_docstring(node, clean=True)
    start = body[1].lineno if doc and len(body) > 1 else body[0].lineno
    end = node.end_lineno or start
    if end - start + 1 <= BODY_LINES:
        return []
    indent = _indent(lines[body[0].lineno - 1])
    marker = f"{indent}...  # [overspill: {end - start + 1} lines elided]"
    cuts = [(start - 1, end, marker)]
    if doc is not None:
        first = doc.splitlines()[0] if doc else ""
        cuts.append(
            (body[0].lineno - 1, body[0].end_lineno or body[0].lineno, f'{indent}"""{first}"""')
        )
    return cuts


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
    **{language: compact_c_like for language in _C_LIKE},
}
