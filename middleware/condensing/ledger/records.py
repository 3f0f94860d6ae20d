"""The ledger's record: one quoted fact, who said it, where from and how it was chosen.

A `Fact` is what the ledger keeps of one fact-bearing sentence (or of a file's settings, or of
an earlier note line, or of the facts no room was left for: the merged line). Its `role` says
who said it and what kind of line it is (``user``, ``assistant``, ``tool(read_file)``, ``tool
listing``, ``tool settings``, ``notes``, ``notes listing``, ``merged(N facts)``); ``kind`` names
the kind alone. The extraction stores the records it rendered (kernel/records.py's
``StoredFact``), and the next growth reads them back as records: the rendering is only text
for the prompt.

The base ranks of the kinds of lines are here too: every stage ranks by them.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from kernel.records import StoredFact
from middleware.condensing.ledger.terms import takes_decision

__all__ = [
    "CONFIRMATION_SCORE",
    "DECIDED",
    "FOCUS_BONUS",
    "LEFT_OUT",
    "LISTING",
    "LISTING_SCORE",
    "MERGED",
    "MERGED_ROLE",
    "MIN_ASSISTANT_SIGNAL",
    "NOTES",
    "NOTES_SCORE",
    "REGAINED_SETTING_SCORE",
    "SETTINGS",
    "SETTING_SCORE",
    "TOOL_BONUS",
    "USER_BONUS",
    "Fact",
    "from_stored",
    "is_carried_note",
    "merged_fact",
    "settles",
    "to_stored",
]

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
NOTES = "notes"
"""The role of an earlier note line carried into the ledger."""
MERGED = "merged"
"""The kind of the one line accounting for the facts not quoted."""
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
CONFIRMATION_SCORE = MIN_ASSISTANT_SIGNAL
"""A confirmation of a line taking no decision adds no fact: it ranks with the assistant's
explanations and carried notes, below every line stating a value or an action (an edit's call
line, at signal 4 and longer, would go first on a tie); `FOCUS_BONUS` higher when its line is
about the question, never above its line."""
MERGED_ROLE = "merged({} facts)"
LEFT_OUT = "[… {} more key terms left out: no room]"
DECIDED = "decided"
"""The role of a decision's line rendered after its confirmation (``Fact.render``)."""


@dataclass(frozen=True, slots=True)
class Fact:
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
    source: str = ""
    """What the tool call that returned it read (``read_file config/app.toml``), for a tool's
    line whose call the ledger saw."""
    index: int = -1
    """The index in the request of the message it came from (its place among the messages
    quoted when the caller gave no index; -1: none, a carried note or a merged line)."""
    supersedes: str = ""
    """The user's earlier statement this one corrects (``supersede.settled``)."""
    rule: str = ""
    """How it was chosen: ``said`` (a sentence's signal), ``message`` (a user's short message
    whole), ``listing``, ``settings``, ``notes``, ``regained``, ``merged``; ``template``
    (a repeated shape) or ``echo`` (only repeats stated values) when demoted for it."""
    terms: tuple[str, ...] = ()
    """A merged line's key terms, as listed."""
    count: int = 1
    """How many facts it stands for: 1, or a merged line's N."""
    left_out: int = 0
    """A merged line's key terms left out for want of room."""

    @property
    def kind(self) -> str:
        """What kind of line it is: ``user``, ``assistant``, ``tool``, ``notes``,
        ``listing``, ``settings`` or ``merged``."""
        if self.rule == MERGED:
            return MERGED
        for suffix in (LISTING, SETTINGS):
            if self.role.endswith(suffix):
                return suffix
        return self.role.split("(")[0].split(" ")[0]

    @property
    def merged(self) -> bool:
        """Whether it is the merged line (the facts not quoted, counted)."""
        return self.rule == MERGED

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


def merged_fact(count: int, terms: tuple[str, ...], left_out: int = 0, score: int = 1) -> Fact:
    """The merged line standing for `count` facts, listing `terms` and counting the
    `left_out` ones."""
    body = " ".join(f"`{term}`" for term in terms)
    if left_out:
        body = f"{body} {LEFT_OUT.format(left_out)}".strip()
    return Fact(
        MERGED_ROLE.format(count),
        body or "(no key terms)",
        score,
        rule=MERGED,
        terms=terms,
        count=count,
        left_out=left_out,
    )


def settles(fact: Fact) -> bool:
    """Whether a line takes a decision (a ``DECISION`` word: "we go with X; Y is out", "that
    step is done: ... the next step is Z"), so its confirmation says which of the line's values
    holds, the chosen one, not the rejected option or the finished step beside it. Such a
    confirmation goes with its line, one unit: quoted alone, the line names both values and a
    small model answers the rejected one as often as not, and a confirmation ranked apart was
    pushed out at some growth for good while its line stayed."""
    return takes_decision(fact.text)


def is_carried_note(fact: Fact) -> bool:
    """Whether a ledger line is an earlier note line carried into it (``notes``, or ``notes
    listing`` for a copied row): the model's words, which no message of the history holds."""
    return fact.role in (NOTES, f"{NOTES} {LISTING}")


def to_stored(fact: Fact) -> StoredFact:
    """The record as the store keeps it with its extraction."""
    return StoredFact(**asdict(fact))


def from_stored(stored: StoredFact) -> Fact:
    """The record a stored extraction kept."""
    return Fact(**{name: getattr(stored, name) for name in StoredFact.model_fields})
