"""Earlier turns that bear on the latest user message, quoted from a condensed history. Pure.

An extraction is made once and spliced turn after turn, so it cannot know the questions to
come: a fact it did not keep is gone for every later turn, however plainly the user asks
about it. But the client resends the whole conversation with every request, so the turns the
extraction stands in for are still at hand when a request is spliced. This module picks,
from those turns, the passages that share the most *distinctive* words with the latest user
message, and quotes them, verbatim and labelled with who said them, beside that message.

The ranking is Okapi BM25 (Robertson and Zaragoza, 2009), the standard lexical retrieval
score, over passages of the condensed turns (a turn, or a part of a long one): a word shared
with the question counts by how rare it is among the passages (its inverse document
frequency), saturating with repeats, normalised by the passage's length. Words are Unicode
word runs, lower-cased, with a plural's "s" folded (`fold`: "dogs' names" finds "your other
dog" and "Her name's Coco"); there is no stop-word list and no other stemming: a word found in
most passages ("the", "is", "der") weighs next to nothing by its frequency alone, and so does
a word found in every turn of a transcript ("called"). A passage is quoted only when it shares
a word rarer than in half of the passages.

A conversation that runs over days often dates its sessions once, in a stamp opening their
first turn ("[1:56 pm on 8 May, 2023] Hey! …"). A passage is ranked with the stamp of the
latest turn before it (`STAMP`, `Passage.dated`), so a question naming the day ties every
turn said then, and its other words decide among them: ranked alone, the stamped greeting
held the question's rarest words and was quoted last. The excerpt read last opens with its
stamp when the room left holds it (`_dated_last`), so what a reader answers from says when
it was said; the others are quoted as said.

Only passages scoring at least half the best passage's score are quoted (`RELATIVE_SCORE`):
the room is a ceiling, not a quota, and a passage sharing one word with the question, quoted
right before it, is what a small reader answers from.

A quoted passage comes with the one after it (the rest of its turn, or the reply to it), where
the answer to the subject it raised usually is, and with the one after that when the reply
ends asking a question, since the answer to that is there (`_reach`); a passage the
extraction also quotes is quoted again in its place, so the excerpt does not end before what
came last. A turn holding a statement a later turn replaced is not quoted, nor the short
reply that acknowledged it: the ledger records the replacements among the condensed turns
(``Fact.supersedes``), and `restated_later` reads the turns sent verbatim after them by the
same rule. Where turns between two quoted passages are left out, a `GAP` line says so.

The excerpts (runs of passages said one after the other) are quoted in the conversation's
order, but for the one holding the best-ranked passage, which comes last, right before the
question: a reader weighs most what it read last (a model's use of a long context falls off
away from its ends: Liu et al., "Lost in the Middle", TACL 2024), and the best-ranked passage
is the likeliest to answer. Within an excerpt the order is the conversation's, so an answer
still follows the turn that asked for it and a decision the options it settled; a statement a
later turn replaced is not quoted at all (above), so moving an older excerpt last cannot put a
stale value after its correction.

The turns sent verbatim after the condensed ones are scored too, by the condensed passages'
word statistics, and the best of them, when it matches the question better than every
condensed passage, is quoted again, last (`pick`'s `newest`): the block stands after those
turns, right before the question, and a reader shown older excerpts there answered from them
when the answer was in the turn just before them. Where no condensed passage is quoted,
nothing is: the newest turns are read where they were sent.

What is picked is measured by `overspill eval` on LoCoMo's dialogues (docs/eval/index.md).
"""

from __future__ import annotations

import functools
import math
import re
import threading
from collections import Counter
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, replace

from kernel.bounded import Bounded
from kernel.types import Message
from middleware.condensing.ledger.supersede import Line, settle
from middleware.condensing.ledger.terms import fold, key_spans, sentences
from middleware.condensing.prompt import content_text, speaker
from middleware.condensing.split import SYSTEM_ROLES

