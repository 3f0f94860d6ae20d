"""The fact ledger: fact-bearing sentences quoted verbatim from the conversation.

An extraction is two sections: the model's structured notes, and a fact ledger of
fact-bearing sentences quoted verbatim from the conversation (numbers, codes, dates, names,
identifiers, decisions, preferences). The ledger is built deterministically, without a model,
so a small model that paraphrases, loops or forgets cannot lose a planted fact. A growth
quotes anew every message the previous extraction stands in for, when the request holds them
(the splice's case: ``extraction.extract_history``), and ranks the whole ledger for the room it
has now; without them it parses the previous ledger back (``parse_extraction``) and carries it
forward, and the rules below for parsed-back lines apply. Under budget pressure ledger
lines go in this order: lines whose key tokens the notes or other lines already hold, then
the lowest-ranked (the assistant's before the user's and tools'), then the longest.

No fact is dropped silently. A fact's *key terms* are the tokens it hangs on (anything with a
digit, code identifiers, runs of capitalised names: ``key_spans``). Every line that has to go
is accounted for on one visible ``- merged(N facts): `key` `key` …`` line: N counts it (and
every fact an earlier merged line held: an earlier merged line is always folded into the new
one, never quoted beside it), and its key terms are listed there unless the notes
or a kept line already hold them. Only when even the key terms do not fit does the merged line
list fewer of them, and it then says how many terms were left out. So for every fact that came
in, its key terms are in the output, or a visible count on the merged line includes it. An
earlier merged line's terms rank above a listing's rows: no row is quoted while they are left
out.

A file's ``name = value`` lines (a listing of settings) are quoted together, a few lines of
``[call that read it] name = value; name = value``: the file's name stays beside each value
and the value beside its name. When such a line does not fit, each ``name = value`` stays
one term on the merged line (a value listed apart from its name answers nothing); parsed back,
those terms are a settings line again (``regained_settings``, naming no file), so a growth
that squeezed them onto the merged line does not rank them below every quoted line for good.

An action is quoted beside the request it answered. A user's short message that holds no
fact is quoted nowhere on its own ("Please fix the rounding bug in the invoice totals."), yet
without it "called edit_file(src/billing/x.py)" answers nothing about the rounding bug. The
first line quoted from the tool calls or tool results that answered it carries it: a
``- user:`` line rendered just before its own, which goes and stays with it and adds no key
term. Parsed back, a ``- user:`` line that bears no fact is such a request, of the line after.

A user's line is quoted with the assistant's reply that confirmed it. "Decision: we go with
Jenkins for the mobile app; CircleCI is out." alone leads a small model to answer the option
named last; the whole history has "Agreed, Jenkins it is for the mobile app." after it. Such
a reply (short, mostly the line's words: ``confirms``) is not quoted on its own, where it
would rank as an echo of the user's values and seldom be kept: it is rendered as a
``- assistant:`` line just after the user's line, goes and stays with it, and adds no key
term. Parsed back, an assistant's line that confirms the user's line before it is that line's.
Ranked short of room, the confirmation of a line taking no decision goes first; a decision's
stays as long as its line does, and is rendered first, on the line's own bullet:
``- decided: Agreed, Jenkins it is for the mobile app. (user: Decision: we go with Jenkins
for the mobile app; CircleCI is out.)``. Rendered after the user's line, the confirmation
was in view and a small model still answered the option named last (the rejected one) in 4
of 11 tuned conversations; with the confirmation first, in 1 of 11.

An earlier note line the new notes lost comes back as a ``- notes:`` line, ranked below what
anyone stated; one that copies a listing's row (the model copied search hits into its notes)
is a ``- notes listing:`` line and ranks as the listing's rows do.

A user's statement a later one corrects is not quoted beside its correction (a small model
picks either side of the two): it goes like any line that does not fit, and the correction
holds its old value (``corrections``). An assistant's line that only repeats values the user
or a tool stated ranks with a listing's.

The quoted user statements also judge the model's notes: a note line that states a subject
the user stated, without the user's latest value, is a guess and is dropped
(``drop_contradicted``). A note line that copies what the ledger quotes (its lines, a listing's
rows) is dropped too (``drop_copied``): the ledger ranks that line with the rest.

The ledger's rules and the extraction's layout are part of a cached extraction's validity:
bump ``extraction_prompt.PROMPT_VERSION`` whenever they change.
"""

from __future__ import annotations

import functools
import json
import re
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace

from kernel.tokens import count_text
from kernel.types import Message
from middleware.condensing.corrections import Line, contradicts, settle
from middleware.condensing.cutting import cut_tail
from middleware.condensing.prompt import (
    DIGIT_TOKEN,
    NOTES_HEADER,
    SNAKE_TOKEN,
    content_text,
    content_words,
    focus_words_of,
    speaker,
)

__all__ = [
    "FACTS_HEADER",
    "FactLine",
    "assemble",
    "call_sources",
    "confirmation_score",
    "confirms",
    "copied_rows_demoted",
    "dedupe_facts",
    "demote_templates",
    "drop_contradicted",
    "drop_copied",
    "fact_lines",
    "fact_score",
    "fact_signal",
    "growth_facts",
    "is_carried_note",
    "key_spans",
    "key_tokens",
    "layout",
    "ledger_tokens",
    "merged_count",
    "merged_terms",
    "notes_room",
    "parse_extraction",
    "regained_settings",
    "select_facts",
    "sentences",
    "setting_pairs",
    "settings_lines",
    "settled",
    "settles",
]

