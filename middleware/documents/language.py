"""Which language a document is in: its source's extension, else the signs in its text.

Each language has a handful of signs (a cheap keyword pre-check, then a pattern); the
language with the most signs wins when it has at least two, else the document is `text`.
"""

from __future__ import annotations

import re
from pathlib import PurePosixPath

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