K1 = 1.2
"""BM25's term-frequency saturation (the usual value)."""
B = 0.75
"""BM25's length normalisation (the usual value)."""
PASSAGE_CHARS = 600
"""A longer turn is quoted in parts of about this many characters, cut at line or sentence
ends, so one long tool result cannot take the whole room."""
MIN_PASSAGE_TOKENS = 8
"""Below this much room left, no passage is looked at any more."""
RELATIVE_SCORE = 0.5
"""A passage scoring below this share of the best passage's score is not quoted, however
much room is left: it shares with the question only a word or two the best one also has, or
a more common one ("on", "long", "city"), and quoted right before the question such a
neighbour is what a small reader answers from ("I'll use port 26883 for the mock payment
server" before "Which port does the API gateway listen on?"). The best passage counts
whether or not it is quoted (the extraction may show it, or a later turn replaced it)."""
MAX_ACKNOWLEDGEMENT_CHARS = 160
"""A reply this short right after a replaced statement acknowledges it (and is left out with
it); a longer one says more."""
MAX_QUESTION_CHARS = 2000
"""Only the start of a longer user message is read as the question."""
LABEL = (
    "[overspill: turns from the condensed earlier part of this conversation that bear on the "
    "message below, quoted verbatim]"
)
END = "[end of quoted turns]"
GAP = "[…]"
"""The line between two quoted passages that were not said one after the other: without it
turns from different days read as one exchange (one session's "Thanks! I can't wait for your
visit either. Take care" ran straight into another's "Wow Dave, sounds awesome! Music
festivals bring so much joy")."""

STAMP = re.compile(r"\[([^\[\]\n]{1,80})\]")
"""A turn opening with a bracketed date or time (`WHEN`: ``[1:56 pm on 8 May, 2023] …``,
``[2024-01-05] …``), as a client writes when a conversation runs over days: the turns after
it, until the next stamp, were said then too. A question naming the date ("What did she
mention on 8 May, 2023?") is about all of them, not only the one that opens the session, so
each is ranked with the stamp before it (`Passage.dated`): without it the stamped greeting
("[…] Hey Deborah! How've you been?") shares the question's rarest words and is quoted last,
right before the question, however little it says."""
_MONTH = (
    r"(?:jan(?:uary)?|feb(?:ruary)?|mar(?:ch)?|apr(?:il)?|may|june?|july?|aug(?:ust)?"
    r"|sep(?:t(?:ember)?)?|oct(?:ober)?|nov(?:ember)?|dec(?:ember)?)\b\.?"
)
WHEN = re.compile(
    r"\b\d{1,2}:\d{2}\b|\b\d{4}-\d{1,2}-\d{1,2}\b|\b\d{1,2}[/.]\d{1,2}[/.]\d{2,4}\b"
    rf"|(?i:\b{_MONTH},?\s+\d{{1,4}}\b|\b\d{{1,2}}(?:st|nd|rd|th)?\s+(?:of\s+)?{_MONTH})"
)
"""A time (``10:32``), an ISO or numeric date (``2024-01-05``, ``05/01/24``), or an English
month with a day or year (``8 May``, ``May 8``, ``August, 2023``): what makes a bracketed
opening a stamp (``[OTTER-512]`` or ``[JIRA-123]`` is a tag, not a time)."""
_CLOSING = " \t\n\"')\u201d\u2019"
"""What may close a sentence after its mark: a quote, a bracket, space."""
_WORD = re.compile(r"\w+")
_BREAK = re.compile(r"(?<=\n)|(?<=[.!?])\s+")


@dataclass(frozen=True, slots=True)
class Passage:
    """A turn, or a part of a long one, as it may be quoted."""

    index: int
    """The message's position in the request."""
    who: str
    text: str
    part: int = 0
    """Which part of its turn (0: the first, or the whole turn)."""
    dated: str = ""
    """The stamp (`STAMP`) in force where it was said, when the passage does not hold it
    itself: its turn's, or that of the latest turn before it that opens with one. Read when
    it is ranked; quoted only before the excerpt read last (`_dated_last`)."""

    def render(self) -> str:
        """``- user: text`` (a tool result names its tool)."""
        return f"- {self.who}: {self.text}"


