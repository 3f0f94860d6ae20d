"""The fact ledger: fact-bearing sentences quoted verbatim from the conversation, as records.

An extraction is two sections: the model's structured notes, and a fact ledger of
fact-bearing sentences quoted verbatim from the conversation (numbers, codes, dates, names,
identifiers, decisions, preferences). The ledger is built deterministically, without a model,
so a small model that paraphrases, loops or forgets cannot lose a planted fact. Its facts are
records (``records.Fact``: who said it, the message it came from, what it supersedes, how it
was chosen), rendered as text only when the prompt is built and stored with the extraction,
so a growth reads the records the previous one kept, never its text.

A growth quotes anew every message the previous extraction stands in for, when the request
holds them (the splice's case), and ranks the whole ledger for the room it has now; without
them it carries the previous records forward (``carry``). The stages, in order, and the one
entry point that runs them: ``stages.Ledger``. Each stage's module says its rules:

- ``terms``: a fact's key terms and a sentence's signal;
- ``select``: the messages' fact-bearing sentences, a listing's rows and settings, an
  action's request, a user's line's confirmation;
- ``structured``: a tool's JSON answer read as settings and a listing's rows;
- ``carry``: the previous records read back for a growth;
- ``notes``: the model's notes judged against the ledger, and the note lines they lost;
- ``supersede``: the statements a later one corrected, the lines that only echo;
- ``rank``: what a budget keeps;
- ``fit``: the budget, and the merged line that counts what has no room;
- ``render``: the text.

The ledger's rules and the extraction's layout are part of a cached extraction's validity:
bump ``prompt.PROMPT_VERSION`` whenever they change.
"""

from middleware.condensing.ledger.fit import notes_room
from middleware.condensing.ledger.records import Fact
from middleware.condensing.ledger.render import FACTS_HEADER, Rendered
from middleware.condensing.ledger.stages import Ledger, Previous

__all__ = ["FACTS_HEADER", "Fact", "Ledger", "Previous", "Rendered", "notes_room"]
