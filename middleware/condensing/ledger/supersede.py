"""Supersede: which stated values a later statement replaced, and which lines only echo. Pure.

A user who corrects a value ("Correction: the upload limit is 380 MB, not 550 MB", "legal
raised that, so attachments can be 40 MB each") or finishes a step ("finished migrating
orders_v2; still to do: archive audit_log") leaves two statements of one subject in the
history. Quoted side by side, a small model picks either; the ledger keeps only the current
one. The rule reads properties of language in general (who speaks, what kind of value, which
words surround it, a change word), not the words of one phrasing. A later line replaces an
earlier one when

- the later line is the user's and no question, the earlier one the user's, the assistant's
  or a tool's (a tool's or the assistant's line reports what was done: two reports are two
  events, not a value and its correction);
- it replaces one or more of the earlier line's values, each
  * *completed*: the later line names it in a sentence that says done (`DONE_WORDS`: done,
    finished, completed, out of the way, ...): "Done with search_index"; or
  * *changed*: the later line states a new value of the same subject in its place, in a
    sentence that reads as a change (`CHANGE_WORDS`, `CHANGE_PHRASES`: correction, actually,
    now, instead, raised, lowered, moved, switched, no longer, make that, ...); or
  * *named as old*: the later line names it with a word in its clause that marks it old
    (not, from, was, previously, replaced, ...: "5678, not 4410", "from 02:00 to 03:30")
    and states a new value of the same subject;

  and a line that names as past a value the earlier line does not hold ("not 6169", "from
  02:00", "6169 was the old one") changes that value, not the earlier one: "Correction: the
  gateway listens on port 2362, not 6169" leaves the assistant's "I'll use port 24379 for
  the mock payment server" alone, though both name a port;

  where a new value is of the same subject when it is of the same kind (``value_shape``: two
  numbers of one unit, two hyphenated host names, two names, two times or dates; a bare
  number whose sentence names the other's unit), its sentence shares a content word with the
  earlier value's (plural s and case aside; values, units, function and change words, and a
  word on more than a quarter of the lines such as a speaker's label, do not count:
  ``attachment`` in "attachments of up to 25 MB each" and "attachments can be 40 MB each"),
  and the two subjects, when both name one before "is"/"are", do not each hold a word
  the other lacks ("the staging host" is not "the production host"); one new value stands in
  for one old value; and
- every other value of the earlier line is in the later one (nothing else is lost).

A capitalised word is no name value where its case says nothing: a sentence's first word
(after a speaker's label, "Dana: Wow, ...") or the person spoken to ("Hey Ravi, ...",
"Thanks, Ana!").

Two statements of one subject without a change word ("The timeout is 30s." then "The
timeout is 60s for writes.") are both kept: the ledger cannot tell a correction from a
second fact. Values of one unit about different things ("the upload limit is 500 MB", "the
database uses 800 MB of memory now") share no content word and are both kept.

An *echo* is a line that is not the user's or a tool's and whose values all appear in earlier
user or tool lines (an assistant's "Noted: next we run X"): it adds nothing, and when its
values are all replaced ones it would bring a stale value back, so it goes with them.

Lines come in as (role, text, key spans), in conversation order (``settle``); ``settled``
applies it to the ledger's records: a replaced one goes, its correction names it
(``Fact.supersedes``), an echo ranks with a listing's rows.
"""

from __future__ import annotations

import functools
import re
from bisect import bisect_left, bisect_right
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, replace

from middleware.condensing.ledger.records import LISTING_SCORE, Fact
from middleware.condensing.ledger.terms import fold, key_spans

__all__ = ["Line", "Settled", "contradicts", "settle", "settled", "stated_subject", "subjects"]

_CLAUSE_BREAK = re.compile(r"[,;:()\[\]!?]|\s[-\u2013\u2014]\s|\.\s")
_VERBS = ("is", "are", "was", "were", "will be", "becomes")
_VERB = re.compile(r"\b(?:" + "|".join(_VERBS) + r")\b", re.IGNORECASE)
_WORD = re.compile(r"[a-z]{3,}")
_FILLER = frozenset(
    {"the", "and", "now", "our", "its", "still", "also", "actually", "really", "just", "then"}
)