def passages(
    messages: Sequence[Message], indices: Sequence[int], stamp: str | None = None
) -> list[Passage]:
    """The passages of the messages at `indices` (system messages and empty turns none),
    each dated by the latest `STAMP` at or before it (`Passage.dated`); `stamp` is the one in
    force before the first of them when the caller knows it (`in_force` of the passages
    before), else it is looked for among the messages before."""
    found: list[Passage] = []
    for index in indices:
        message = messages[index]
        if message.get("role") in SYSTEM_ROLES:
            continue
        text = content_text(message)
        own = _stamp(text)
        if own:
            stamp = own
        elif stamp is None:
            stamp = _stamp_before(messages, index)
        found += _passages_of(index, speaker(message), text, "" if own else stamp)
    return found


def in_force(found: Sequence[Passage]) -> str:
    """The stamp in force after the last of `found` (`passages`' `stamp` for the turns that
    follow them), "" when none."""
    if not found:
        return ""
    last = found[-1]
    return last.dated or _stamp(last.text)


def _stamp(text: str) -> str:
    """The stamp `text` opens with (`STAMP`, holding a `WHEN`; space before it skipped),
    or ""."""
    if text[:1].isspace():
        text = text.lstrip()
    found = STAMP.match(text) if text.startswith("[") else None
    return found.group(1) if found and WHEN.search(found.group(1)) else ""


def _stamp_before(messages: Sequence[Message], index: int) -> str:
    """The stamp of the latest message before `index` that opens with one, or ""."""
    for earlier in range(index - 1, -1, -1):
        said = messages[earlier]
        if said.get("role") not in SYSTEM_ROLES and (own := _stamp(content_text(said))):
            return own
    return ""


@functools.lru_cache(maxsize=16384)
def _passages_of(index: int, who: str, text: str, dated: str) -> tuple[Passage, ...]:
    """The passages of one message (cached: a conversation's turns come back with every
    request, and each passage would be made again); the parts after a stamped first one are
    dated by it."""
    own = _stamp(text)
    return tuple(
        Passage(index, who, part, n, dated if n == 0 or not own else own)
        for n, part in enumerate(_parts(text))
    )


def _parts(text: str) -> tuple[str, ...]:
    """`text` in parts of at most about `PASSAGE_CHARS`, cut at line or sentence ends (a
    part with no such end is cut where it reaches the size)."""
    text = text.strip()
    if len(text) <= PASSAGE_CHARS:
        return (text,) if text else ()
    parts: list[str] = []
    current = ""
    for piece in _BREAK.split(text):
        while len(piece) > PASSAGE_CHARS:  # a run with no line or sentence end in it
            if current.strip():
                parts.append(current.strip())
            current = ""
            parts.append(piece[:PASSAGE_CHARS])
            piece = piece[PASSAGE_CHARS:]
        if current and len(current) + len(piece) > PASSAGE_CHARS:
            parts.append(current.strip())
            current = ""
        glue = " " if current and not current.endswith("\n") else ""
        current = f"{current}{glue}{piece}"
    if current.strip():
        parts.append(current.strip())
    return tuple(p for p in parts if p)


def words(text: str) -> tuple[str, ...]:
    """`text`'s words, lower-cased, each `fold`ed."""
    return tuple(fold(word) for word in _WORD.findall(text.lower()))


@functools.lru_cache(maxsize=16384)
def _ranked_bag(dated: str, text: str) -> tuple[Mapping[str, int], int]:
    """`_bag` of what a passage is ranked by: its text, after its stamp when it has one
    (cached apart: the key's two strings hash once, the text with its stamp would be made and
    hashed again at every request)."""
    return _bag(f"{dated} {text}") if dated else _bag(text)


@functools.lru_cache(maxsize=16384)
def _bag(text: str) -> tuple[Mapping[str, int], int]:
    """How often each word occurs in `text`, and how many words it has (cached: never
    changed by a caller)."""
    found = words(text)
    return Counter(found), len(found)