FACTS_HEADER = "Quoted facts (verbatim from earlier turns):"
MIN_ASSISTANT_SIGNAL = 3
USER_BONUS = 6
"""What the user said on purpose and nothing can recover ranks first."""
TOOL_BONUS = 2
"""A tool's result can be fetched again; it ranks between the user's and the assistant's."""
FOCUS_BONUS = 2
"""A line sharing a word with the focus (the question being answered) ranks this higher."""
LISTING_SCORE = 1
"""A listing's line (search hits, test lines, a file's lines of one shape): kept last."""
LISTING = "listing"
"""The role suffix of a listing's lines (``tool listing``)."""
SETTINGS = "settings"
"""The role suffix of a listing's ``name = value`` lines (``tool settings``)."""
SETTING_SCORE = 5
"""A file's settings, one ``tool settings`` line per `MAX_LINE_CHARS` naming the file, hold
values the conversation may ask about: they rank as an assistant's line stating a value
(`MIN_ASSISTANT_SIGNAL` + 2), above its explanations, a listing's rows and templates, below
the user's and a tool's statements; among equals the longer line goes first."""
REGAINED_SETTING_SCORE = SETTING_SCORE - 1
"""Settings an earlier growth could only list on the merged line, quoted again
(``regained_settings``): below a quoted setting and an assistant's stated value, which they
lost to once, above carried notes, merged terms and a listing's rows."""
NOTES_SCORE = 3
"""A note line carried from earlier notes (role ``notes``): below statements and settings."""
_SETTING = re.compile(r"^[A-Za-z_][\w.-]*\s*[=:]\s*\S")
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
CONFIRMATION_SCORE = MIN_ASSISTANT_SIGNAL
"""A confirmation of a line taking no decision adds no fact: it ranks with the assistant's
explanations and carried notes, below every line stating a value or an action (an edit's call
line, at signal 4 and longer, would go first on a tie); `FOCUS_BONUS` higher when its line is
about the question, never above its line."""
CONFIRMATION_SHARE = 0.6
"""The least share of a reply's content words the user's line must hold for the reply to be
its confirmation ("Agreed, Jenkins it is for the mobile app.")."""
LAYOUT_TOKENS = 24
"""Tokens the layout (headers, bullets) adds around the notes and the quoted facts."""
LEDGER_SHARE = 0.6
"""The quoted facts' share of an extraction's target, at most."""
MERGED_SHARE = 0.25
"""The most of the quoted facts' room the merged line's terms may claim from quoted lines."""
MIN_NOTES_TOKENS = 32
MAX_SELECT_EXACT = 300

_IDENT_TOKEN = re.compile(
    r"\b[\w.-]*/[\w./-]*\.[A-Za-z]\w{0,5}\b|`[^`\n]{1,80}`|"
    + SNAKE_TOKEN.pattern
    + r"|\b[a-z]+[A-Z]\w*\b|\b\w+\.\w+\(\)|\b[\w.+-]+@[\w-]+\.\w+"
)
_NAME_RUN = re.compile(r"(?<![.!?:]\s)(?<!^)\b[A-Z][a-z]+(?:\s+[A-Z][a-z]+)+")
_CAPITAL = re.compile(r"(?<!^)(?<![.!?]\s)\b[A-Z][a-z]{2,}\b")
_DATE_WORD = re.compile(
    r"\b(?:january|february|march|april|june|july|august|september|october|november|december|"
    r"jan|feb|mar|apr|jun|jul|aug|sep|sept|oct|nov|dec)\b|"
    r"(?-i:(?<!^)\bMay\b)|\bmay\s+\d{1,2}\b|"  # the month, not "you may not"
    r"\b(?:mon|tues|wednes|thurs|fri|satur|sun)days?\b|\b(?:tomorrow|yesterday|tonight)\b",
    re.IGNORECASE,
)
"""A month or a day: whole words ("decided", "separate" and "market" are none), and "may"
only capitalised inside a sentence or before a day's number."""
_DECISION = re.compile(
    r"\b(?:decided|decision|agreed|chose|chosen|prefer\w*|picked|settled on|switch(?:ed)? to|"
    r"always|never|must|don'?t|do not|deadline|remember|my name|call me|todo|password|budget|"
    r"edited|written|created|deleted|renamed|fixed|(?:edit|write|create|delete|rename)_\w+)\b",
    re.IGNORECASE,
)
"""Words that take a decision, state a standing rule or preference, or record a change made:
a short list of English verbs and nouns of deciding (not the phrasings of any one
conversation), documented in docs/guides/long-conversations.md."""
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z0-9\"'(\[`])")
_FACT_LINE = re.compile(r"^- ([\w()\-. ]{1,40}): (.*)$")
_MERGED_ROLE = re.compile(r"^merged\((\d+) facts?\)$")
MERGED_ROLE = "merged({} facts)"
LEFT_OUT = "[… {} more key terms left out: no room]"
_LEFT_OUT_TOKENS = 16
DECIDED = "decided"
"""The role of a decision's line rendered after its confirmation (``FactLine.render``)."""
_DECIDED_BODY = re.compile(r"^(.+?) \((user): (.+)\)$")
"""A ``decided`` line's body: the confirmation (short, first), then the user's line, which
may hold parentheses of its own."""


