"""LoCoMo: long conversations nobody here wrote, as conversations `overspill eval` can play.

LoCoMo (Maharana et al., "Evaluating Very Long-Term Conversational Memory of LLM Agents",
ACL 2024; CC BY-NC 4.0, so it is read from a path and never committed) holds ten dialogues
between two people over 19 to 32 sessions (300 to 700 turns, 11k to 23k tokens each), with
human-annotated questions and the turns that answer them. Both of its layouts are read:
`locomo10.json` (a list of samples, each with a `sample_id`, a `conversation` and its `qa`)
and the per-dialogue files of `data/multimodal_dialog/locomo10_v2/` (one object per
dialogue, named by its number: `41.json` is `conv-41`).

A dialogue becomes a chat: the first speaker's turns are the user's, the second's the
assistant's, each turn's text prefixed with who said it and the first turn of a session with
its date ("[8:30 pm on 1 January, 2023] John: ..."), as LoCoMo's own evaluation shows the
model the sessions; a shared photo is its caption (", and shared a photo of ..."), as there.

Question categories, as LoCoMo's evaluation numbers them: 1 multi-hop, 2 temporal, 3
open-domain (world knowledge beyond the dialogue), 4 single-hop, 5 adversarial (no answer in
the dialogue). The kinds asked by default are single-hop and multi-hop with short answers
(at most `SHORT_ANSWER_WORDS` words) and, reported apart, temporal ones: their answers are
dates the annotators resolved from "yesterday" and "last week", so a date found nowhere in the
dialogue can still be answered right.

Scoring is word-based, as LoCoMo's own (token F1 against the annotated answer): an answer's
*content words* are its words less a short list of function words and lone letters (the "s"
of "it's"), lower-cased, with a plural's or possessive's "s" taken off. The annotated answer
is *present* in what the model was shown when every one of its content words is there, and a
reply is *right* when it holds every one of them too ("kickboxing, taekwondo" needs both).
Pure: no model, no network.
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Literal, get_args

from evaluation.datasets import json_files
from kernel.types import Message

LocomoKind = Literal["single_hop", "multi_hop", "temporal", "open_domain", "adversarial"]
LOCOMO_KINDS: tuple[LocomoKind, ...] = get_args(LocomoKind)
CATEGORIES: Mapping[int, LocomoKind] = {
    1: "multi_hop", 2: "temporal", 3: "open_domain", 4: "single_hop", 5: "adversarial",
}  # fmt: skip
"""LoCoMo's category numbers, as its evaluation code reads them."""
DEFAULT_KINDS: tuple[LocomoKind, ...] = ("single_hop", "multi_hop", "temporal")
DEFAULT_DIALOGUES = tuple(f"conv-{n}" for n in (41, 42, 43, 44, 47, 48, 49, 50))
"""The eight dialogues the compaction is developed and reported on (conv-26 and conv-30, the
two others, were the first outside measurement: kept apart)."""
SHORT_ANSWER_WORDS = 5
"""Longer annotated answers are sentences a word-based score cannot judge: not asked."""
SOURCE = "locomo"
"""The seed set LoCoMo's rows are reported under."""
QUESTION_SUFFIX = " Answer with a short phrase, using the words of the conversation."

_WORD = re.compile(r"[a-z0-9]+")
_TURN_ID = re.compile(r"D(\d+):(\d+)")
"""A turn's id in `evidence`, read as numbers (a few annotations list two in one string,
"D8:6; D9:17", or write a turn "D30:05")."""
_SENTENCE = re.compile(r"(?<=[.!?])\s+")
_FUNCTION_WORDS = (
    "a an the and or of to in on at for with by from as is are was were be been being it its "
    "this that these those he she they them his her their him i me my we our you your "
    "do does did has have had not no yes so but if than then there here about into over "
    "also just very some any all both"
)
FUNCTION_WORDS = frozenset(_FUNCTION_WORDS.split())
"""Words that carry no fact: left out of an answer's content words."""


def content_words(text: str) -> frozenset[str]:
    """The words of `text` that carry its content, normalised (`_stem`)."""
    found = _WORD.findall(text.lower())
    return frozenset(
        _stem(w) for w in found if w not in FUNCTION_WORDS and (len(w) > 1 or w.isdigit())
    )


