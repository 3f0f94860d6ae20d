"""Select: the fact-bearing sentences of messages, quoted verbatim as ledger records. Pure.

Every fact-bearing sentence of the messages is quoted, in order, and scored (``fact_score``):
who said it (the user's first, then a tool's, then the assistant's), how surely it bears a
fact (``terms.fact_signal``), whether it shares a word with the question being answered. A
listing's lines (a tool result of many lines of one shape) rank last; its ``name = value``
lines (a file's settings) are quoted together, naming the call that read them; a tool's JSON
answer is read as such settings and rows (``structured``), not as one long sentence. An action is
quoted beside the request it answered, and a user's line beside the assistant's reply that
only confirmed it. Lines of a tool or the assistant that differ only in their numbers are a
template and rank with a listing's.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace

from kernel.types import Message
from middleware.condensing.ledger.records import (
    FOCUS_BONUS,
    LISTING,
    LISTING_SCORE,
    MIN_ASSISTANT_SIGNAL,
    NOTES,
    NOTES_SCORE,
    SETTING_SCORE,
    SETTINGS,
    TOOL_BONUS,
    USER_BONUS,
    Fact,
)
from middleware.condensing.ledger.structured import Structured, read_json
from middleware.condensing.ledger.terms import (
    IDENT_TOKEN,
    fact_signal,
    key_tokens,
    sentences,
    sets_standing_rule,
)
from middleware.condensing.prompt import (
    DIGIT_TOKEN,
    content_text,
    content_words,
    focus_words_of,
    speaker,
)

__all__ = [
    "MAX_LINE_CHARS",
    "SETTING",
    "call_sources",
    "confirms",
    "dedupe_facts",
    "demote_templates",
    "fact_lines",
    "fact_score",
    "is_focused",
    "is_listing",
    "quoted_part",
    "setting_pairs",
    "settings_lines",
    "with_request",
]

SETTING = re.compile(r"^[A-Za-z_][\w.-]*\s*[=:]\s*\S")
"""A ``name = value`` (or ``name: value``) line."""
SETTINGS_JOIN = "; "
"""What separates the settings on one ``tool settings`` line."""
MAX_SOURCE_CHARS = 80
"""The most of a tool call's name and arguments a settings line names as its source."""
LISTING_ROWS = 3
"""Lines of one shape in one tool result that make it a listing."""
MAX_LINE_CHARS = 300
QUOTED_MESSAGE_CHARS = 32_000
"""A longer message is quoted from its first and last halves of this only: a pasted document's
sentences cannot all fit a stand-in anyway, and reading megabytes took the ledger minutes of
CPU (~20 s per MB); per message, so what a message gives never depends on the others."""
MAX_REQUEST_CHARS = 160
"""A longer user's message is no request an action's line carries (it costs more than it tells)."""
MIN_REQUEST_WORDS = 2
"""Content words a request needs ("Thanks." or "go on" asks nothing)."""
MAX_CONFIRMATION_CHARS = 160
"""A longer assistant's reply says more than that it agreed: it is quoted on its own."""
CONFIRMATION_SHARE = 0.6
"""The least share of a reply's content words the user's line must hold for the reply to be
its confirmation ("Agreed, Jenkins it is for the mobile app.")."""
_ROW_PARTS = re.compile(r"[A-Za-z]+|\d+")
_TEMPLATE_PARTS = re.compile(r"\d+")


def fact_score(sentence: str, role: str, focus_words: frozenset[str] = frozenset()) -> int:
    """A ledger line's priority, or 0 when the sentence is no fact.

    The user's and tools' sentences count from signal 1, the assistant's from signal 3 (what
    it said is mostly reconstructible, but not the values it made up or the files it edited).
    The user's rank first (nothing can recover them), then the tools' (a tool can be asked
    again), then the assistant's; a question gets no role bonus (it states nothing); a
    sentence sharing a word
    with the focus ranks 2 higher. A listing's line (role ``tool listing``) scores
    `LISTING_SCORE` whatever it holds; a carried note line
    (role ``notes``) scores `NOTES_SCORE` when it bears a fact.
    """
    if role.endswith(LISTING):
        return LISTING_SCORE
    if role.endswith(SETTINGS):
        return SETTING_SCORE
    signal = fact_signal(sentence)
    if role == NOTES:
        return NOTES_SCORE if signal >= MIN_ASSISTANT_SIGNAL else 0
    who = role.split("(")[0]
    if signal < (1 if who in ("user", "tool") else MIN_ASSISTANT_SIGNAL):
        return 0
    focused = is_focused(sentence, focus_words)
    bonus = USER_BONUS if who == "user" else TOOL_BONUS if who == "tool" else 0
    if sentence.rstrip().endswith("?") and not (who == "user" and sets_standing_rule(sentence)):
        bonus = 0  # a question states nothing (but a standing request said as one does)
    return signal + bonus + (FOCUS_BONUS if focused else 0)


