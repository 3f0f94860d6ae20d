"""A fact's key terms, and how surely a sentence bears a fact. Pure, for any language's text.

A fact's *key terms* are the tokens it hangs on: anything with a digit, code identifiers,
runs of capitalised names, capitalised words inside a sentence (``key_spans``). A sentence's
*signal* says how surely it bears a fact (``fact_signal``): a digit, an identifier, a date
word, a word that takes a decision, capitalised words.
"""

from __future__ import annotations

import functools
import re

from middleware.condensing.prompt import DIGIT_TOKEN, SNAKE_TOKEN

__all__ = [
    "DECISION",
    "IDENT_TOKEN",
    "fact_signal",
    "fold",
    "key_spans",
    "key_tokens",
    "sentences",
    "sets_standing_rule",
    "takes_decision",
    "term_weight",
]

IDENT_TOKEN = re.compile(
    r"\b[\w.-]*/[\w./-]*\.[A-Za-z]\w{0,5}\b|`[^`\n]{1,80}`|"
    + SNAKE_TOKEN.pattern
    + r"|\b[a-z]+[A-Z]\w*\b|\b\w+\.\w+\(\)|\b[\w.+-]+@[\w-]+\.\w+"
)
"""A code identifier: a path, a backticked term, ``snake_case``, ``camelCase``, a call, a
mail address."""
_INSIDE = r"(?<!^)(?<!\n)(?<![.!?:]\s)(?<![.!?:]\s\s)"
"""Not where a word is capitalised by where it stands: first in the text, on a new line, or
after a full stop, a question or exclamation mark or a colon (one space or two after it): a
speaker's "Dave: Thanks, …", a label's "Note: Remember …". A word opening a quotation is
taken: '"Great job"' and '"Inception"' cannot be told apart by their place."""
_NAME_RUN = re.compile(_INSIDE + r"\b[A-Z][a-z]+(?:\s+[A-Z][a-z]+)+")
"""Capitalised words one after the other inside a sentence: a name of several words."""
_CAPITAL = re.compile(_INSIDE + r"\b[A-Z][a-z]{2,}\b")
"""A capitalised word inside a sentence."""
_MARKED_NAME = re.compile(r"\b[A-Z][a-z]+[A-Z][A-Za-z]*\b")
"""A word with a capital inside it (MongoDB, GitHub, McDonald): no sentence start explains
that capital, so it is a name wherever it stands. A word in capitals is not taken: a log's
PASSED or a generic API cannot be told from an acronym that names something (NATS)."""
_LONE_NAME = re.compile(f"{_CAPITAL.pattern}|{_MARKED_NAME.pattern}")
"""A name on its own: capitalised inside a sentence, or with a capital inside it."""
_DATE_WORD = re.compile(
    r"\b(?:january|february|march|april|june|july|august|september|october|november|december|"
    r"jan|feb|mar|apr|jun|jul|aug|sep|sept|oct|nov|dec)\b|"
    r"(?-i:(?<!^)\bMay\b)|\bmay\s+\d{1,2}\b|"  # the month, not "you may not"
    r"\b(?:mon|tues|wednes|thurs|fri|satur|sun)days?\b|\b(?:tomorrow|yesterday|tonight)\b",
    re.IGNORECASE,
)
"""A month or a day: whole words ("decided", "separate" and "market" are none), and "may"
only capitalised inside a sentence or before a day's number."""
DECISION = re.compile(
    r"\b(?:decided|decision|agreed|chose|chosen|prefer\w*|picked|settled on|switch(?:ed)? to|"
    r"always|never|must|don'?t|do not|deadline|remember|my name|call me|todo|password|budget|"
    r"edited|written|created|deleted|renamed|fixed|(?:edit|write|create|delete|rename)_\w+)\b",
    re.IGNORECASE,
)
"""Words that take a decision, state a standing rule or preference, or record a change made:
a short list of English verbs and nouns of deciding (not the phrasings of any one
conversation), documented in docs/guides/long-conversations.md."""
_REQUEST = re.compile(r"\b(?:can|could|would|will)\s+you\b|\bplease\b", re.IGNORECASE)
"""A request said to the listener: English's polite forms of asking someone to act."""
_STANDING = re.compile(
    r"\b(?:always|never|every|whenever|from now on|going forward|from here on|each time|"
    r"any ?time|for the rest of)\b",
    re.IGNORECASE,
)
"""Words that make an act a standing one: it holds on every later occasion, not once."""
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z0-9\"'(\[`])")