def _stem(word: str) -> str:
    """A word without a plural's or a possessive's final "s" ("shelters" → "shelter")."""
    if len(word) > 3 and word.endswith("s") and not word.endswith("ss"):
        return word[:-1]
    return word


@dataclass(frozen=True, slots=True)
class Question:
    """One annotated question about a dialogue: asked as a probe, scored by its words."""

    kind: LocomoKind
    question: str
    answer: str
    evidence: tuple[str, ...] = ()
    """The dialogue turns (``D3:15``: session 3, turn 15) that hold the answer."""
    said: tuple[str, ...] = ()
    """Those turns' texts, as their messages hold them (without a session's date); empty
    when one of them is not in the dialogue."""

    @property
    def prompt(self) -> str:
        """The user message that asks it."""
        return self.question + QUESTION_SUFFIX

    def score(self, answer: str) -> bool:
        """Right when the reply holds every content word of the annotated answer."""
        return _holds(content_words(answer), self.answer)

    def present(self, text: str) -> bool:
        """Whether a context holds every content word of the annotated answer."""
        return _holds(content_words(text), self.answer)

    def evidence_in(self, text: str) -> bool | None:
        """Whether a context holds every turn the annotators marked as answering it, whole
        (each of its sentences, so a turn quoted in parts counts): LoCoMo's own recall of the
        evidence. Stricter than `present` where an answer's words are common (a temporal
        answer's date is in the stamp of every turn that day, an answer's name in many
        turns). None when no evidence is known."""
        if not self.said:
            return None
        return all(part in text for turn in self.said for part in _SENTENCE.split(turn))

    def answers(self, said: str) -> bool:
        """Whether one message (its text) is a turn that answers it: one of its evidence
        turns or, where none is known, a turn holding every content word of the answer."""
        if self.said:
            return any(turn in said for turn in self.said)
        return self.present(said)


def _holds(words: frozenset[str], answer: str) -> bool:
    wanted = content_words(answer)
    return bool(wanted) and wanted <= words


@dataclass(frozen=True, slots=True)
class Dialogue:
    """One LoCoMo dialogue as a chat, with its questions."""

    name: str
    """``conv-41``."""
    number: int
    messages: tuple[Message, ...]
    questions: tuple[Question, ...]


def load(path: Path) -> list[Dialogue]:
    """Every dialogue at `path`: `locomo10.json`, a per-dialogue file, or a folder of those.
    Raises ValueError naming the file and what is wrong with it."""
    found: list[Dialogue] = []
    for file, data in json_files(path, "LoCoMo", order=lambda p: (len(p.stem), p.stem)):
        if isinstance(data, list):
            found += [_sample(item, f"{file}[{i}]") for i, item in enumerate(data)]
        elif isinstance(data, dict) and "speaker_a" in data:
            name = f"conv-{file.stem}" if file.stem.isdigit() else file.stem
            found.append(dialogue_of(name, data, data.get("qa"), str(file)))
        else:
            raise ValueError(f"{file}: neither locomo10.json (a list) nor one LoCoMo dialogue")
    return found


def _sample(item: Any, where: str) -> Dialogue:
    if not isinstance(item, dict) or not isinstance(item.get("conversation"), dict):
        raise ValueError(f"{where}: a sample needs a conversation object")
    name = str(item.get("sample_id") or where)
    return dialogue_of(name, item["conversation"], item.get("qa"), where)