@dataclass(frozen=True, slots=True)
class FactLine:
    """One fact-bearing sentence quoted verbatim, with who said it and how fact-dense it is."""

    role: str
    text: str
    score: int
    asked: str = ""
    """The user's request this line answered, quoted nowhere else, rendered before it."""
    confirmed: str = ""
    """The assistant's short reply repeating this (user's) line, rendered after it."""
    focused: bool = False
    """Whether the line (or the request it carries) shares a word with the focus, the
    question being answered (``focus_words_of``); a stated line ranks `FOCUS_BONUS` higher
    for it, and so does its confirmation (``confirmation_score``)."""

    def render(self) -> str:
        """The ledger line: ``- role: text``, after ``- user: asked`` when it has a request
        and before ``- assistant: confirmed`` when the assistant's reply repeated it; a
        decision's confirmation comes first, on one ``- decided: confirmed (role: text)``
        line (``settles``)."""
        if self.confirmed and settles(self):
            return f"- {DECIDED}: {self.confirmed} ({self.role}: {self.text})"
        line = f"- {self.role}: {self.text}"
        if self.asked:
            line = f"- user: {self.asked}\n{line}"
        return f"{line}\n{self.confirmation()}" if self.confirmed else line

    def confirmation(self) -> str:
        """The ledger line of the assistant's confirmation (empty without one)."""
        return f"- assistant: {self.confirmed}" if self.confirmed else ""


def notes_room(target_tokens: int, ledger_tokens: int) -> int:
    """Tokens the notes may take beside a ledger of `ledger_tokens` (itself capped at
    `LEDGER_SHARE` of the target)."""
    ledger = min(ledger_tokens, int(target_tokens * LEDGER_SHARE))
    return max(MIN_NOTES_TOKENS, target_tokens - ledger - LAYOUT_TOKENS)


def ledger_tokens(facts: Sequence[FactLine], model: str = "") -> int:
    """Tokens the facts cost as ledger lines."""
    return sum(count_text(fact.render(), model) + 1 for fact in facts)


@functools.lru_cache(maxsize=1024)
def key_spans(text: str) -> tuple[str, ...]:
    """The terms a fact hangs on, as written, in order and without case-blind repeats:
    anything with a digit, code identifiers, runs of capitalised names, then capitalised
    words inside a sentence, since a lone name is a fact too (cached: a ledger's
    lines come back at every growth; each entry keeps its fact's text, ~1.5 KB, so the
    cache holds the lines of a few busy conversations' ledgers, ~2 MB, not every fact
    ever seen)."""
    digits = [m.span() for m in DIGIT_TOKEN.finditer(text)]
    found = [text[start:end].strip(".,:;-/") for start, end in digits]
    found += [  # an identifier, not a part of a term with a digit (a path before `:46`)
        m.group(0).strip("`")
        for m in _IDENT_TOKEN.finditer(text)
        if not any(start <= m.start() and m.end() <= end for start, end in digits)
    ]
    runs = [m.span() for m in _NAME_RUN.finditer(text)]
    found += [text[start:end] for start, end in runs]
    found += [  # a lone name (Tallinn), not a word of a run already found
        m.group(0)
        for m in _CAPITAL.finditer(text)
        if not any(start <= m.start() < end for start, end in runs)
    ]
    seen: set[str] = set()
    out: list[str] = []
    for span in found:
        if span and "`" not in span and span.lower() not in seen:
            seen.add(span.lower())
            out.append(span)
    return tuple(out)


def key_tokens(text: str) -> frozenset[str]:
    """The tokens a fact hangs on (``key_spans``, lower-cased)."""
    return frozenset(span.lower() for span in key_spans(text))


def merged_count(fact: FactLine) -> int:
    """How many facts a ledger line stands for: N for a ``merged(N facts)`` line, else 1."""
    match = _MERGED_ROLE.match(fact.role)
    return int(match.group(1)) if match else 1


def fact_signal(sentence: str) -> int:
    """How surely a sentence bears a fact, from 0 to 5 (a question counts 1 less).

    A digit 3, a code identifier 2, a date word 2, a decision or preference word 2, and
    capitalised words inside the sentence 1 each (at most 2).
    """
    signal = 3 if DIGIT_TOKEN.search(sentence) else 0
    signal += 2 if _IDENT_TOKEN.search(sentence) else 0
    signal += 2 if _DATE_WORD.search(sentence) else 0
    signal += 2 if _DECISION.search(sentence) else 0
    signal += min(2, len(_CAPITAL.findall(sentence)))
    return min(signal, 5) - (1 if sentence.rstrip().endswith("?") else 0)


def fact_score(sentence: str, role: str, focus_words: frozenset[str] = frozenset()) -> int:
    """A ledger line's priority, or 0 when the sentence is no fact.

    The user's and tools' sentences count from signal 1, the assistant's from signal 3 (what
    it said is mostly reconstructible, but not the values it made up or the files it edited).
    The user's rank first (nothing can recover them), then the tools' (a tool can be asked
    again), then the assistant's; a question gets no role bonus (it states nothing); a
    sentence sharing a word
    with the focus ranks 2 higher. A listing's line (role ``tool listing``) scores
    `LISTING_SCORE` and a merged line one more, whatever they hold; a carried note line
    (role ``notes``) scores `NOTES_SCORE` when it bears a fact.
    """
    if role.endswith(LISTING):
        return LISTING_SCORE
    if role.endswith(SETTINGS):
        return SETTING_SCORE
    if _MERGED_ROLE.match(role):
        return LISTING_SCORE + 1  # its terms are re-listed if it goes: above a listing's
    signal = fact_signal(sentence)
    if role == "notes":
        return NOTES_SCORE if signal >= MIN_ASSISTANT_SIGNAL else 0
    who = role.split("(")[0]
    if signal < (1 if who in ("user", "tool") else MIN_ASSISTANT_SIGNAL):
        return 0
    focused = _is_focused(sentence, focus_words)
    bonus = USER_BONUS if who == "user" else TOOL_BONUS if who == "tool" else 0
    if sentence.rstrip().endswith("?"):
        bonus = 0  # a question states nothing: it ranks with the assistant's lines
    return signal + bonus + (FOCUS_BONUS if focused else 0)