@dataclass(frozen=True, slots=True)
class Line:
    """One ledger line: who said it, its text, its key terms."""

    role: str
    text: str
    keys: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Settled:
    """Indices of the lines a later statement replaced, and of the lines that only echo."""

    replaced: frozenset[int]
    echoes: frozenset[int]
    corrections: tuple[tuple[int, int], ...] = ()
    """(replaced, by): each statement a later one replaced, and that later one."""


def subjects(text: str, keys: Sequence[str]) -> list[tuple[frozenset[str], str]]:
    """(subject words, value) for each key term of `text`: the words of the clause before
    the value, cut at its verb (``is``) when it has one; empty subjects are left out."""
    found = []
    lowered = text.lower()
    for key in keys:
        at = lowered.find(key.lower())
        if at < 0:
            continue
        clause = _CLAUSE_BREAK.split(text[:at])[-1]
        verb = _VERB.search(clause)
        if verb is not None:
            clause = clause[: verb.start()]
        words = frozenset(_WORD.findall(clause.lower())) - _FILLER
        if words:
            found.append((words, key.lower()))
    return found


# fmt: off
CHANGE_WORDS = (
    "correction", "corrected", "correcting", "actually", "update", "updated", "updates",
    "instead", "change", "changed", "changes", "now", "currently", "anymore", "rather",
    "mistake", "wrong", "meant", "misspoke", "misremembered", "typo", "revised", "raise",
    "raised", "raises", "lower", "lowered", "increase", "increased", "decrease", "decreased",
    "reduce", "reduced", "bump", "bumped", "cut", "doubled", "halved", "move", "moved",
    "moves", "switch", "switched", "swap", "swapped", "replace", "replaced", "replaces",
    "renamed", "migrated", "shifted", "postponed", "pushed", "extended",
)
"""General English words that say a statement changes an earlier one (and `CHANGE_PHRASES`)."""
CHANGE_PHRASES = (
    "no longer", "any more", "make that", "scratch that", "from now on", "going forward",
    "turns out", "these days", "in place of",
)
DONE_WORDS = (
    "done", "finished", "completed", "complete", "wrapped up", "behind us", "out of the way",
    "taken care of", "ticked off", "checked off", "crossed off",
)
"""Words that mark a step finished: a later line naming the step with one completes it."""
_OLD_WORDS = frozenset(CHANGE_WORDS) - {"now", "currently", "actually"} | {
    "not", "no", "from", "was", "were", "used", "before", "old", "previous", "previously",
    "formerly", "earlier",
}
"""Words in the clause of an earlier value named again that mark it old ("5678, not 4410",
"from 4410 to 5678"); "now" and "currently" mark the value that holds."""
_PAST_BEFORE = ("not", "no", "from", "old", "previous", "previously", "formerly", "earlier")
_PAST_AFTER = ("was", "were", "used", "before", "old", "previously", "formerly", "earlier")
"""The old-words that say only that a value is past, before it ("not 6169", "from 02:00")
or after it ("6169 was the old one"); a change word such as "moved" goes with the new value
as often as with the old."""
# fmt: on
_CHANGE = re.compile(
    r"\b(?:" + "|".join((*CHANGE_WORDS, *CHANGE_PHRASES, *DONE_WORDS)) + r")\b", re.IGNORECASE
)
_DONE = re.compile(r"\b(?:" + "|".join(DONE_WORDS) + r")\b", re.IGNORECASE)
_OLD = re.compile(
    r"\b(?:" + "|".join((*_OLD_WORDS, *CHANGE_PHRASES, *DONE_WORDS)) + r")\b", re.IGNORECASE
)
_ANY_WORD = re.compile(r"\w+")


def _firsts(*entries: str) -> frozenset[str]:
    """The first words of a list's words and phrases, lower-cased."""
    return frozenset(entry.split()[0].lower() for entry in entries)