def ranked(
    question: str, found: Sequence[Passage], also: Sequence[Passage] = ()
) -> list[tuple[float, int]]:
    """(BM25 score, position) of each passage of `found`, then of `also` (positions after
    `found`'s), sharing a distinctive word with `question`, best first; ties in the
    conversation's order. Which words are distinctive, and how much each weighs, is read
    from `found` alone, so passages in `also` change nothing of how `found`'s rank (many
    short newest turns would make a word every condensed turn holds look rare)."""
    asked = sorted(set(words(question[:MAX_QUESTION_CHARS])))
    if not asked or not found:
        return []
    index = word_index(found)
    total = len(found)
    newest = [_ranked_bag(p.dated, p.text) for p in also]
    scores: dict[int, float] = {}
    for word in asked:
        holding = index.holding.get(word, ())
        n = len(holding)
        if n >= total / 2:
            continue
        idf = math.log(1 + (total - n + 0.5) / (n + 0.5))
        held = [(p, *index.bags[p]) for p in holding]
        held += [(total + p, *bag) for p, bag in enumerate(newest) if word in bag[0]]
        for position, bag, length in held:
            tf = bag[word]
            norm = K1 * (1 - B + B * length / index.average)
            scores[position] = scores.get(position, 0.0) + idf * tf * (K1 + 1) / (tf + norm)
    return sorted(((score, p) for p, score in scores.items()), key=lambda x: (-x[0], x[1]))


INDEXED_PASSAGES = 32768
"""How many passages the kept word indexes cover, over all collections (`word_index`; least
recently used out, the newest always kept): between two growths a conversation's condensed
turns are the same at every request, so its index is built once per growth. As many as the
splice keeps read (`splice_memory.PASSAGES_KEPT`), so each conversation it remembers keeps
its index too; an index of 2,000 passages of chat holds about a megabyte."""


@dataclass(frozen=True, slots=True)
class WordIndex:
    """The passages of a conversation's condensed turns, by word: which passages hold each
    word (in order), each passage's word counts and length, their mean length."""

    found: tuple[Passage, ...]
    """The passages indexed (held, so that their ids in `_INDEXED`'s key stay theirs)."""
    bags: tuple[tuple[Mapping[str, int], int], ...]
    holding: Mapping[str, tuple[int, ...]]
    average: float

    @classmethod
    def of(cls, found: tuple[Passage, ...]) -> WordIndex:
        """The index of `found`."""
        bags = tuple(_ranked_bag(p.dated, p.text) for p in found)
        holding: dict[str, list[int]] = {}
        for position, (bag, _) in enumerate(bags):
            for word in bag:
                holding.setdefault(word, []).append(position)
        average = (sum(length for _, length in bags) / len(bags) if bags else 0.0) or 1.0
        return cls(found, bags, {w: tuple(at) for w, at in holding.items()}, average)


_INDEXED: Bounded[tuple[int, ...], WordIndex] = Bounded(
    INDEXED_PASSAGES, lambda index: len(index.found)
)
_INDEXING = threading.Lock()


def word_index(found: Sequence[Passage]) -> WordIndex:
    """The word index of `found`, built once for the same passages (the same objects: the
    passages of a turn are cached, `_passages_of`, so a conversation's condensed turns come
    back as the same passages at every request; keyed by their ids, which stay theirs while
    the index holds them), those most recently used kept (`INDEXED_PASSAGES`)."""
    key = tuple(map(id, found))
    with _INDEXING:
        index = _INDEXED.get(key)
    if index is not None:
        return index
    made = WordIndex.of(tuple(found))
    with _INDEXING:  # another thread may have made it meanwhile
        return _INDEXED.get(key) or _INDEXED.put(key, made)