def is_focused(text: str, focus_words: frozenset[str]) -> bool:
    """Whether the text shares a word with the focus (``focus_words_of``)."""
    return bool(focus_words and focus_words & content_words(text))


def _clip(sentence: str) -> str:
    """A sentence cut to a window around its first key token when it is over-long."""
    if len(sentence) <= MAX_LINE_CHARS:
        return sentence
    hit = DIGIT_TOKEN.search(sentence) or IDENT_TOKEN.search(sentence)
    start = max(0, (hit.start() if hit else 0) - MAX_LINE_CHARS // 3)
    piece = sentence[start : start + MAX_LINE_CHARS].strip()
    return ("…" if start else "") + piece + "…"


def _row_shape(line: str) -> str:
    """A line's shape with its words and numbers masked (``a/a/a.a:0:    a_a(a, a)``)."""
    return _ROW_PARTS.sub(lambda m: "0" if m.group(0).isdigit() else "a", line)


def is_listing(lines: Sequence[str]) -> bool:
    """Whether a tool's result is a listing: at least `LISTING_ROWS` of its lines share their
    shape (search hits, test results, a config file's settings)."""
    shapes = Counter(_row_shape(line) for line in lines)
    return bool(shapes) and shapes.most_common(1)[0][1] >= LISTING_ROWS


def fact_lines(
    messages: Sequence[Message], focus: str | None = None, positions: Sequence[int] = ()
) -> list[Fact]:
    """The fact ledger: every fact-bearing sentence of the messages, verbatim, in order; a
    user's short message (`MAX_LINE_CHARS`) is one line, scored by its best sentence, so a
    correction or a finished step keeps the sentence that says what replaced it.

    A listing's lines are quoted as ``tool listing`` and score `LISTING_SCORE`: each holds
    little on its own and hundreds of them would crowd out every other fact; they are quoted
    last and otherwise accounted for on the merged line. A listing's ``name = value`` lines
    (a file's settings) are quoted together as ``tool settings`` lines (``settings_lines``)
    naming the call that read them. A user's request that holds no fact rides on the first
    line of the action that answered it (``Fact.asked``), and the assistant's reply that
    only confirmed a user's line rides on that line (``Fact.confirmed``). Each record names
    the message it came from (``Fact.index``: its index in the request, `positions`, when
    given one per message, else its place among `messages`) and, for a tool's, the call that
    read it."""
    focus_words = focus_words_of(focus)
    found: list[Fact] = []
    sources: dict[str, str] = {}
    request = ""  # the user's latest request, while no action's line has taken it
    stated: list[int] = []  # where the previous message's user lines are in `found`
    where = positions if len(positions) == len(messages) else range(len(messages))
    for index, message in zip(where, messages, strict=True):
        role = speaker(message)
        sources.update(call_sources(message))
        text = content_text(message)
        data = read_json(text) if role.startswith("tool") else None  # no sentences to split
        found_in = sentences(quoted_part(text)) if data is None else []
        if role == "assistant" and not message.get("tool_calls"):
            reply = " ".join(found_in)
            line = next((i for i in reversed(stated) if confirms(found[i].text, reply)), None)
            if line is not None:  # "Agreed, X it is.": said with the line it repeats
                found[line] = replace(found[line], confirmed=reply)
                stated = []
                continue
        source = sources.get(str(message.get("tool_call_id")), "")
        made = (
            _data_facts(role, data, source, focus_words)
            if data is not None
            else _message_facts(role, found_in, source, focus_words)
        )
        quoted = [replace(fact, index=index, source=source) for fact in made]
        stated = [len(found) + i for i in range(len(quoted))] if role == "user" else []
        if role == "user":
            request = "" if quoted else _request(found_in)
        elif request and (role.startswith("tool") or message.get("tool_calls")):
            first = next(
                (i for i, fact in enumerate(quoted) if not fact.role.endswith((LISTING, SETTINGS))),
                None,
            )
            if first is not None:  # the action's first line says what it was for
                quoted[first] = with_request(quoted[first], request, focus_words)
                request = ""
        found += quoted
    return demote_templates(dedupe_facts(found))


def quoted_part(text: str) -> str:
    """What the ledger reads of a message's text: all of it, or its first and last halves
    of `QUOTED_MESSAGE_CHARS` (cut at whitespace) when it is longer."""
    if len(text) <= QUOTED_MESSAGE_CHARS:
        return text
    half = QUOTED_MESSAGE_CHARS // 2
    head = text[:half].rsplit(None, 1)[0]
    tail = text[-half:].split(None, 1)[-1]
    return f"{head}\n\n{tail}"


def _message_facts(
    role: str,
    found_in: Sequence[str],
    source: str,
    focus_words: frozenset[str],
) -> list[Fact]:
    """One message's ledger lines (``fact_lines``); `source`: what its tool call read."""
    if role == "user" and len(found_in) > 1 and sum(map(len, found_in)) <= MAX_LINE_CHARS:
        score = max(fact_score(sentence, role, focus_words) for sentence in found_in)
        text = " ".join(found_in)  # one short message, one line: "done X. Next is Y" together
        focused = is_focused(text, focus_words)
        return [Fact(role, text, score, focused=focused, rule="message")] if score > 0 else []
    found: list[Fact] = []
    listing = role.startswith("tool") and is_listing(found_in)
    settings = [s for s in found_in if SETTING.match(s)] if listing else []
    found += _settings_facts(role, settings, source, focus_words)
    for sentence in found_in:
        if listing and SETTING.match(sentence):
            continue
        said = f"{role} {LISTING}" if listing else role
        score = fact_score(sentence, said, focus_words)
        if score > 0:
            focused = is_focused(sentence, focus_words)
            rule = LISTING if listing else "said"
            found.append(Fact(said, _clip(sentence), score, focused=focused, rule=rule))
    return found


def _data_facts(
    role: str, data: Structured, source: str, focus_words: frozenset[str]
) -> list[Fact]:
    """A JSON answer's ledger lines: its settings on ``tool settings`` lines naming the call,
    then its listings' rows as a listing's lines."""
    found = _settings_facts(role, data.settings, source, focus_words)
    listed = f"{role} {LISTING}"
    for row in data.rows:
        text = _clip(row)
        score = fact_score(text, listed, focus_words)
        found.append(Fact(listed, text, score, focused=is_focused(text, focus_words), rule=LISTING))
    return found


def _settings_facts(
    role: str, settings: Sequence[str], source: str, focus_words: frozenset[str]
) -> list[Fact]:
    """``name = value`` settings on ``tool settings`` lines naming what read them."""
    said = f"{role} {SETTINGS}"
    return [
        Fact(said, text, fact_score(text, said, focus_words),
             focused=is_focused(text, focus_words), rule=SETTINGS)
        for text in settings_lines(settings, source)
    ]  # fmt: skip


def _request(found_in: Sequence[str]) -> str:
    """A user's message that holds no fact, as the request an action's line carries: when it
    is short (`MAX_REQUEST_CHARS`) and asks something (`MIN_REQUEST_WORDS`); else empty."""
    text = " ".join(found_in)
    if len(text) > MAX_REQUEST_CHARS or len(content_words(text)) < MIN_REQUEST_WORDS:
        return ""
    return text


def confirms(line: str, reply: str) -> bool:
    """Whether an assistant's reply is a confirmation of a user's `line`: short
    (`MAX_CONFIRMATION_CHARS`), mostly (`CONFIRMATION_SHARE` of its content words) the
    line's words, and no key term the line lacks (a value it adds is a fact of its own).
    Without it a small model shown "we go with X for P; Y is out" may answer Y; alone, a
    reply that only repeats the user ranks as an echo (``settled``), is rarely quoted, and
    tells nothing the line does not."""
    words = content_words(reply)
    if (
        not words
        or len(reply) > MAX_CONFIRMATION_CHARS
        or not key_tokens(reply) <= key_tokens(line)
    ):
        return False
    return len(words & content_words(line)) >= CONFIRMATION_SHARE * len(words)


def with_request(fact: Fact, request: str, focus_words: frozenset[str]) -> Fact:
    """The line carrying the request it answered; a request sharing a word with the focus
    ranks the line as if the line itself did."""
    focused = is_focused(request, focus_words) and not fact.focused
    bonus = FOCUS_BONUS if focused else 0
    return replace(fact, asked=request, score=fact.score + bonus, focused=fact.focused or focused)


def call_sources(message: Message) -> dict[str, str]:
    """For each tool call of an assistant's message, by call id, what it read: its name and
    its short string arguments (``read_file config/report.toml``)."""
    found: dict[str, str] = {}
    for call in message.get("tool_calls") or ():
        if not isinstance(call, Mapping) or not isinstance(call.get("id"), str):
            continue
        function = call.get("function")
        if not isinstance(function, Mapping):
            continue
        try:
            arguments = json.loads(str(function.get("arguments") or "{}"))
        except ValueError:
            arguments = {}
        values = arguments.values() if isinstance(arguments, dict) else ()
        said = [str(function.get("name") or "")]
        said += [v for v in values if isinstance(v, str) and 0 < len(v) <= MAX_SOURCE_CHARS]
        source = " ".join(part for part in said if part)
        if source:
            found[call["id"]] = " ".join(source.split())[:MAX_SOURCE_CHARS]
    return found


def settings_lines(settings: Sequence[str], source: str = "") -> list[str]:
    """A file's ``name = value`` lines as few ledger lines: each starts with what read
    them in brackets, then as many settings as `MAX_LINE_CHARS` holds, ``; ``-separated, so
    a setting's name stays beside its value and the file's name beside both (a small model answers
    "what is X in that file" from the line, not from terms far apart). A setting longer
    than a line is clipped alone."""
    source = source.replace("[", "(").replace("]", ")")
    head = f"[{source}] " if source else ""
    out: list[str] = []
    current: list[str] = []
    for setting in settings:
        setting = _clip(setting)
        if current and len(head) + len(SETTINGS_JOIN.join([*current, setting])) > MAX_LINE_CHARS:
            out.append(head + SETTINGS_JOIN.join(current))
            current = []
        current.append(setting)
    if current:
        out.append(head + SETTINGS_JOIN.join(current))
    return out


def setting_pairs(text: str) -> list[str]:
    """The ``name = value`` settings of a ``tool settings`` line (its source left out)."""
    if text.startswith("[") and "] " in text:
        text = text.split("] ", 1)[1]
    return [part.strip() for part in text.split(SETTINGS_JOIN) if SETTING.match(part.strip())]


def demote_templates(facts: Sequence[Fact]) -> list[Fact]:
    """The facts with template lines scored `LISTING_SCORE`: a tool's or the assistant's
    lines that differ only in their numbers (``16 passed in 5s``, ``There are 13 call
    sites``). The user's are never demoted: a repeated shape there may be a correction."""
    shapes = [
        None if fact.role == "user" else (fact.role, _TEMPLATE_PARTS.sub("0", fact.text))
        for fact in facts
    ]
    seen = Counter(shape for shape in shapes if shape is not None)
    return [
        replace(
            fact,
            score=min(fact.score, LISTING_SCORE),
            rule=fact.rule if fact.merged else "template",
        )
        if shape is not None and seen[shape] > 1
        else fact
        for fact, shape in zip(facts, shapes, strict=True)
    ]


def _demoted(fact: Fact) -> str:
    """The rule of a line demoted as a template (a merged line stays one)."""
    return fact.rule if fact.merged else "template"


def dedupe_facts(facts: Iterable[Fact]) -> list[Fact]:
    """Facts without exact repeats (same text, whitespace and case aside), first kept."""
    seen: set[str] = set()
    out: list[Fact] = []
    for fact in facts:
        norm = " ".join(fact.text.lower().split())
        if norm not in seen:
            seen.add(norm)
            out.append(fact)
    return out