_CHANGE_FIRST = _firsts(*CHANGE_WORDS, *CHANGE_PHRASES, *DONE_WORDS)
_DONE_FIRST = _firsts(*DONE_WORDS)
_OLD_FIRST = _firsts(*_OLD_WORDS, *CHANGE_PHRASES, *DONE_WORDS)
_VERB_FIRST = _firsts(*_VERBS)
_PAST_BEFORE_RE = re.compile(r"\b(?:" + "|".join(_PAST_BEFORE) + r")\b", re.IGNORECASE)
_PAST_AFTER_RE = re.compile(r"\b(?:" + "|".join(_PAST_AFTER) + r")\b", re.IGNORECASE)
_SENTENCE = re.compile(r"(?<=[.!?])\s+")
# fmt: off
_STOP = _FILLER | frozenset(CHANGE_WORDS) | _OLD_WORDS | {
    "are", "for", "but", "yet", "with", "without", "that", "this", "these", "those", "there",
    "here", "been", "being", "have", "has", "had", "will", "would", "shall", "should", "can",
    "could", "may", "might", "must", "ours", "your", "yours", "their", "theirs", "his", "her",
    "she", "him", "they", "them", "you", "all", "any", "some", "each", "per", "into", "onto",
    "than", "when", "what", "which", "who", "whom", "whose", "where", "how", "why", "only",
    "very", "too", "let", "get", "got", "about", "over", "under", "after", "again", "yes",
    "okay", "sure", "please", "thanks", "one", "two", "three", "next", "last", "first",
    "is", "be", "on", "in", "at", "to", "of", "or", "it", "as", "by", "we", "so", "if", "an",
}
# fmt: on
"""Words that say nothing of a subject: function words and the change words themselves."""
COMMON_LINES, COMMON_SHARE = 4, 4
"""A word in more than a quarter of the lines holding values (and in more than 4) says
nothing of a subject: a speaker's name before every line of a chat ("Caroline: ...")."""
_NUMBER = re.compile(r"\d+(?:,\d{3})*(?:\.\d+)?")
_UNIT_AFTER = re.compile(r"\s*([A-Za-z%]{1,12})\b")
_OPENING = re.compile(r"\W*(?:[A-Z][\w.-]*:\s*)?\W*")
"""What may come before a sentence's first word: a speaker's label ("Caroline: "), quotes."""
_ADDRESS_BEFORE = re.compile(_OPENING.pattern + r"(?:\w+[,!]?\s+){0,2}")
"""Up to two words that open a sentence before the person spoken to ("Hey", "Wow,")."""
_NAMES = re.compile(r"[A-Z][a-z]+(?:\s+[A-Z][a-z]+)*")


@dataclass(frozen=True, slots=True)
class _Value:
    """A value of a line: its text (lower-cased), shape, and the sentence words around it."""

    key: str
    shape: str
    context: frozenset[str]
    subject: frozenset[str]
    marked_old: bool
    named_past: bool
    """A word between it and its neighbours in its clause says it is past: 6169 in "port
    2362, not 6169" and 02:00 in "from 02:00 to 03:30", not 03:30 nor X in "X took over
    from Y"."""
    done: bool
    changes: bool


def _words(text: str) -> frozenset[str]:
    """The content words of `text`, lower-cased, a plural's ending folded (`terms.fold`)."""
    return frozenset(fold(w) for w in _WORD.findall(text.lower()) if w not in _STOP)


_UPPER, _LOWER = re.compile(r"[A-Z]+"), re.compile(r"[a-z]+")
_MIXED = re.compile(r"(?:Aa|aA)+")
_JOINED = re.compile(r"a(?:[-_]a)+")
_REPEATED = re.compile(r"(\w)([-_./:@])\1(?:\2\1)*")
_SUFFIX = re.compile(r"[A-Za-z%]+$")
_NOT_UNITS = _STOP | {"and", "the", "or"}
"""Words after a number that are not its unit."""