def _is_focused(text: str, focus_words: frozenset[str]) -> bool:
    """Whether the text shares a word with the focus (``focus_words_of``)."""
    return bool(focus_words and focus_words & content_words(text))


def _clip(sentence: str) -> str:
    """A sentence cut to a window around its first key token when it is over-long."""
    if len(sentence) <= MAX_LINE_CHARS:
        return sentence
    hit = DIGIT_TOKEN.search(sentence) or _IDENT_TOKEN.search(sentence)
    start = max(0, (hit.start() if hit else 0) - MAX_LINE_CHARS // 3)
    piece = sentence[start : start + MAX_LINE_CHARS].strip()
    return ("…" if start else "") + piece + "…"


def sentences(text: str) -> list[str]:
    """Split text into lines, then sentences, skipping code fences' marker lines."""
    out: list[str] = []
    for line in text.splitlines():
        line = line.strip().lstrip("-*• ").strip()
        if line and not line.startswith("```"):
            out.extend(s.strip() for s in _SENTENCE_END.split(line) if s.strip())
    return out


_ROW_PARTS = re.compile(r"[A-Za-z]+|\d+")
_TEMPLATE_PARTS = re.compile(r"\d+")


def _row_shape(line: str) -> str:
    """A line's shape with its words and numbers masked (``a/a/a.a:0:    a_a(a, a)``)."""
    return _ROW_PARTS.sub(lambda m: "0" if m.group(0).isdigit() else "a", line)


_HIT_ROW = re.compile(r"^[\w./-]+\.\w{1,6}:\d+:")
"""A search hit's ``path:line:`` start."""
_LOOSE_PARTS = re.compile(r"\w+")


def is_carried_note(fact: FactLine) -> bool:
    """Whether a ledger line is an earlier note line carried into it (``notes``, or ``notes
    listing`` for a copied row): the model's words, which no message of the history holds."""
    return fact.role in ("notes", f"notes {LISTING}")


def growth_facts(
    earlier: Sequence[FactLine],
    condensed: Sequence[Message],
    messages: Sequence[Message],
    focus: str | None = None,
) -> list[FactLine]:
    """A growth's ledger lines before selection: the `condensed` messages (those the previous
    extraction stands in for) quoted anew with the new `messages`, and of the previous
    ledger (`earlier`, parsed back) only the note lines it carried, which no message holds;
    without `condensed`, the previous ledger carried forward, then the messages' facts."""
    if condensed:
        notes = [fact for fact in earlier if is_carried_note(fact)]
        return dedupe_facts([*fact_lines([*condensed, *messages], focus), *notes])
    return dedupe_facts([*earlier, *fact_lines(messages, focus)])


def copied_rows_demoted(facts: Sequence[FactLine]) -> list[FactLine]:
    """The facts with each carried note line that copies a listing's row (the shape of a
    row the ledger quotes, spacing and backticks aside, or a search hit's ``path:line:``)
    as a ``notes listing`` line scored `LISTING_SCORE`, which it stays when parsed back: the
    model's copy of search hits holds no more than the hits and must not take the room of
    a file's settings."""
    shapes = {_loose_shape(fact.text) for fact in facts if fact.role.endswith(LISTING)}
    return [
        replace(fact, role=f"notes {LISTING}", score=LISTING_SCORE)
        if fact.role == "notes" and _copies_row(fact.text, shapes)
        else fact
        for fact in facts
    ]


def _copies_row(line: str, shapes: set[str]) -> bool:
    """Whether a note line has a listing row's shape or a search hit's start."""
    return bool(_HIT_ROW.match(line.strip().strip("`"))) or _loose_shape(line) in shapes


def _loose_shape(line: str) -> str:
    """A line's shape with each run of letters, digits and underscores masked, its spacing
    and surrounding backticks aside (``a/a/a.a:a: a(a, a)``)."""
    return _LOOSE_PARTS.sub("a", " ".join(line.strip().strip("`").split()))


def is_listing(lines: Sequence[str]) -> bool:
    """Whether a tool's result is a listing: at least `LISTING_ROWS` of its lines share their
    shape (search hits, test results, a config file's settings)."""
    shapes = Counter(_row_shape(line) for line in lines)
    return bool(shapes) and shapes.most_common(1)[0][1] >= LISTING_ROWS


def fact_lines(messages: Sequence[Message], focus: str | None = None) -> list[FactLine]:
    """The fact ledger: every fact-bearing sentence of the messages, verbatim, in order; a
    user's short message (`MAX_LINE_CHARS`) is one line, scored by its best sentence, so a
    correction or a finished step keeps the sentence that says what replaced it.

    A listing's lines are quoted as ``tool listing`` and score `LISTING_SCORE`: each holds
    little on its own and hundreds of them would crowd out every other fact; they are quoted
    last and otherwise accounted for on the merged line. A listing's ``name = value`` lines
    (a file's settings) are quoted together as ``tool settings`` lines (``settings_lines``)
    naming the call that read them. A user's request that holds no fact rides on the first
    line of the action that answered it (``FactLine.asked``), and the assistant's reply that
    only confirmed a user's line rides on that line (``FactLine.confirmed``). The roles keep
    their rank when an extraction's ledger is parsed back."""
    focus_words = focus_words_of(focus)
    found: list[FactLine] = []
    sources: dict[str, str] = {}
    request = ""  # the user's latest request, while no action's line has taken it
    stated: list[int] = []  # where the previous message's user lines are in `found`
    for message in messages:
        role = speaker(message)
        sources.update(call_sources(message))
        found_in = sentences(quoted_part(content_text(message)))
        if role == "assistant" and not message.get("tool_calls"):
            reply = " ".join(found_in)
            line = next((i for i in reversed(stated) if confirms(found[i].text, reply)), None)
            if line is not None:  # "Agreed, X it is.": said with the line it repeats
                found[line] = replace(found[line], confirmed=reply)
                stated = []
                continue
        quoted = _message_facts(message, role, found_in, sources, focus_words)
        stated = [len(found) + i for i in range(len(quoted))] if role == "user" else []
        if role == "user":
            request = "" if quoted else _request(found_in)
        elif request and (role.startswith("tool") or message.get("tool_calls")):
            first = next(
                (i for i, fact in enumerate(quoted) if not fact.role.endswith((LISTING, SETTINGS))),
                None,
            )
            if first is not None:  # the action's first line says what it was for
                quoted[first] = _with_request(quoted[first], request, focus_words)
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
    message: Message,
    role: str,
    found_in: Sequence[str],
    sources: Mapping[str, str],
    focus_words: frozenset[str],
) -> list[FactLine]:
    """One message's ledger lines (``fact_lines``)."""
    if role == "user" and len(found_in) > 1 and sum(map(len, found_in)) <= MAX_LINE_CHARS:
        score = max(fact_score(sentence, role, focus_words) for sentence in found_in)
        text = " ".join(found_in)  # one short message, one line: "done X. Next is Y" together
        focused = _is_focused(text, focus_words)
        return [FactLine(role, text, score, focused=focused)] if score > 0 else []
    found: list[FactLine] = []
    listing = role.startswith("tool") and is_listing(found_in)
    settings = [s for s in found_in if _SETTING.match(s)] if listing else []
    if settings:
        said = f"{role} {SETTINGS}"
        source = sources.get(str(message.get("tool_call_id")), "")
        for text in settings_lines(settings, source):
            score = fact_score(text, said, focus_words)
            found.append(FactLine(said, text, score, focused=_is_focused(text, focus_words)))
    for sentence in found_in:
        if listing and _SETTING.match(sentence):
            continue
        said = f"{role} {LISTING}" if listing else role
        score = fact_score(sentence, said, focus_words)
        if score > 0:
            focused = _is_focused(sentence, focus_words)
            found.append(FactLine(said, _clip(sentence), score, focused=focused))
    return found


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


