"""The extraction prompts (versioned) and the pure text helpers around them.

An extraction is two sections: the model's structured notes, and a fact ledger of
fact-bearing sentences quoted verbatim from the conversation (numbers, codes, dates, names,
identifiers, decisions, preferences). The ledger is built deterministically, without a model,
so a small model that paraphrases, loops or forgets cannot lose a planted fact; incremental
extractions parse the previous ledger back and carry it forward. Under budget pressure ledger
lines go in this order: lines whose key tokens the notes or other lines already hold, then
the lowest-ranked (the assistant's before the user's and tools'), then the longest.

The model's answers are checked here too: repeated lines and in-line loops are cut, lines
echoing the prompt's own wording dropped, and note lines naming a number the source never had
or made mostly of words it never used (a small model's elaboration) removed. ``cut_tail`` and
``cut_middle`` cut texts to a token budget with a visible marker.

``PROMPT_VERSION`` is part of a cached extraction's validity: bump it whenever a prompt, the
transcript rendering, the ledger's rules or the extraction's layout changes.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import tiktoken

from proxy.tokens import count_text, encoding_for
from proxy.types import Message

__all__ = [
    "FACTS_HEADER",
    "NOTES_HEADER",
    "PROMPT_VERSION",
    "FactLine",
    "assemble",
    "clean_output",
    "condense_prompt",
    "cut_middle",
    "cut_tail",
    "dedupe_facts",
    "drop_unsupported",
    "fact_lines",
    "key_tokens",
    "looks_refused",
    "map_prompt",
    "merge_prompt",
    "parse_extraction",
    "render_transcript",
    "select_facts",
]

PROMPT_VERSION = "x2"
NOTES_HEADER = "Notes:"
FACTS_HEADER = "Quoted facts (verbatim from earlier turns):"
MIN_ASSISTANT_SIGNAL = 3
FIRST_HAND_BONUS = 5
MAX_LINE_CHARS = 300
_LAYOUT_TOKENS = 24
MAX_SELECT_EXACT = 300
MIN_GROUNDED = 0.5  # share of a note line's words the source must contain
_LOOP_NGRAM = 8

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

_DIGIT_TOKEN = re.compile(r"[A-Za-z0-9_][\w.\-/:@]*\d[\w.\-/:@]*|\d[\w.\-/:@]*")
_IDENT_TOKEN = re.compile(
    r"`[^`\n]{1,80}`|\b[A-Za-z]\w*_\w+\b|\b[a-z]+[A-Z]\w*\b|\b\w+\.\w+\(\)|\b[\w.+-]+@[\w-]+\.\w+"
)
_NAME_RUN = re.compile(r"(?<![.!?:]\s)(?<!^)\b[A-Z][a-z]+(?:\s+[A-Z][a-z]+)+")
_CAPITAL = re.compile(r"(?<!^)(?<![.!?]\s)\b[A-Z][a-z]{2,}\b")
_DATE_WORD = re.compile(
    r"\b(?:jan|feb|mar|apr|may|jun|jul|aug|sep|sept|oct|nov|dec)[a-z]*\b|"
    r"\b(?:mon|tues|wednes|thurs|fri|satur|sun)day\b|\b(?:tomorrow|yesterday|tonight)\b",
    re.IGNORECASE,
)
_DECISION = re.compile(
    r"\b(?:decided|decision|agreed|chose|chosen|prefer\w*|always|never|must|don'?t|do not|"
    r"deadline|remember|my name|call me|we(?:'ll| will) use|switch(?:ed)? to|todo|"
    r"next step|open task|password|budget|code is|id is|called)\b",
    re.IGNORECASE,
)
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z0-9\"'(\[`])")
_REFUSAL = re.compile(
    r"^\W*(?:i'?m sorry|i am sorry|sorry,|i apologi[sz]e|i cannot|i can'?t|i'?m unable|"
    r"i am unable|i'?m not able|i am not able|as an ai|as a language model|unfortunately,? i|"
    r"error\b|\{\s*\"error\")",
    re.IGNORECASE,
)
_HEADING = re.compile(r"^\s*#*\s*(?:\**[A-Z][\w ]{0,30}:\**\s*)+$")
_FACT_LINE = re.compile(r"^- ([\w()\-. ]{1,40}): (.*)$")


@dataclass(frozen=True, slots=True)
class FactLine:
    """One fact-bearing sentence quoted verbatim, with who said it and how fact-dense it is."""

    role: str
    text: str
    score: int

    def render(self) -> str:
        """The ledger line: ``- role: text``."""
        return f"- {self.role}: {self.text}"


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


def key_tokens(text: str) -> frozenset[str]:
    """The tokens a fact hangs on: anything with a digit, code identifiers, name runs."""
    found = {m.group(0).strip(".,:;-/").lower() for m in _DIGIT_TOKEN.finditer(text)}
    found |= {m.group(0).strip("`").lower() for m in _IDENT_TOKEN.finditer(text)}
    found |= {m.group(0).lower() for m in _NAME_RUN.finditer(text)}
    return frozenset(t for t in found if t)


def fact_signal(sentence: str) -> int:
    """How surely a sentence bears a fact, from 0 to 5 (a question counts 1 less).

    A digit 3, a code identifier 2, a date word 2, a decision or preference word 2, and
    capitalised words inside the sentence 1 each (at most 2).
    """
    signal = 3 if _DIGIT_TOKEN.search(sentence) else 0
    signal += 2 if _IDENT_TOKEN.search(sentence) else 0
    signal += 2 if _DATE_WORD.search(sentence) else 0
    signal += 2 if _DECISION.search(sentence) else 0
    signal += min(2, len(_CAPITAL.findall(sentence)))
    return min(signal, 5) - (1 if sentence.rstrip().endswith("?") else 0)


def fact_score(sentence: str, role: str, focus_words: frozenset[str] = frozenset()) -> int:
    """A ledger line's priority, or 0 when the sentence is no fact.

    The user's and tools' sentences count from signal 1 and rank above the assistant's
    (signal 3 or more; what the assistant said is mostly reconstructible); a sentence
    sharing a word with the focus ranks 2 higher.
    """
    signal = fact_signal(sentence)
    first_hand = role.split("(")[0] in ("user", "tool")
    if signal < (1 if first_hand else MIN_ASSISTANT_SIGNAL):
        return 0
    focused = bool(focus_words and focus_words & _words(sentence))
    return signal + (FIRST_HAND_BONUS if first_hand else 0) + (2 if focused else 0)


def _words(text: str) -> frozenset[str]:
    """Lower-cased content words of four letters or more."""
    return frozenset(w.lower() for w in re.findall(r"[A-Za-z]{4,}", text))


def _clip(sentence: str) -> str:
    """A sentence cut to a window around its first key token when it is over-long."""
    if len(sentence) <= MAX_LINE_CHARS:
        return sentence
    hit = _DIGIT_TOKEN.search(sentence) or _IDENT_TOKEN.search(sentence)
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


def fact_lines(messages: Sequence[Message], focus: str | None = None) -> list[FactLine]:
    """The fact ledger: every fact-bearing sentence of the messages, verbatim, in order."""
    focus_words = _words(focus) if focus else frozenset()
    found: list[FactLine] = []
    for message in messages:
        role = speaker(message)
        for sentence in sentences(content_text(message)):
            score = fact_score(sentence, role, focus_words)
            if score > 0:
                found.append(FactLine(role, _clip(sentence), score))
    return dedupe_facts(found)


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
    """Split an earlier extraction into its notes and its ledger facts (re-scored)."""
    notes, _, facts_part = text.partition(FACTS_HEADER)
    notes = notes.strip()
    notes = notes.removeprefix(NOTES_HEADER).strip()
    focus_words = _words(focus) if focus else frozenset()
    facts: list[FactLine] = []
    for line in facts_part.splitlines():
        match = _FACT_LINE.match(line.strip())
        if match:
            role, body = match.group(1), match.group(2)
            score = fact_score(body, role, focus_words)
            facts.append(FactLine(role, body, max(score, 1)))
    return notes, facts


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
    """A model's notes without repeated lines, in-line loops, header echo or a cut last line."""
    lines = text.strip().removeprefix(NOTES_HEADER).splitlines()
    if truncated and len(lines) > 1:
        lines = lines[:-1]
    seen: set[str] = set()
    kept: list[str] = []
    for raw in lines:
        line = _cut_loop(raw.rstrip())
        norm = " ".join(line.lower().split())
        if norm and (norm in seen or _is_echo(norm)):
            continue
        seen.add(norm)
        kept.append(line)
    return drop_empty_headings("\n".join(kept)).strip()


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


