"""The extraction prompts (versioned), the transcript they quote, and their answers' cleaning.

The model's answers are checked here: repeated lines, a third line of one template and
in-line loops are cut, lines echoing the prompt's own wording dropped, and note lines naming
a number the source never had or made mostly of words it never used (a small model's
elaboration) removed. The fact ledger
that follows the notes is ``ledger``; cutting to a token budget is ``cutting``.

``PROMPT_VERSION`` is part of a cached extraction's validity: bump it whenever a prompt, the
transcript rendering, the ledger's rules or the extraction's layout changes.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from difflib import SequenceMatcher

from kernel.types import Message

__all__ = [
    "DIGIT_TOKEN",
    "NOTES_HEADER",
    "PROMPT_VERSION",
    "SNAKE_TOKEN",
    "clean_output",
    "condense_prompt",
    "content_text",
    "content_words",
    "drop_unsupported",
    "focus_words_of",
    "looks_refused",
    "map_prompt",
    "merge_prompt",
    "render_transcript",
    "speaker",
]

PROMPT_VERSION = "x34"
NOTES_HEADER = "Notes:"
MIN_GROUNDED = 0.5  # share of a note line's words the source must contain
_LOOP_NGRAM = 8
TEMPLATE_MIN_WORDS = 4
TEMPLATE_LIKENESS = 0.7
"""Share of words in order that makes two note lines one template (word-level ratio)."""

_SYSTEM = (
    "You take notes on conversations for an assistant who will continue them without seeing "
    "them. You never answer or continue the conversation and never repeat these instructions."
)
_RULES = (
    "Rules:\n"
    '- short bullet lines starting with "- "\n'
    "- keep the user's goal, facts, decisions, preferences, open tasks and tool results that "
    "still matter\n"
    "- copy names, numbers, dates, codes and identifiers exactly\n"
    "- skip greetings, small talk and general explanations\n"
    "- never repeat a line"
)
_CONDENSE_SYSTEM = (
    "You condense one long message into notes for an assistant who cannot see it. You never "
    "answer the message and never repeat these instructions."
)
INSTRUCTIONS = "\n".join(
    [
        _SYSTEM,
        _RULES,
        _CONDENSE_SYSTEM,
        "Earlier notes:",
        "Conversation since then:",
        "Conversation:",
        "Message:",
        "<<<",
        ">>>",
        "Write notes on the conversation above.",
        "Write updated notes: keep every point of the earlier notes and add what the "
        "conversation adds.",
        "Notes on consecutive parts of one conversation:",
        "Merge them into one set of notes, keeping every point.",
        "Write notes on the message above, keeping every fact, number, date, name, code, "
        "identifier, requirement and question.",
        "The user's current question is:",
    ]
)
"""Every fixed sentence of the prompts: an answer line found in here is an echo, not a note."""

DIGIT_TOKEN = re.compile(r"[A-Za-z0-9_][\w.\-/:@]*\d[\w.\-/:@]*|\d[\w.\-/:@]*")
"""A token holding a digit (numbers, codes, versions): what notes must not invent."""
_REFUSAL = re.compile(
    r"^\W*(?:i'?m sorry|i am sorry|sorry,|i apologi[sz]e|i cannot|i can'?t|i'?m unable|"
    r"i am unable|i'?m not able|i am not able|as an ai|as a language model|unfortunately,? i|"
    r"error\b|\{\s*\"error\")",
    re.IGNORECASE,
)
SNAKE_TOKEN = re.compile(r"\b[A-Za-z]\w*_\w+\b")
"""A ``snake_case`` code identifier: a fact's key term, and what notes must not invent."""
_DOTTED = re.compile(r"(?<![\w.\-])(?:[\w\-]+/)*[A-Za-z_][\w\-]+(?:\.[A-Za-z_][\w\-]+)+")
"""A dotted name (a host, a file, a module path): notes that name one say it was named. Parts
of one letter ("e.g.", "i.e.") are prose, not names."""
_QUOTED = re.compile(r'"([^"\n]{1,80})"|`([^`\n]{1,80})`|\u201c([^\u201d\n]{1,80})\u201d')
"""A term in double quotes or backticks: notes that quote say it was said as written."""
_HEADING = re.compile(r"^\s*#*\s*(?:\**[A-Z][\w ]{0,30}:\**\s*)+$")
_TOKEN = re.compile(r"\w+")
"""A word, number or identifier, as a note line and the question are compared (`_restates`)."""


def content_text(message: Message) -> str:
    """A message's text: string content, text parts, and tool calls as ``called f(args)``."""
    content = message.get("content")
    if isinstance(content, str):
        parts = [content]
    elif isinstance(content, list):
        parts = [str(p.get("text", "")) for p in content if isinstance(p, Mapping)]
    else:
        parts = []
    for call in message.get("tool_calls") or ():
        function = (call.get("function") or {}) if isinstance(call, Mapping) else {}
        parts.append(f"called {function.get('name', '?')}({function.get('arguments', '')})")
    return "\n".join(p for p in parts if p)