def dialogue_of(name: str, conversation: Mapping[str, Any], qa: Any, where: str) -> Dialogue:
    """A dialogue from LoCoMo's conversation object (speakers, sessions, their dates), each
    of its questions once: an annotation listed again (the same question, category, answer
    and evidence) would be asked, and counted, twice."""
    speakers = (conversation.get("speaker_a"), conversation.get("speaker_b"))
    if not all(isinstance(s, str) and s for s in speakers):
        raise ValueError(f"{where}: speaker_a and speaker_b must name the two speakers")
    messages: list[Message] = [
        {
            "role": "system",
            "content": f"A conversation between {speakers[0]} and {speakers[1]}, over "
            "several sessions; each message says who wrote it.",
        }
    ]
    by_id: dict[str, str] = {}
    for number in _session_numbers(conversation):
        turns = conversation.get(f"session_{number}")
        if not isinstance(turns, list):
            raise ValueError(f"{where}: session_{number} is not a list of turns")
        date = conversation.get(f"session_{number}_date_time")
        for index, turn in enumerate(turns):
            text = _turn_text(turn, f"{where}: session_{number}[{index}]")
            for session, at in _TURN_ID.findall(str(turn.get("dia_id", ""))):
                by_id[f"D{int(session)}:{int(at)}"] = text
            if index == 0 and isinstance(date, str):
                text = f"[{date}] {text}"
            role = "user" if turn.get("speaker") == speakers[0] else "assistant"
            messages.append({"role": role, "content": text})
    number = int(m.group()) if (m := re.search(r"\d+", name)) else 0
    questions = tuple(
        _with_turns(q, by_id) for q in dict.fromkeys(_questions(qa, where))
    )  # conv-48 lists six twice
    return Dialogue(name, number, tuple(messages), questions)


def _with_turns(question: Question, by_id: Mapping[str, str]) -> Question:
    """`question` with the texts of its evidence turns (none when one is missing)."""
    said = tuple(by_id.get(turn, "") for turn in question.evidence)
    return replace(question, said=said if all(said) else ())


def _session_numbers(conversation: Mapping[str, Any]) -> list[int]:
    found = (re.fullmatch(r"session_(\d+)", key) for key in conversation)
    return sorted(int(m.group(1)) for m in found if m)


def _turn_text(turn: Any, where: str) -> str:
    if not isinstance(turn, dict) or not isinstance(turn.get("text"), str):
        raise ValueError(f"{where}: a turn needs a speaker and a text")
    text = f"{turn.get('speaker', '?')}: {turn['text']}"
    caption = turn.get("blip_caption")
    return f"{text} [and shared {caption}]" if isinstance(caption, str) and caption else text


def _questions(qa: Any, where: str) -> Iterable[Question]:
    if qa is None:
        return
    if not isinstance(qa, list):
        raise ValueError(f"{where}: qa must be a list of questions")
    for index, item in enumerate(qa):
        if not isinstance(item, dict):
            raise ValueError(f"{where}: qa[{index}] is not a question object")
        kind = CATEGORIES.get(item.get("category", 0))
        answer = item.get("answer")
        if kind is None or not isinstance(item.get("question"), str):
            raise ValueError(f"{where}: qa[{index}] needs a question and a category 1-5")
        if answer is None:  # the adversarial questions: no answer in the dialogue
            continue
        evidence = [
            f"D{int(session)}:{int(turn)}"
            for given in item.get("evidence") or ()
            for session, turn in _TURN_ID.findall(str(given))
        ]
        yield Question(kind, item["question"], str(answer), tuple(evidence))


def asked(dialogue: Dialogue, kinds: Sequence[str]) -> tuple[Question, ...]:
    """The questions of `kinds` with short answers, in the dialogue's order."""
    return tuple(
        q
        for q in dialogue.questions
        if q.kind in kinds and 0 < len(_WORD.findall(q.answer.lower())) <= SHORT_ANSWER_WORDS
    )


def chosen(dialogues: Sequence[Dialogue], names: Sequence[str]) -> list[Dialogue]:
    """The dialogues named (``conv-41``), in `names`' order; ValueError for an unknown."""
    known = {d.name: d for d in dialogues}
    missing = [name for name in names if name not in known]
    if missing:
        raise ValueError(
            f"--dialogues: {', '.join(missing)} not in the file (it has {', '.join(known)})"
        )
    return [known[name] for name in names]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """`--locomo PATH` and `--dialogues`, as `overspill eval` and the ledger bench read them."""
    parser.add_argument(
        "--locomo", metavar="PATH",
        help="use LoCoMo's dialogues instead of generated ones: its locomo10.json, or a "
        "folder of its per-dialogue files (evaluation/locomo.py)",
    )  # fmt: skip
    parser.add_argument(
        "--dialogues", default=",".join(DEFAULT_DIALOGUES),
        help="with --locomo: which dialogues (default: the eight developed on)",
    )  # fmt: skip