def value_shape(key: str, after: str) -> str:
    """What kind of value `key` is, from its characters: ``9 mb`` for a number followed by
    the unit MB (`after` is the text after it), ``9s`` for "30s", ``a-9`` for a host such
    as "kite-7" or "db-gateway-12", ``9:9`` for a time, ``9-9`` for a date such as
    "2025-03-14", ``A`` for a name ("Friday", "Ingrid Halvorsen")."""
    if _NAMES.fullmatch(key):
        return "A"
    shape = _NUMBER.sub("9", key)
    shape = _UPPER.sub("A", shape)
    shape = _LOWER.sub("a", shape)
    shape = _MIXED.sub("a", shape)
    shape = _JOINED.sub("a", shape)
    shape = _REPEATED.sub(r"\1\2\1", shape)
    if shape == "9":
        unit = _UNIT_AFTER.match(after)
        if unit is not None and unit.group(1).lower() not in _NOT_UNITS:
            return "9 " + fold(unit.group(1).lower())
    elif _NUMBER.fullmatch(_SUFFIX.sub("", key) or "x"):
        return "9" + fold(key.lstrip("0123456789.,").lower())
    return shape


def _not_a_value(sentence: str, at: int, end: int) -> bool:
    """Whether the name at `at`:`end` of `sentence` is capitalised as its first word, not as
    a name, or is the person spoken to ("Hey Sam, ...", "Wow, Dave, ...", "Thanks, Mel!")."""
    before, after = sentence[:at], sentence[end:]
    if _OPENING.fullmatch(before):
        return True
    return bool(
        (_ADDRESS_BEFORE.fullmatch(before) and re.match(r"\s*[,!]", after))
        or (before.endswith(", ") and re.fullmatch(r"\s*[!?.]*\s*", after))
    )


def _whole(key: str, text: str) -> int:
    """Where `text` first holds `key` as whole words (both lower-cased; no word character
    right before or after it), or -1. A plain search, not a regular expression made for each
    key: a tool result names hundreds of values, more than `re` keeps compiled."""
    at = text.find(key)
    while at >= 0:
        end = at + len(key)
        if not (at and _word_char(text[at - 1])) and not (
            end < len(text) and _word_char(text[end])
        ):
            return at
        at = text.find(key, at + 1)
    return -1


def _word_char(char: str) -> bool:
    """Whether `char` is a word character as `re`'s ``\\w`` reads it."""
    return char.isalnum() or char == "_"


def _values(line: Line, common: frozenset[str] = frozenset()) -> dict[str, _Value]:
    """The values of `line` by lower-cased key term, each with what surrounds it (its
    sentence's content words but the `common` ones)."""
    found = _parsed(line)
    if not common:
        return dict(found)
    return {key: replace(value, context=value.context - common) for key, value in found}


@functools.lru_cache(maxsize=2048)
def _parsed(line: Line) -> tuple[tuple[str, _Value], ...]:
    """`_values` with no word counted common (cached: which words are common depends on the
    other lines, the rest on the line alone; the turns sent verbatim after a condensed part
    are read again at every spliced request, `relevance.restated_later`).

    Near linear in a sentence's length and values: its clause breaks are found once, each
    value's clause looked up among them, and a sentence with no verb or no old word is not
    searched for one around each value (a tool result of 200 JSON rows, one sentence of 600
    values, took over a second)."""
    found: dict[str, _Value] = {}
    for sentence in _SENTENCE.split(line.text):
        lowered = sentence.lower()
        bare = list(sentence)
        spans = []
        for key in line.keys:
            at = _whole(key.lower(), lowered)
            if at < 0 or key.lower() in found:
                continue
            spans.append((key, at))
            end = at + len(key)
            unit = _UNIT_AFTER.match(sentence, end) if _NUMBER.fullmatch(key) else None
            stop = unit.end() if unit is not None else end
            bare[at:stop] = " " * len(bare[at:stop])
        if not spans:
            continue
        context = _words("".join(bare))
        said = _Said(sentence, lowered)
        changes = said.holds(_CHANGE, _CHANGE_FIRST)
        done = said.holds(_DONE, _DONE_FIRST)
        clauses = _Clauses(sentence, spans, said)
        for key, at in spans:
            end = at + len(key)
            if _NAMES.fullmatch(key) and _not_a_value(sentence, at, end):
                continue
            found[key.lower()] = _Value(
                key=key.lower(),
                shape=value_shape(key, sentence[end:]),
                context=context,
                subject=clauses.subject(at),
                marked_old=clauses.marked_old(at, end),
                named_past=clauses.named_past(at, end),
                done=done,
                changes=changes,
            )
    return tuple(found.items())