def speaker(message: Message) -> str:
    """Who said it: the role, with the tool's name for tool results."""
    role = str(message.get("role", "user"))
    name = message.get("name")
    return f"{role}({name})" if role == "tool" and isinstance(name, str) and name else role


def render_transcript(messages: Sequence[Message]) -> str:
    """The messages as a plain transcript, one ``role: text`` block per message."""
    return "\n\n".join(f"{speaker(m)}: {content_text(m)}" for m in messages)


def _message_prompt(system: str, user: str) -> list[Message]:
    """A system + user prompt."""
    return [{"role": "system", "content": system}, {"role": "user", "content": user}]


def _focus_line(focus: str | None) -> str:
    """The sentence naming the user's current question, when known."""
    return f"The user's current question is: {focus.strip()}\n\n" if focus else ""


def _fenced(label: str, text: str) -> str:
    """A labelled block of content between ``<<<`` and ``>>>``."""
    return f"{label}\n<<<\n{text}\n>>>\n\n"


def _limit(max_words: int) -> str:
    """The rules, with the word limit."""
    return f"{_RULES}\n- at most {max_words} words"


def map_prompt(
    transcript: str, *, max_words: int, earlier_notes: str = "", focus: str | None = None
) -> list[Message]:
    """Ask for notes on one part of the conversation (updating earlier notes when given)."""
    if earlier_notes:
        body = _fenced("Earlier notes:", earlier_notes) + _fenced(
            "Conversation since then:", transcript
        )
        ask = (
            "Write updated notes: keep every point of the earlier notes and add what the "
            "conversation adds."
        )
    else:
        body, ask = _fenced("Conversation:", transcript), "Write notes on the conversation above."
    user = f"{body}{_focus_line(focus)}{ask}\n{_limit(max_words)}"
    return _message_prompt(_SYSTEM, user)


def merge_prompt(
    parts: Sequence[str], *, max_words: int, focus: str | None = None
) -> list[Message]:
    """Ask to merge notes on consecutive parts of one conversation into one set of notes."""
    body = "".join(_fenced(f"[Part {i}]", part) for i, part in enumerate(parts, 1))
    user = (
        f"Notes on consecutive parts of one conversation:\n\n{body}{_focus_line(focus)}"
        f"Merge them into one set of notes, keeping every point.\n{_limit(max_words)}"
    )
    return _message_prompt(_SYSTEM, user)


def condense_prompt(text: str, *, max_words: int, focus: str | None = None) -> list[Message]:
    """Ask to condense one oversized message."""
    user = (
        f"{_fenced('Message:', text)}{_focus_line(focus)}Write notes on the message above, "
        "keeping every fact, number, date, name, code, identifier, requirement and question."
        f"\n{_limit(max_words)}"
    )
    return _message_prompt(_CONDENSE_SYSTEM, user)


def content_words(text: str) -> frozenset[str]:
    """Lower-cased content words of four letters or more."""
    return frozenset(w.lower() for w in re.findall(r"[A-Za-z]{4,}", text))


FOCUS_STOP_WORDS = frozenset(
    (
        "what",
        "which",
        "when",
        "where",
        "with",
        "just",
        "answer",
        "value",
        "that",
        "this",
        "from",
        "have",
        "your",
        "about",
        "does",
        "were",
        "been",
        "will",
        "would",
        "should",
        "could",
        "there",
        "their",
        "them",
        "they",
        "into",
        "only",
        "please",
        "tell",
        "also",
        "then",
        "than",
        "some",
        "here",
    )
)
"""Words of a question that say how to answer, not what about ("Answer with just the value."):
a ledger line sharing only these with the question is not about it."""


def focus_words_of(focus: str | None) -> frozenset[str]:
    """The words a ledger line shares with the question (`focus`) to rank as about it: its
    content words without `FOCUS_STOP_WORDS`."""
    return content_words(focus) - FOCUS_STOP_WORDS if focus else frozenset()


def _cut_loop(line: str) -> str:
    """A line cut where a phrase of eight words starts repeating (a generation loop)."""
    words = line.split(" ")
    seen: set[tuple[str, ...]] = set()
    for i in range(len(words) - _LOOP_NGRAM + 1):
        gram = tuple(w.lower() for w in words[i : i + _LOOP_NGRAM])
        if gram in seen:
            return " ".join(words[:i]).rstrip(" ,;")
        seen.add(gram)
    return line