def pick(
    question: str,
    found: Sequence[Passage],
    room: int,
    count: Callable[[str], int],
    replaced: Collection[str] = (),
    later: Sequence[Message] = (),
    newest: Sequence[Passage] = (),
) -> list[Passage]:
    """The best-ranked passages that fit `room` tokens together (as `count` counts their
    rendered lines), each followed by the passage after it when that fits too, in the
    conversation's order but for the excerpt holding the best-ranked of them, which comes
    last (`_best_last`); one holding a statement of `replaced`, or the short reply right
    after one, is not quoted.

    A passage the extraction already quotes is quoted again: the block is an excerpt of the
    conversation, read in its order, and one with that passage cut out ends where it did not
    ("For the mobile app, should we use Jenkins or CircleCI?" and the reply weighing both,
    without "Decision: we go with CircleCI" and "Agreed, CircleCI it is"), and a reader
    answers from the last thing it read.

    `replaced`: statements a later turn corrected or finished (the ledger's
    ``Fact.supersedes``): the ledger quotes what replaced them, and a reader shown the old
    statement beside the new one may answer the old value. `later`: the turns after the
    condensed ones, sent verbatim; a statement of a passage one of them replaces is not
    quoted either (`restated_later`), since the quote stands after them, right before the
    question.

    The passage after a picked one is the rest of its turn or the reply to it: a question's
    words are most often those of the turn that raised its subject ("What's your dog
    called?"), and the answer is in what came next ("Max, after my grandfather"). When that
    reply ends asking a question (`_asks`: "This pup is so adorable! What's their name?"),
    the answer is in the passage after it ("Their name is Luna."), which comes too (`_reach`).

    `newest`: the passages of the turns sent verbatim before the question. They are ranked
    with the condensed ones (by the condensed ones' word statistics, `ranked`), and the best
    of them (none a later one replaces) is quoted (with the passage after it) only when it
    outranks every condensed passage and a condensed one is quoted too (`_eligible`): the
    block is read after those turns, right before the question, and a block of older
    excerpts alone there is what a reader answers from when the answer was in the newest
    turns it read before the block. Quoted last, the best match is read last wherever it
    stands; where no condensed turn bears on the question nothing is quoted, as before.
    """
    picked: set[int] = set()
    left = room - count(f"{LABEL}\n{END}")
    newline = count("\n")  # each line's: counted apart, as the block's text may join them
    gap = count(GAP) + newline
    every = [*found, *newest]
    order = _eligible(ranked(question, found, newest), len(found))
    if later:
        reached = {at for _, p in order for at in _reach(every, p)}
        replaced = [*replaced, *restated_later(found, sorted(reached), later)]
    stale = [flat for flat in (" ".join(statement.split()) for statement in replaced) if flat]
    replaced_turns = _Replaced(every, stale, len(found))
    again = False  # one of the newest turns quoted again
    for _, position in order:
        if left < MIN_PASSAGE_TOKENS:
            break
        if position >= len(found) and again:
            continue  # one is enough: the others are in the request, read before the block
        for at in _reach(every, position):
            if at != position and at - 1 not in picked:
                break  # the passage after comes only with the one before it
            if at in picked or replaced_turns.leaves_out(at):
                continue
            cost = count(every[at].render()) + newline
            if picked and not _joins(every, picked, at):
                cost += gap
            if cost <= left:
                picked.add(at)
                left -= cost
                again = again or (at == position and position >= len(found))
    if not picked.intersection(range(len(found))):
        return []  # nothing condensed is quoted: the newest turns are read as they were sent
    return _dated_last(_best_last(every, sorted(picked), _best(order, picked)), left, count)


def _dated_last(quoting: list[Passage], left: int, count: Callable[[str], int]) -> list[Passage]:
    """`quoting` (not empty) with the last excerpt's first passage opening with its stamp
    (`Passage.dated`) when it has one and it fits the `left` tokens: what a reader reads
    last, right before the question, and answers from, says when it was said ("When did
    Melanie paint the sunrise?"). The other excerpts are quoted undated: each stamp takes the
    room of a passage, and a reader answers from the last."""
    first = len(quoting) - 1
    while first > 0 and _next(quoting[first - 1], quoting[first]):
        first -= 1
    undated = quoting[first]
    if not undated.dated:
        return quoting
    dated = replace(undated, text=f"[{undated.dated}] {undated.text}", dated="")
    if count(dated.render()) - count(undated.render()) > left:
        return quoting
    return [*quoting[:first], dated, *quoting[first + 1 :]]