class _Said:
    """A sentence's words, to search a list's pattern only where one of its words is: the
    lists (`_CHANGE`, `_OLD`: ~100 words and phrases, case-blind) cost ~9 µs a search, and
    most sentences hold none of them. Only in ASCII text, where lower-casing and the
    patterns' case-blind matching agree; other text is searched."""

    def __init__(self, sentence: str, lowered: str) -> None:
        self.sentence = sentence
        self.words = frozenset(_ANY_WORD.findall(lowered)) if sentence.isascii() else None

    def holds(self, pattern: re.Pattern[str], firsts: frozenset[str]) -> bool:
        """Whether `pattern` (whole words or phrases, whose first words are `firsts`) is in
        the sentence."""
        if self.words is not None and self.words.isdisjoint(firsts):
            return False
        return pattern.search(self.sentence) is not None


class _Clauses:
    """One sentence's clause breaks and values, read once for all its values."""

    def __init__(self, sentence: str, spans: Sequence[tuple[str, int]], said: _Said) -> None:
        self.sentence = sentence
        self.break_ends = [m.end() for m in _CLAUSE_BREAK.finditer(sentence)]
        ordered = sorted((at, at + len(key)) for key, at in spans)
        self.starts = [at for at, _ in ordered]
        self.reached: list[int] = []
        """The furthest end among the values starting at or before each of `starts`."""
        for _, end in ordered:
            self.reached.append(max(end, self.reached[-1]) if self.reached else end)
        self.verbs = said.holds(_VERB, _VERB_FIRST)
        self.old = said.holds(_OLD, _OLD_FIRST)

    def _opening(self, at: int) -> int:
        """Where the clause holding `at` starts: after the last break that ends by `at`
        (a break running into the value is not one before it)."""
        found = bisect_right(self.break_ends, at)
        return self.break_ends[found - 1] if found else 0

    def _closing(self, end: int) -> int:
        """Where the clause going on from `end` stops: the next break's start."""
        after = _CLAUSE_BREAK.search(self.sentence, end)
        return after.start() if after is not None else len(self.sentence)

    def subject(self, at: int) -> frozenset[str]:
        """The content words of the value's clause before its verb (empty with no verb)."""
        if not self.verbs:
            return frozenset()
        opening = self._opening(at)
        verb = _VERB.search(self.sentence, opening, at)
        return _words(self.sentence[opening : verb.start()]) if verb else frozenset()

    def marked_old(self, at: int, end: int) -> bool:
        """Whether the value's clause, before or after it, holds a word marking it old."""
        return self.old and bool(
            _OLD.search(self.sentence, self._opening(at), at)
            or _OLD.search(self.sentence, end, self._closing(end))
        )

    def named_past(self, at: int, end: int) -> bool:
        """Whether a word between the value and its neighbours in its clause says it is
        past (`_Value.named_past`)."""
        sentence = self.sentence
        earlier = bisect_left(self.starts, at)
        before = self.reached[earlier - 1] if earlier else 0
        later = bisect_right(self.starts, at)
        beyond = self.starts[later] if later < len(self.starts) else len(sentence)
        return bool(
            _PAST_BEFORE_RE.search(_CLAUSE_BREAK.split(sentence[before:at])[-1])
            or _PAST_AFTER_RE.search(_CLAUSE_BREAK.split(sentence[end:beyond])[0])
        )


def _who(role: str) -> str:
    return role.split("(")[0].split(" ")[0]