def drop_unsupported(notes: str, source: str) -> str:
    """The notes without invented lines: a number or identifier the source never mentions,
    or mostly words the source never uses (a small model's elaboration)."""
    haystack = source.lower()
    source_words = _words(source)
    kept = []
    for line in notes.splitlines():
        tokens = {m.group(0).strip(".,:;-/").lower() for m in _DIGIT_TOKEN.finditer(line)}
        words = _words(line)
        share = len(words & source_words) / len(words) if words else 1.0
        grounded = share >= MIN_GROUNDED or bool(_HEADING.match(line))
        if grounded and all(t in haystack for t in tokens if len(t) > 1):
            kept.append(line)
    return drop_empty_headings("\n".join(kept)).strip()


def drop_empty_headings(notes: str) -> str:
    """The notes without heading lines (``Name:``) that head no content."""
    lines = [line for line in notes.splitlines() if line.strip()]
    kept = [
        line
        for i, line in enumerate(lines)
        if not _HEADING.match(line) or (i + 1 < len(lines) and not _HEADING.match(lines[i + 1]))
    ]
    return "\n".join(kept)


def _decode(encoding: tiktoken.Encoding, tokens: Sequence[int]) -> str:
    """Decode tokens, dropping a character split at either end."""
    return encoding.decode_bytes(list(tokens)).decode("utf-8", errors="ignore")