def _confirmation_of(last: FactLine | None, role: str, body: str) -> bool:
    """Whether a parsed ledger line (`role`: `body`) is the confirmation of the one before."""
    if role != "assistant" or last is None or last.role != "user" or last.confirmed:
        return False
    return confirms(last.text, body)


def _with_request(fact: FactLine, request: str, focus_words: frozenset[str]) -> FactLine:
    """The line carrying the request it answered; a request sharing a word with the focus
    ranks the line as if the line itself did."""
    focused = _is_focused(request, focus_words) and not fact.focused
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
    return [part.strip() for part in text.split(SETTINGS_JOIN) if _SETTING.match(part.strip())]


def demote_templates(facts: Sequence[FactLine]) -> list[FactLine]:
    """The facts with template lines scored `LISTING_SCORE`: a tool's or the assistant's
    lines that differ only in their numbers (``16 passed in 5s``, ``There are 13 call
    sites``). The user's are never demoted: a repeated shape there may be a correction."""
    shapes = [
        None if fact.role == "user" else (fact.role, _TEMPLATE_PARTS.sub("0", fact.text))
        for fact in facts
    ]
    seen = Counter(shape for shape in shapes if shape is not None)
    return [
        replace(fact, score=min(fact.score, LISTING_SCORE))
        if shape is not None and seen[shape] > 1
        else fact
        for fact, shape in zip(facts, shapes, strict=True)
    ]


def dedupe_facts(facts: Iterable[FactLine]) -> list[FactLine]:
    """Facts without exact repeats (same text, whitespace and case aside), first kept."""
    seen: set[str] = set()
    out: list[FactLine] = []
    for fact in facts:
        norm = " ".join(fact.text.lower().split())
        if norm not in seen:
            seen.add(norm)
            out.append(fact)
    return out


def parse_extraction(text: str, focus: str | None = None) -> tuple[str, list[FactLine]]:
    """Split an earlier extraction into its notes and its ledger facts (re-scored); a user's
    line that bears no fact is the request the line after it carries, and an assistant's
    line that `confirms` the user's line before it is that line's confirmation."""
    notes, _, facts_part = text.partition(FACTS_HEADER)
    notes = notes.strip()
    notes = notes.removeprefix(NOTES_HEADER).strip()
    focus_words = focus_words_of(focus)
    facts: list[FactLine] = []
    request = ""
    for line in facts_part.splitlines():
        match = _FACT_LINE.match(line.strip())
        if not match:
            continue
        role, body = match.group(1), match.group(2)
        decided = _DECIDED_BODY.match(body) if role == DECIDED else None
        if decided:  # "- decided: Agreed, X it is. (user: we go with X; Y is out.)"
            role, body, confirmed = decided.group(2), decided.group(3), decided.group(1)
            score = max(fact_score(body, role, focus_words), 1)
            focused = _is_focused(body, focus_words)
            facts.append(FactLine(role, body, score, confirmed=confirmed, focused=focused))
            continue
        last = facts[-1] if facts and not request else None
        if _confirmation_of(last, role, body):  # the reply rendered after the line it repeats
            facts[-1] = replace(facts[-1], confirmed=body)
            continue
        score = fact_score(body, role, focus_words)
        if role == "user" and score <= 0 and not request:
            request = body
            continue
        fact = FactLine(role, body, max(score, 1), focused=_is_focused(body, focus_words))
        if _MERGED_ROLE.match(role):
            facts += regained_settings(fact)
            continue
        facts.append(_with_request(fact, request, focus_words) if request else fact)
        request = ""
    if request:  # nothing after it: quoted as it was
        facts.append(FactLine("user", request, 1))
    return notes, demote_templates(facts)