_ANY = Line("user", "", ())
"""An earlier line any user statement may replace (`_may_correct`'s own rule alone)."""


def _may_correct(later: Line, earlier: Line) -> bool:
    """Whether `later` may replace `earlier`: the user's statement, no question, after the
    user's own, the assistant's or a tool's. A tool's or the assistant's line replaces
    nothing: they report what was done ("Edited x.py: three lines changed." then "Edited
    y.py: one line changed."), two events, not a value and its correction."""
    return (
        _who(later.role) == "user"
        and _who(earlier.role) != "system"
        and not later.text.rstrip().endswith("?")
    )


def _same_shape(one: _Value, other: _Value) -> bool:
    """Whether two values are of one kind: the same shape, or a number with a unit and a
    bare number whose sentence names that unit ("3 retries", "the retries go down to 2")."""
    if one.shape == other.shape:
        return True
    bare, unit = (one, other) if one.shape == "9" else (other, one)
    return bare.shape == "9" and unit.shape.startswith("9 ") and unit.shape[2:] in bare.context


def _shapes_matched(value: _Value) -> set[str]:
    """The shapes `_same_shape` matches with `value`'s (a bare number's: with each unit its
    sentence names)."""
    if value.shape != "9":
        return {value.shape}
    return {value.shape} | {f"9 {word}" for word in value.context}


def _same_subject(old: _Value, new: _Value) -> bool:
    """Whether two values of one kind are said of one subject: their sentences share a
    content word, and their subjects before "is", when both have one, do not each hold a
    word the other lacks."""
    if not (_same_shape(old, new) and old.context & new.context):
        return False
    if old.subject and new.subject:
        return old.subject <= new.subject or new.subject <= old.subject
    return True


def _stands_for(new: _Value, past: Sequence[_Value]) -> bool:
    """Whether `new` is, or stands in for, a value its line names as past that the earlier
    line does not hold (`past`): "the gateway listens on port 2362, not 6169" changes 6169,
    not the port 24379 an earlier line gave a mock server."""
    return any(other is new or _same_subject(other, new) for other in past)


def _replaced_values(
    later: Line, earlier: Line, new: dict[str, _Value], old: dict[str, _Value]
) -> frozenset[str]:
    """The values (lower-cased) of `earlier` (its values `old`) that `later` (its values
    `new`) replaces; empty when it replaces none or would lose one of the others."""
    if not _may_correct(later, earlier):
        return frozenset()
    fresh = [value for key, value in new.items() if key not in old]
    held = earlier.text.lower()
    past = [  # named as past, and not what the earlier line said ("from Kenji Kowalczyk")
        value
        for value in fresh
        if value.named_past
        and _whole(value.key, held) < 0
        and not any(_whole(key, value.key) >= 0 for key in old)
    ]
    replaced = set()
    for key, value in old.items():
        named = new.get(key)
        if named is not None and named.done:
            replaced.add(key)
            continue
        if named is not None and not named.marked_old:
            continue
        instead = next(  # said with a change word, or in place of "not <old>"
            (
                other
                for other in fresh
                if _same_subject(value, other)
                and (named is not None or (other.changes and not _stands_for(other, past)))
            ),
            None,
        )
        if instead is not None:  # one new value stands in for one old one
            fresh.remove(instead)
            replaced.add(key)
    if not replaced or not set(old) - replaced <= set(new):
        return frozenset()
    return frozenset(replaced)