def fold(word: str) -> str:
    """A lower-case word with a plural's ending folded, by Harman's S-stemmer ("How effective
    is suffixing?", JASIS 1991), the mildest stemmer used in retrieval: "-ies" to "-y"
    ("hobbies", "hobby"), else the final "s" off ("dogs", "names", "shoes"), but not from
    "-us" or "-ss" ("status", "glass"). Words of three letters or fewer are left as they are
    ("was", "has", "its"). The rule is English's, and that of the "-s" plural of French,
    Spanish, Portuguese or Dutch; in another language it can only tie two words that differ
    by a final "s", and a script without Latin letters is left as it is."""
    if word[-1:] != "s" or len(word) <= 3 or word.endswith(("us", "ss")):
        return word
    if word.endswith("ies") and not word.endswith(("eies", "aies")):
        return word[:-3] + "y"
    return word[:-1]


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
        for m in IDENT_TOKEN.finditer(text)
        if not any(start <= m.start() and m.end() <= end for start, end in digits)
    ]
    runs = [m.span() for m in _NAME_RUN.finditer(text)]
    found += [text[start:end] for start, end in runs]
    found += [  # a lone name (Tallinn, or MongoDB starting a sentence), not in a run found
        m.group(0)
        for m in _LONE_NAME.finditer(text)
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


@functools.lru_cache(maxsize=4096)
def term_weight(span: str) -> int:
    """How much a key term identifies on its own: a code mixing letters and digits 3, an
    identifier, a name or a number of three digits or more 2, anything else 1."""
    letters = any(c.isalpha() for c in span)
    digits = sum(c.isdigit() for c in span)
    if letters and digits:
        return 3
    return 2 if letters or digits >= 3 else 1


def fact_signal(sentence: str) -> int:
    """How surely a sentence bears a fact, from 0 to 5 (a question counts 1 less).

    A digit 3, a code identifier 2, a date word 2, a decision or preference word 2, and
    capitalised words inside the sentence 1 each (at most 2).
    """
    signal = 3 if DIGIT_TOKEN.search(sentence) else 0
    signal += 2 if IDENT_TOKEN.search(sentence) else 0
    signal += 2 if _DATE_WORD.search(sentence) else 0
    signal += 2 if DECISION.search(sentence) else 0
    signal += min(2, len(_LONE_NAME.findall(sentence)))
    return min(signal, 5) - (1 if sentence.rstrip().endswith("?") else 0)


def takes_decision(text: str) -> bool:
    """Whether a text takes a decision, states a standing rule or records a change made (a
    `DECISION` word)."""
    return bool(DECISION.search(text))


def sets_standing_rule(sentence: str) -> bool:
    """Whether a sentence asks for something to hold from now on: a request ("could you",
    "please") with a word of every later occasion ("every", "always", "from now on").
    Said as a question it is still a directive, not a question of fact."""
    return bool(_REQUEST.search(sentence) and _STANDING.search(sentence))


def sentences(text: str) -> list[str]:
    """Split text into lines, then sentences, skipping code fences' marker lines."""
    out: list[str] = []
    for line in text.splitlines():
        line = line.strip().lstrip("-*• ").strip()
        if line and not line.startswith("```"):
            out.extend(s.strip() for s in _SENTENCE_END.split(line) if s.strip())
    return out