def clean_output(text: str, *, truncated: bool = False) -> str:
    """A model's notes without repeated lines (nor a third of one template), in-line loops,
    header echo or a cut last line."""
    lines = text.strip().removeprefix(NOTES_HEADER).splitlines()
    if truncated and len(lines) > 1:
        lines = lines[:-1]
    seen: set[str] = set()
    kept: list[str] = []
    shapes: list[list[str]] = []
    for raw in lines:
        line = _cut_loop(raw.rstrip())
        norm = " ".join(line.lower().split())
        if norm and (norm in seen or _is_echo(norm) or _third_of_a_kind(norm, shapes)):
            continue
        seen.add(norm)
        kept.append(line)
        shapes.append(_words(norm))
    return drop_empty_headings("\n".join(kept)).strip()


def _words(norm: str) -> list[str]:
    return re.findall(r"\w+", norm)


def _third_of_a_kind(norm: str, kept: Sequence[list[str]]) -> bool:
    """Whether a line is the third of one template: nearly the same words as two lines
    already kept ("Run the tests for the X module" again and again: a small model looping
    over a pattern of the conversation, not a note)."""
    words = _words(norm)
    if len(words) < TEMPLATE_MIN_WORDS:
        return False
    alike = 0
    for other in kept:
        if len(other) >= TEMPLATE_MIN_WORDS:
            matcher = SequenceMatcher(None, words, other, autojunk=False)
            if matcher.ratio() >= TEMPLATE_LIKENESS:
                alike += 1
                if alike >= 2:
                    return True
    return False


_ECHO_HAYSTACK = " ".join(INSTRUCTIONS.lower().split())
_ECHO_LINES = frozenset(
    " ".join(line.lower().lstrip("-*• ").split()) for line in INSTRUCTIONS.splitlines()
)


def _is_echo(norm: str) -> bool:
    """Whether a (normalised) answer line repeats the prompt's own wording."""
    body = norm.lstrip("-*• ").strip()
    return body in _ECHO_LINES or (len(body) >= 24 and body in _ECHO_HAYSTACK)


def looks_refused(text: str) -> bool:
    """Whether a model's answer is a refusal or an error text rather than notes."""
    return bool(_REFUSAL.match(text[:200]))


def drop_unsupported(notes: str, source: str, focus: str | None = None) -> str:
    """The notes without invented lines: a number, a code identifier (``snake_case``), a dotted
    name (``staging.example.com``) or a quoted term (in double quotes or backticks) the source
    never holds, mostly words the source never uses (a small model's elaboration), or a word
    only the user's current question (`focus`) uses: that line answers the question, and
    notes that did would tell the model it was said earlier. Asked for "the host name of the
    staging server", a small model writes 'The staging server's host name is
    "staging-server"' beside the user's ``ibis-756.staging.internal``, and a reader believes
    the notes first; unquoted, it writes "The staging server is located at
    staging.example.com".

    A line made only of the question's own words (`_restates`) goes too: it holds nothing
    the question does not, and it stays in the notes for every later question. Asked "What
    martial arts has John done?", a small model writes "John has done martial arts has John
    done?" as a note; each word is the source's, so no other rule drops it."""
    haystack = " ".join(source.lower().split())
    source_words = content_words(source)
    asked_only = content_words(focus or "") - source_words
    asked = frozenset(_TOKEN.findall((focus or "").lower()))
    kept = []
    for line in notes.splitlines():
        if asked and not _HEADING.match(line) and _restates(line, asked):
            continue
        tokens = {m.group(0).strip(".,:;-/").lower() for m in DIGIT_TOKEN.finditer(line)}
        tokens |= {m.group(0).lower() for m in SNAKE_TOKEN.finditer(line)}
        tokens |= {m.group(0).lower() for m in _DOTTED.finditer(line)}
        quoted = (m.group(m.lastindex or 0) for m in _QUOTED.finditer(line))
        tokens |= {" ".join(term.lower().split()) for term in quoted}
        words = content_words(line)
        share = len(words & source_words) / len(words) if words else 1.0
        grounded = share >= MIN_GROUNDED or bool(_HEADING.match(line))
        if grounded and not words & asked_only and all(t in haystack for t in tokens if len(t) > 1):
            kept.append(line)
    return drop_empty_headings("\n".join(kept)).strip()


def _restates(line: str, asked: frozenset[str]) -> bool:
    """Whether every word of `line` that can carry a fact (a number, an identifier, a word of
    four letters or more) is one of `asked`, the question's words: a note that only restates
    the question."""
    found = {
        token for token in _TOKEN.findall(line.lower()) if not (token.isalpha() and len(token) < 4)
    }
    return bool(found) and found <= asked


def drop_empty_headings(notes: str) -> str:
    """The notes without heading lines (``Name:``) that head no content."""
    lines = [line for line in notes.splitlines() if line.strip()]
    kept = [
        line
        for i, line in enumerate(lines)
        if not _HEADING.match(line) or (i + 1 < len(lines) and not _HEADING.match(lines[i + 1]))
    ]
    return "\n".join(kept)