def cut_tail(text: str, max_tokens: int, model: str = "") -> str:
    """The text's head within max_tokens, ending with a ``[… N tokens cut …]`` marker."""
    encoding = encoding_for(model)
    tokens = encoding.encode_ordinary(text)
    if len(tokens) <= max_tokens:
        return text
    keep = max_tokens - 12
    while keep > 0:
        out = f"{_decode(encoding, tokens[:keep]).rstrip()}\n[… {len(tokens) - keep} tokens cut …]"
        over = count_text(out, model) - max_tokens
        if over <= 0:
            return out
        keep -= over
    return _head(encoding, tokens, max_tokens, model)


def _head(encoding: tiktoken.Encoding, tokens: Sequence[int], max_tokens: int, model: str) -> str:
    """The longest decoded token prefix that counts at most max_tokens (no room for a marker)."""
    keep = max(0, max_tokens)
    while keep > 0:
        out = _decode(encoding, tokens[:keep])
        over = count_text(out, model) - max_tokens
        if over <= 0:
            return out
        keep -= over
    return ""


def cut_middle(text: str, max_tokens: int, model: str = "") -> str:
    """Keep the text's head and tail within max_tokens, marking ``[… N tokens omitted …]``."""
    encoding = encoding_for(model)
    tokens = encoding.encode_ordinary(text)
    if len(tokens) <= max_tokens:
        return text
    keep = max_tokens - 14
    while keep > 0:
        head_n, tail_n = (keep + 1) // 2, keep // 2
        head = _decode(encoding, tokens[:head_n])
        tail = _decode(encoding, tokens[len(tokens) - tail_n :]) if tail_n else ""
        omitted = len(tokens) - head_n - tail_n
        out = f"{head}\n[… {omitted} tokens omitted …]\n{tail}"
        over = count_text(out, model) - max_tokens
        if over <= 0:
            return out
        keep -= over
    return _head(encoding, tokens, max_tokens, model)


def select_facts(
    facts: Sequence[FactLine], notes: str, budget: int, model: str = ""
) -> list[FactLine]:
    """The facts that fit the budget, in order; drops covered, then low-score, then long ones.

    A fact is covered when each of its key tokens appears in the notes or in another kept
    fact. Among equals the longer line goes first (it frees the most room for one fact lost),
    then the later one (earlier facts have survived more passes: keep the cache stable).
    """
    facts = _candidates(facts, budget, model)
    costs = [count_text(fact.render(), model) + 1 for fact in facts]
    keys = [key_tokens(fact.text) for fact in facts]
    note_keys = key_tokens(notes)
    held: Counter[str] = Counter(k for ks in keys for k in ks)
    keep = set(range(len(facts)))
    total = sum(costs)
    while total > budget and keep:

        def rank(i: int) -> tuple[bool, int, int, int]:
            covered = bool(keys[i]) and all(k in note_keys or held[k] > 1 for k in keys[i])
            return (not covered, facts[i].score, -costs[i], -i)

        victim = min(keep, key=rank)
        keep.remove(victim)
        held.subtract(keys[victim])
        total -= costs[victim]
    return [facts[i] for i in sorted(keep)]


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


def _layout(notes: str, facts: Sequence[FactLine]) -> str:
    """The extraction text: the notes section, then the quoted facts section."""
    sections = [f"{NOTES_HEADER}\n{notes}"] if notes else []
    if facts:
        sections.append(FACTS_HEADER + "\n" + "\n".join(fact.render() for fact in facts))
    return "\n\n".join(sections)


def assemble(notes: str, facts: Sequence[FactLine], target_tokens: int, model: str = "") -> str:
    """Notes and as many facts as fit, within target_tokens (cut with a marker if need be)."""
    room = target_tokens - count_text(_layout(notes, ()), model) - _LAYOUT_TOKENS // 2
    while True:
        chosen = select_facts(facts, notes, room, model) if room > 0 else []
        text = _layout(notes, chosen)
        over = count_text(text, model) - target_tokens
        if over <= 0 or not chosen:
            return cut_tail(text, target_tokens, model)
        room -= over