def _reach(every: Sequence[Passage], position: int) -> range:
    """The positions a pick of the passage at `position` quotes: it, the passage after it,
    and, when that one ends asking a question (`_asks`), the one after that, which answers
    it (an adjacency pair: a question is answered in the next turn)."""
    end = position + 2
    if end < len(every) and _asks(every[position + 1]):
        end += 1
    return range(position, min(end, len(every)))


def _asks(passage: Passage) -> bool:
    """Whether `passage` ends asking a question ("So, where are you going to stay?")."""
    return passage.text.rstrip(_CLOSING).endswith("?")


def _eligible(order: Sequence[tuple[float, int]], condensed: int) -> list[tuple[float, int]]:
    """Of `order` (BM25 score, position; best first), where positions below `condensed` are
    the condensed turns' passages and the rest the newest turns': the condensed passages
    scoring at least `RELATIVE_SCORE` of the best condensed one, and the newest passages
    scoring above every condensed one. None when no condensed passage shares a distinctive
    word with the question."""
    top = next((score for score, position in order if position < condensed), None)
    if top is None:
        return []
    bar = top * RELATIVE_SCORE
    return [
        (score, position)
        for score, position in order
        if (score >= bar if position < condensed else score > top)
    ]


def _best(order: Sequence[tuple[float, int]], picked: Collection[int]) -> int | None:
    """The picked position of the highest score in `order` (best first, ties in the
    conversation's order), the latest of equals."""
    best: int | None = None
    top = 0.0
    for score, position in order:
        if best is not None and score < top:
            break
        if position in picked:
            best, top = position, score
    return best


def _best_last(found: Sequence[Passage], picked: Sequence[int], best: int | None) -> list[Passage]:
    """The passages at `picked` (positions in `found`, in order) in excerpts, runs said one
    after the other, in the conversation's order but for the excerpt holding `best`, which
    comes last. Moving one excerpt keeps the number of `GAP` lines the room counted: the
    two it stood between were apart, and so are the last and it."""
    excerpts: list[list[int]] = []
    for position in picked:
        if excerpts and _next(found[excerpts[-1][-1]], found[position]):
            excerpts[-1].append(position)
        else:
            excerpts.append([position])
    moved = [run for run in excerpts if best in run]
    ordered = [run for run in excerpts if best not in run] + moved
    return [found[position] for run in ordered for position in run]


def _joins(found: Sequence[Passage], picked: Collection[int], at: int) -> bool:
    """Whether the passage at `at` would be quoted right after or right before a picked one
    (no `GAP` line between them)."""
    return (at - 1 in picked and _next(found[at - 1], found[at])) or (
        at + 1 in picked and _next(found[at], found[at + 1])
    )


def _next(before: Passage, after: Passage) -> bool:
    """Whether `after` was said right after `before` (a later part of the same turn, or the
    next message)."""
    later = (before.index, before.part) < (after.index, after.part)
    return later and after.index <= before.index + 1


def restated_later(
    found: Sequence[Passage], positions: Sequence[int], later: Sequence[Message]
) -> list[str]:
    """The statements of the passages at `positions` (in order) that a later line, of them or
    of `later`, replaces, read by the ledger's own rule (``supersede.settle``: the user's
    later line states a new value of the same subject as a change, or names the old one as
    old). The ledger records only the replacements inside what it condensed; a correction
    made in the turns kept verbatim is not in it, and quoting the old statement after those
    turns would put the stale value last, right before the question. Every later line is
    read, as the ledger reads its own: which words are too common to tie two statements
    depends on all of them."""
    lines: list[Line] = []
    for position in positions:
        if position < len(found):
            passage = found[position]
            lines += _lines(passage.who, passage.text)
    mine = len(lines)
    for message in later:
        if message.get("role") not in SYSTEM_ROLES:
            lines += _lines(speaker(message), content_text(message))
    if mine == 0 or mine == len(lines):
        return []
    return [lines[i].text for i in sorted(settle(lines).replaced) if i < mine]