_MERGED_TERM = re.compile(r"`([^`\n]+)`")
"""A term listed on a merged line."""
_LEFT_OUT_NOTE = re.compile(re.escape(LEFT_OUT).replace(re.escape("{}"), r"\d+"))


def regained_settings(merged: FactLine) -> list[FactLine]:
    """A merged line's ``name = value`` terms as ``tool settings`` lines again (each run of
    them one line), then the merged line with the rest: a file's settings that one growth
    could not quote rank as settings at the next, instead of as bare terms below every
    quoted line, which would lose them for good. The line names no file: the term listed
    before the run may be another fact's path (the file's own is left out when a kept line
    holds it), and a wrong file is worse than none."""
    runs: list[list[str]] = []
    rest: list[str] = []
    in_run = False
    for term in _MERGED_TERM.findall(merged.text):
        setting = bool(_SETTING.match(term))
        if not setting:
            rest.append(term)
        elif in_run:
            runs[-1].append(term)
        else:
            runs.append([term])
        in_run = setting
    if not runs:
        return [merged]
    lines = [
        FactLine(f"tool {SETTINGS}", text, REGAINED_SETTING_SCORE)
        for pairs in runs
        for text in settings_lines(pairs)
    ]
    left = _LEFT_OUT_NOTE.search(merged.text)
    body = " ".join(f"`{term}`" for term in rest)
    if left:
        body = f"{body} {left.group(0)}".strip()
    count = merged_count(merged) - len(lines)
    if count <= 0 and not body:
        return lines
    role = MERGED_ROLE.format(max(count, 1))
    return [*lines, FactLine(role, body or "(no key terms)", merged.score)]


def select_facts(
    facts: Sequence[FactLine], notes: str, budget: int, model: str = ""
) -> list[FactLine]:
    """The facts that fit the budget, in order; drops the lowest-scored first, and among
    those the covered ones, then the long ones.

    A fact is covered when each of its key tokens appears in the notes or in another kept
    fact (not a merged line: a term listed there is no fact quoted, and the line may lose
    it). Score comes before cover: a user's line covered by a listing's row would otherwise
    go first, and the row with it at a later growth. Among equals the longer line goes first
    (it frees the most room for one fact lost), then the later one (earlier facts have
    survived more passes: keep the cache stable). A line's confirmation (``FactLine.confirmed``)
    ranks apart, at ``confirmation_score``, and goes with its line; a decision's (``settles``)
    is one unit with its line, kept or dropped together.
    """
    facts = _candidates(facts, budget, model)
    apart = [bool(fact.confirmed) and not settles(fact) for fact in facts]
    bare = [replace(f, confirmed="") if alone else f for f, alone in zip(facts, apart, strict=True)]
    costs = [count_text(fact.render(), model) + 1 for fact in bare]
    keys = [frozenset() if _MERGED_ROLE.match(f.role) else key_tokens(f.text) for f in facts]
    scores = [fact.score for fact in facts]
    line_of = list(range(len(facts)))  # the line a unit belongs to: itself, or a confirmation's
    for i, fact in enumerate(facts):
        if apart[i]:  # a unit of its own, ranked apart, gone with its line
            line_of.append(i)
            costs.append(count_text(fact.confirmation(), model) + 1)
            keys.append(frozenset())
            scores.append(min(fact.score, confirmation_score(fact)))
    note_keys = key_tokens(notes)
    held: Counter[str] = Counter(k for ks in keys for k in ks)
    keep = set(range(len(costs)))
    total = sum(costs)
    while total > budget and keep:

        def rank(i: int) -> tuple[int, bool, int, int]:
            covered = bool(keys[i]) and all(k in note_keys or held[k] > 1 for k in keys[i])
            return (scores[i], not covered, -costs[i], -line_of[i])

        victim = min(keep, key=rank)
        for unit in [u for u in keep if u == victim or line_of[u] == victim]:
            keep.remove(unit)
            held.subtract(keys[unit])
            total -= costs[unit]
    confirmed = {line_of[u] for u in keep if u >= len(facts)}
    return [facts[i] if i in confirmed else bare[i] for i in sorted(keep) if i < len(facts)]


def settles(fact: FactLine) -> bool:
    """Whether a line takes a decision (a `_DECISION` word: "we go with X; Y is out", "that
    step is done: ... the next step is Z"), so its confirmation says which of the line's values
    holds, the chosen one, not the rejected option or the finished step beside it. Such a
    confirmation goes with its line, one unit: quoted alone, the line names both values and a
    small model answers the rejected one as often as not, and a confirmation ranked apart was
    pushed out at some growth for good while its line stayed."""
    return bool(_DECISION.search(fact.text))


def confirmation_score(fact: FactLine) -> int:
    """The rank of a line's confirmation: `CONFIRMATION_SCORE`, `FOCUS_BONUS` higher when the
    line is about the question (a small model answering it needs the confirmation most); the
    line's own when the line takes a decision (``settles``: one unit with it)."""
    if settles(fact):
        return fact.score
    return CONFIRMATION_SCORE + (FOCUS_BONUS if fact.focused else 0)


