"""Which language a document is in: its source's extension, else the signs in its text.

Each language has a handful of signs (a cheap keyword pre-check, then a pattern); the
language with the most signs wins when it has at least two, else the document is `text`.

Code that embeds SQL is the host language (C# whose queries sit in its strings is C#): once a
host language (C#, Python, JavaScript, TypeScript) shows a sign, SQL signs count only in the
host's own code, not inside its string literals or comments; SQL held only in the host's
literals is one more sign of the host, and a tie goes to the host.
"""

from __future__ import annotations

import re
from pathlib import PurePosixPath

from middleware.documents.syntax import SYNTAXES, code_only

SAMPLE_CHARS = 3000
"""Detection reads this much of a document; each sign is pre-checked by a keyword."""
MIN_SIGNS = 2
_EXTENSIONS = {
    ".sql": "sql", ".cs": "csharp", ".csx": "csharp", ".py": "python", ".pyi": "python",
    ".js": "javascript", ".mjs": "javascript", ".cjs": "javascript", ".jsx": "javascript",
    ".ts": "typescript", ".tsx": "typescript", ".mts": "typescript", ".txt": "text",
    ".md": "text", ".rst": "text",
}  # fmt: skip
_MEMBER = (
    r"\b(public|private|protected|internal)\s+((static|readonly|async|override|virtual)\s+)*"
    r"(void|string|int|long|bool|decimal|double|[A-Z]\w*(<[\w.,\s<>\[\]?]+>)?(\[\])?)\??"
    r"\s+\w+\s*[(=;]"
)
"""A C# method, field or property: a modifier, a type, then the name (TypeScript writes the
type after a colon)."""
_DAPPER = r"\.(Query(First|Single)?(OrDefault)?|Execute)(Async)?\s*<[\w.,\s<>\[\]?]+>\s*\("
"""Dapper's typed calls: `.Query<Order>(`, `.QueryFirstOrDefaultAsync<int>(`."""
_SIGNS: dict[str, tuple[tuple[str, str], ...]] = {
    "csharp": (
        ("using", r"\busing\s+System\b"),
        ("using", r"(?m)^\s*using\s+(static\s+)?[A-Z][\w.]*\s*;"),
        ("using", r"\busing\s*\(\s*var\b"),
        ("namespace", r"\bnamespace\s+[\w.]+"),
        ("public", r"\bpublic\s+(sealed\s+|static\s+|partial\s+)*class\b"),
        ("get;", r"\{\s*get;"),
        ("task", r"\basync\s+Task\b"),
        ("async", r"\.[A-Z]\w*Async\s*(<[\w.,\s<>\[\]]+>)?\s*\("),
        ("console.write", r"\bConsole\.Write"),
        ("]", r"(?m)^\s*\[\w+(\(.*\))?\]\s*$"),
        ("(", _MEMBER),
        ("new", r"\bnew\s*\{\s*\w"),
        ("new", r"\bnew\s+(Sql(Connection|Command|Parameter|DataAdapter)|StringBuilder)\s*\("),
        ("execute", r"\.(ExecuteReader|ExecuteScalar|ExecuteNonQuery)(Async)?\s*\("),
        ("command", r"\.CommandText\s*=|\.Parameters\.Add(WithValue|Range)?\s*\("),
        ("query", _DAPPER),
        (".to", r"\.To(List|Array|Dictionary|HashSet|String)(Async)?\(\)"),
        ("sql", r"\.(FromSql|ExecuteSql|SqlQuery)(Raw|Interpolated)?(Async)?\s*(<\w+>)?\("),
        ('@"', r"(?<![\w\"])\$?@\$?\""),
        ('@"', r"\b(var|string)\s+\w+\s*=\s*\$?@\$?\""),
        ("const", r"\bconst\s+(string|int|long|decimal|bool)\s+\w+\s*="),
        (" in ", r"\bfrom\s+\w+\s+in\s+[\w.]+"),
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
    "sql": (
        ("select", r"(?is)\bselect\b.+?\bfrom\b"),
        ("create", r"(?i)\bcreate\s+(or\s+replace\s+)?(table|view|procedure|function|index)\b"),
        ("insert", r"(?i)\binsert\s+into\b"),
        ("update", r"(?is)\bupdate\b\s+\w+\s+set\b"),
        ("join", r"(?i)\bjoin\b.+\bon\b"),
        ("where", r"(?i)\bwhere\b.+="),
        ("by", r"(?i)\bgroup\s+by\b|\border\s+by\b"),
    ),
}
"""Signs per language, hosts first: on a tie the language listed first wins."""


def detect_language(text: str, source: str | None = None) -> str:
    """The language of a document: from its source's extension, else by its content's signs."""
    if source:
        found = _EXTENSIONS.get(PurePosixPath(source.replace("\\", "/")).suffix.lower())
        if found:
            return found
    sample = text[:SAMPLE_CHARS]
    scores = {language: signs(sample, language) for language in _SIGNS}
    if scores["typescript"] and scores["javascript"] + scores["typescript"] >= MIN_SIGNS:
        scores["typescript"] += scores["javascript"]
    host = max((lang for lang in _SIGNS if lang != "sql"), key=lambda lang: scores[lang])
    if scores["sql"] and scores[host]:
        _count_embedded_sql(sample, host, scores)
    best = max(scores, key=lambda lang: scores[lang])
    return best if scores[best] >= MIN_SIGNS else "text"


def _count_embedded_sql(sample: str, host: str, scores: dict[str, int]) -> None:
    """SQL counted only in the host's own code; SQL that is all inside the host's string
    literals is a sign of the host (the query text of Dapper, ADO.NET, EF raw SQL)."""
    in_code = signs(code_only(sample, SYNTAXES[host]), "sql")
    if scores["sql"] >= MIN_SIGNS and not in_code:
        scores[host] += 1
    scores["sql"] = in_code


def signs(sample: str, language: str) -> int:
    """How many of a language's signs the sample shows."""
    lowered = sample.lower()
    return sum(key in lowered and bool(re.search(p, sample)) for key, p in _SIGNS[language])