def _restated_among(newest: Sequence[Passage], first: int) -> frozenset[int]:
    """The positions (from `first`) of the passages of `newest` holding a statement a later
    one of them replaces, by the ledger's rule (`restated_later`'s, read among the newest
    turns alone: what the condensed turns replaced is in the ledger's records)."""
    lines: list[Line] = []
    owners: list[int] = []
    for position, passage in enumerate(newest, start=first):
        for line in _lines(passage.who, passage.text):
            lines.append(line)
            owners.append(position)
    return frozenset(owners[i] for i in settle(lines).replaced) if lines else frozenset()


@functools.lru_cache(maxsize=4096)
def _lines(who: str, text: str) -> tuple[Line, ...]:
    """A turn as the ledger's lines (cached: the verbatim turns come back with every
    request)."""
    return tuple(Line(who, said, key_spans(said)) for said in sentences(text))


class _Replaced:
    """Which passages are left out as replaced: one holding a replaced statement, and the
    short reply right after it (`MAX_ACKNOWLEDGEMENT_CHARS`: "Noted: next we X." acknowledges
    the statement and says it again). Looked at only for the passages a pick reaches."""

    def __init__(self, found: Sequence[Passage], stale: Sequence[str], condensed: int) -> None:
        self.found = found
        self.stale = stale
        self.condensed = condensed
        self.seen: dict[int, bool] = {}
        self.restated: frozenset[int] | None = None

    def leaves_out(self, at: int) -> bool:
        """Whether the passage at `at` is left out (one of the newest turns' also when a
        later one of them replaces it, `_restated_among`)."""
        if at >= self.condensed:
            if self.restated is None:
                self.restated = _restated_among(self.found[self.condensed :], self.condensed)
            if at in self.restated:
                return True
        if not self.stale:
            return False
        if self._statement(at):
            return True
        if not at:
            return False
        reply, before = self.found[at], self.found[at - 1]
        return (
            before.index != reply.index
            and len(reply.text) <= MAX_ACKNOWLEDGEMENT_CHARS
            and self._statement(at - 1)
        )

    def _statement(self, at: int) -> bool:
        """Whether the passage at `at` holds a replaced statement, read as the ledger reads a
        turn (its sentences, a list item's marker off, one space between: each of `stale` is
        so; looked at once)."""
        if at not in self.seen:
            flat = _as_the_ledger_reads(self.found[at].text)
            self.seen[at] = any(statement in flat for statement in self.stale)
        return self.seen[at]


@functools.lru_cache(maxsize=1024)
def _as_the_ledger_reads(text: str) -> str:
    """A passage's sentences, a list item's marker off, one space between (cached: a
    conversation's passages come back at every spliced request, and splitting one costs
    about six times collapsing its whitespace; a passage is about `PASSAGE_CHARS` at most, so
    1,024 of them with their forms hold about 1.3 MB)."""
    return " ".join(" ".join(sentences(text)).split())


def quoted(picked: Sequence[Passage]) -> str:
    """The block put before the user's message: the label, one line per passage, a `GAP`
    line where turns between two passages are left out, the end."""
    lines = [LABEL]
    for at, passage in enumerate(picked):
        if at and not _next(picked[at - 1], passage):
            lines.append(GAP)
        lines.append(passage.render())
    return "\n".join([*lines, END])


def with_preface(message: Message, block: str) -> Message:
    """`message` with `block` before its text (a parts list gets a text part first)."""
    content = message.get("content")
    if isinstance(content, list):
        return {**message, "content": [{"type": "text", "text": block}, *content]}
    return {**message, "content": f"{block}\n\n{content or ''}"}