def _candidates(facts: Sequence[FactLine], budget: int, model: str) -> Sequence[FactLine]:
    """A long ledger's best lines, twice the budget's worth, in order (bounds select's cost)."""
    if len(facts) <= MAX_SELECT_EXACT:
        return facts
    costs = [count_text(fact.render(), model) + 1 for fact in facts]
    order = sorted(range(len(facts)), key=lambda i: (-facts[i].score, costs[i], i))
    chosen: list[int] = []
    total = 0
    for i in order:
        if total + costs[i] > 2 * budget or len(chosen) >= MAX_SELECT_EXACT:
            break
        chosen.append(i)
        total += costs[i]
    return [facts[i] for i in sorted(chosen)]


def layout(notes: str, facts: Sequence[FactLine]) -> str:
    """The extraction text: the notes section, then the quoted facts section."""
    sections = [f"{NOTES_HEADER}\n{notes}"] if notes else []
    if facts:
        sections.append(FACTS_HEADER + "\n" + "\n".join(fact.render() for fact in facts))
    return "\n\n".join(sections)


def assemble(notes: str, facts: Sequence[FactLine], target_tokens: int, model: str = "") -> str:
    """Notes and as many facts as fit, within target_tokens (cut with a marker if need be);
    the facts that do not fit are accounted for on one merged line (see the module doc).

    Quoted lines make room for the merged line's key terms: a long line kept while key terms
    are left out is the worse trade, so the selection is redone with that room reserved.
    Only the terms of facts above `LISTING_SCORE` claim room that way (not those an earlier
    merged line carries: they have had their turn), and at most `MERGED_SHARE` of it: a
    listing's hundreds of paths and test names must not push out every quoted line, nor may
    bare terms (which a small model cannot answer from, having no
    sentence around them) take the room of the sentences; they fill what is left, and the
    merged line says how many did not fit. An earlier merged line's terms still rank above
    a listing's rows (as its score says): a row is quoted only while the merged line lists
    the terms of everything above the rows, within that same share.
    """
    facts, live = settled(facts)
    live = [fact for fact in live if not _MERGED_ROLE.match(fact.role)]  # folded, not quoted
    room = target_tokens - count_text(layout(notes, ()), model) - LAYOUT_TOKENS // 2
    above_rows = [f for f in facts if f.score > LISTING_SCORE]
    ranked = [f for f in above_rows if not _MERGED_ROLE.match(f.role)]
    reserve = 0
    while True:
        budget = room - reserve
        chosen = select_facts(live, notes, budget, model) if budget > 0 else []
        used = sum(_cost(fact, model) for fact in chosen)
        whole = merged_line(ranked, chosen, notes, None, model)
        claim = min(whole[1], int(room * MERGED_SHARE)) if whole is not None else 0
        short = used + claim - room
        if short > 0 and chosen:
            reserve += max(short, room // 10, 1)
            continue
        chosen = _rows_making_room(chosen, above_rows, notes, room - used, model)
        used = sum(_cost(fact, model) for fact in chosen)
        fitted = merged_line(facts, chosen, notes, room - used, model)
        text = layout(notes, [*chosen, fitted[0]] if fitted is not None else chosen)
        over = count_text(text, model) - target_tokens
        if over <= 0 or not chosen:
            return cut_tail(text, target_tokens, model)
        reserve += over


def _rows_making_room(
    chosen: Sequence[FactLine],
    above_rows: Sequence[FactLine],
    notes: str,
    free: int,
    model: str,
) -> list[FactLine]:
    """The chosen lines without as many of a listing's rows (the longest, then the latest,
    first) as the merged line needs beyond the `free` tokens to list the terms of the facts
    ranked above the rows, an earlier merged line's among them (at most `MERGED_SHARE` of
    the room)."""
    rows = [i for i, fact in enumerate(chosen) if fact.score <= LISTING_SCORE]
    whole = merged_line(above_rows, chosen, notes, None, model) if rows else None
    if whole is None:
        return list(chosen)
    room = free + sum(_cost(fact, model) for fact in chosen)
    need = min(whole[1], int(room * MERGED_SHARE)) - free
    gone: set[int] = set()
    for i in sorted(rows, key=lambda i: (-_cost(chosen[i], model), -i)):
        if need <= 0:
            break
        gone.add(i)
        need -= _cost(chosen[i], model)
    return [fact for i, fact in enumerate(chosen) if i not in gone]


def settled(facts: Sequence[FactLine]) -> tuple[list[FactLine], list[FactLine]]:
    """(all, live): the facts with echoes scored `LISTING_SCORE`, and those of them no later
    statement replaced (``corrections``): a replaced line is never quoted beside its
    correction, and is counted on the merged line like any line not quoted."""
    lines = [Line(fact.role, fact.text, key_spans(fact.text)) for fact in facts]
    found = settle(lines)
    every = [
        replace(fact, score=min(fact.score, LISTING_SCORE)) if i in found.echoes else fact
        for i, fact in enumerate(facts)
    ]
    return every, [fact for i, fact in enumerate(every) if i not in found.replaced]


def drop_contradicted(notes: str, facts: Sequence[FactLine]) -> str:
    """The notes without a line that states a subject the user stated, without the user's
    (latest) value: a small model asked to take notes with the user's question in view
    writes guesses for it ("our project code is called ledger" beside the user's "our
    project code is PRJ-5499"), and a reader believes the notes first. The quoted line
    stays; a note that agrees with it stays too."""
    _, live = settled(facts)
    statements = [
        Line(fact.role, fact.text, key_spans(fact.text)) for fact in live if fact.role == "user"
    ]
    if not statements:
        return notes
    kept = [line for line in notes.splitlines() if not contradicts(line, statements)]
    return "\n".join(kept)


_ROLE_PREFIX = re.compile(r"^(?:user|assistant|tool|system)(?:\([\w.-]*\))?:\s*", re.IGNORECASE)
"""A transcript's ``role:`` (``tool(search_code):``) at the start of a copied line."""


def drop_copied(notes: str, facts: Sequence[FactLine]) -> str:
    """The notes without a line copied from what the ledger quotes: each of its sentences a
    quoted line, a request or a confirmation (its role, bullets, backticks, case and spacing
    aside), or a listing row's shape or a search hit. The ledger ranks those lines against
    everything else said, and a copy in the notes only takes its room: a small model fills
    its notes with the last request, test results and search hits, and the confirmation of
    a decision then has no room left. A sentence the ledger does not quote stays a note."""
    quoted = {_plain(text) for fact in facts for text in (fact.text, fact.asked, fact.confirmed)}
    quoted.discard("")
    shapes = {_loose_shape(fact.text) for fact in facts if fact.role.endswith(LISTING)}
    kept = []
    for line in notes.splitlines():
        body = _ROLE_PREFIX.sub("", line.strip().lstrip("-*• ").strip())
        parts = sentences(body)
        copied = bool(parts) and all(_plain(part) in quoted for part in parts)
        if not copied and not (body and _copies_row(body, shapes)):
            kept.append(line)
    return "\n".join(kept)


def _plain(line: str) -> str:
    """A line as compared for a copy: bullets, backticks, case and spacing aside."""
    return " ".join(line.strip().lstrip("-*• ").strip("`").casefold().split())


def _cost(fact: FactLine, model: str) -> int:
    """Tokens a ledger line costs, its newline included."""
    return count_text(fact.render(), model) + 1


@functools.lru_cache(maxsize=4096)
def term_weight(span: str) -> int:
    """How much a key term identifies on its own: a code mixing letters and digits 3, an
    identifier, a name or a number of three digits or more 2, anything else 1."""
    letters = any(c.isalpha() for c in span)
    digits = sum(c.isdigit() for c in span)
    if letters and digits:
        return 3
    return 2 if letters or digits >= 3 else 1


@functools.lru_cache(maxsize=4096)
def _term_cost(span: str, model: str) -> int:
    """Tokens one key term costs on a merged line (a space and its backticks)."""
    return count_text(f" `{span}`", model)


def merged_terms(fact: FactLine) -> list[tuple[str, frozenset[str]]]:
    """The terms a fact leaves on the merged line, each with the key tokens that, all held
    elsewhere, make it needless: its key spans; a setting's ``name = value`` whole (a value
    apart from its name answers nothing); a merged line's own terms as they were listed."""
    if _MERGED_ROLE.match(fact.role):
        return [(term, _parts(term)) for term in _MERGED_TERM.findall(fact.text)]
    if fact.role.endswith(SETTINGS):
        pairs = setting_pairs(fact.text)
        head = fact.text[: fact.text.find(pairs[0])] if pairs else fact.text
        return [(span, _parts(span)) for span in [*key_spans(head), *pairs]]
    return [(span, _parts(span)) for span in key_spans(fact.text)]


def _parts(term: str) -> frozenset[str]:
    """What must be held elsewhere for a merged term to be needless: a setting's name and
    value both, else the term itself."""
    return (_SETTING.match(term) and key_tokens(term)) or frozenset({term.lower()})


def merged_line(
    facts: Sequence[FactLine],
    chosen: Sequence[FactLine],
    notes: str,
    budget: int | None,
    model: str = "",
) -> tuple[FactLine, int] | None:
    """The one line accounting for the facts not chosen, and its estimated cost: how many,
    and their key terms that neither the notes nor a chosen line hold. When not all fit in
    `budget` tokens the terms of the best-scored facts stay, the most identifying first, and
    a count says how many were left out. None when every fact was chosen."""
    kept = {(fact.role, fact.text) for fact in chosen}  # a line kept without its confirmation
    dropped = [fact for fact in facts if (fact.role, fact.text) not in kept]
    if not dropped:
        return None
    held = key_tokens(notes).union(*(key_tokens(fact.text) for fact in chosen))
    ranked = sorted(range(len(dropped)), key=lambda i: (-dropped[i].score, i))
    spans: dict[str, tuple[int, int, int, str]] = {}
    for i in ranked:  # best-scored first: a term shared by two facts ranks with the better
        for order, (span, parts) in enumerate(merged_terms(dropped[i])):
            key = span.lower()
            if not parts <= held and key not in spans:
                spans[key] = (-dropped[i].score, -term_weight(span), i * 1000 + order, span)
    terms = sorted(spans.values())
    role = MERGED_ROLE.format(sum(merged_count(fact) for fact in dropped))
    base = count_text(f"- {role}: ", model) + 1
    keep, cost = 0, base
    for term in terms:
        more = _term_cost(term[3], model)
        if budget is not None and cost + more + _LEFT_OUT_TOKENS > budget:
            break
        keep, cost = keep + 1, cost + more
    listed = sorted(terms[:keep], key=lambda term: term[2])
    body = " ".join(f"`{term[3]}`" for term in listed)
    if keep < len(terms):
        body = f"{body} {LEFT_OUT.format(len(terms) - keep)}".strip()
        cost += _LEFT_OUT_TOKENS
    return FactLine(role, body or "(no key terms)", 1), cost