def settle(lines: Sequence[Line]) -> Settled:
    """Which lines later statements replaced, and which only echo earlier ones.

    A later line replaces an earlier one only when it names one of its values, or reads as
    a change and states a value of a shape and a content word the earlier one has
    (`_replaced_values`), so each earlier line is checked against those later lines alone,
    in order: near linear in the lines for a history that corrects little, where checking
    every pair took minutes on a long document (1,800 lines: 1.7 million pairs). A later
    line is looked at for a value it names only when it names it done or old (otherwise
    naming it replaces nothing), and for a value of the same kind only when it reads as a
    change and shares one of its words: lines that restate the same values ("2024-01-05
    12:00:01 worker-3 ok", a log) are not checked against each other."""
    keyed = [i for i, line in enumerate(lines) if line.keys]
    counts = Counter(word for i in keyed for word in _words(lines[i].text))
    common = frozenset(
        word for word, n in counts.items() if n > max(COMMON_LINES, len(keyed) // COMMON_SHARE)
    )
    values = {i: _values(lines[i], common) for i in keyed}
    naming: dict[str, list[int]] = {}
    changing: dict[str, dict[str, list[int]]] = {}
    for i in keyed:
        if not _may_correct(lines[i], _ANY):
            continue
        for key, value in values[i].items():
            if value.done or value.marked_old:  # else naming it replaces nothing
                naming.setdefault(key, []).append(i)
            if value.changes:
                for shape in _shapes_matched(value):
                    of_shape = changing.setdefault(shape, {})
                    for word in value.context:
                        of_shape.setdefault(word, []).append(i)
    replaced: set[int] = set()
    corrections: list[tuple[int, int]] = []
    stale: set[str] = set()
    for i in keyed:
        later: set[int] = set()
        for key, value in values[i].items():
            candidates = [naming.get(key, ())]
            for shape in _shapes_matched(value):
                said = changing.get(shape)
                if said:
                    candidates += [said[word] for word in said.keys() & value.context]
            for found in candidates:
                if found and found[-1] > i:
                    later.update(found[bisect_right(found, i) :])
        for j in sorted(later):
            old = _replaced_values(lines[j], lines[i], values[j], values[i])
            if old:
                replaced.add(i)
                corrections.append((i, j))
                stale |= old
                break
    stated: set[str] = set()
    echoes: set[int] = set()
    for i, line in enumerate(lines):
        keys = {key.lower() for key in line.keys}
        who = _who(line.role)
        if who in ("user", "tool"):
            stated |= keys
        elif keys and who == "assistant" and keys <= stated:
            echoes.add(i)
            if keys <= stale:
                replaced.add(i)
    return Settled(frozenset(replaced), frozenset(echoes - replaced), tuple(corrections))


def stated_subject(text: str) -> frozenset[str]:
    """The subject a sentence states something of: the words of the clause before its first
    verb ``is``/``are`` (``the main database`` in "The main database is called X"); empty
    when it has no such verb."""
    verb = _VERB.search(text)
    if verb is None or text.rstrip().endswith("?"):
        return frozenset()
    clause = _CLAUSE_BREAK.split(text[: verb.start()])[-1]
    return frozenset(_WORD.findall(clause.lower())) - _FILLER


def contradicts(note: str, statements: Sequence[Line]) -> bool:
    """Whether a note line states a subject one of the user's `statements` states, without
    that statement's value: a small model's guess ("The main database is called PostgreSQL"
    beside the user's "The main database is called heron_signal")."""
    subject = stated_subject(note)
    if not subject:
        return False
    lowered = note.lower()
    for line in statements:
        if _who(line.role) != "user" or line.text.rstrip().endswith("?"):
            continue
        for words, value in subjects(line.text, line.keys):
            if words == subject and value not in lowered:
                return True
    return False


def settled(facts: Sequence[Fact]) -> tuple[list[Fact], list[Fact]]:
    """(all, live): the facts with echoes scored `LISTING_SCORE` and each correction naming
    the statement it replaced (``Fact.supersedes``), and those of them no later statement
    replaced: a replaced line is never quoted beside its correction, and is counted on the
    merged line like any line not quoted."""
    lines = [Line(fact.role, fact.text, key_spans(fact.text)) for fact in facts]
    found = settle(lines)
    replaces = {later: facts[earlier].text for earlier, later in reversed(found.corrections)}
    every = [
        replace(fact, score=min(fact.score, LISTING_SCORE), rule="echo")
        if i in found.echoes
        else replace(fact, supersedes=replaces[i])
        if i in replaces
        else fact
        for i, fact in enumerate(facts)
    ]
    return every, [fact for i, fact in enumerate(every) if i not in found.replaced]
