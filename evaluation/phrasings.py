"""The words each planted episode is said in: tune templates and held-out templates. Pure data.

A *template* is one phrasing of the turns of an episode that carry its fact (the statement
and the reply to it, the request and the tool call with its result, the correction, the
decision between two options, the next-step agreement), as format strings filled with the
episode's values (``{value}``, ``{old}``, ``{chosen}`` …; a field's capitalised form,
``{Bug}``, starts a sentence with it). Turns alternate, the user's first.

Each kind's templates are split in two sets:

    tune      the phrasings the ledger's rules were written against: the generator's
              sentences as they were before held-out templates existed, byte for byte, so
              every figure measured on them stays comparable
    held-out  phrasings no rule was written against (other verbs and word orders, the
              value first or mid-sentence, a question, a list, another tool's call or
              result layout), only measured: a rule that holds for them holds for language,
              not for our sentences

A conversation draws every episode's template from one set (``generate(templates=…)``);
the values drawn do not depend on the set, so the same seed under either set is the same
conversation said otherwise.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Generic, Literal, TypeVar

TemplateSet = Literal["tune", "held-out"]
TEMPLATE_SETS: tuple[TemplateSet, ...] = ("tune", "held-out")
ALL = "all"
"""The `--templates` choice that plays each seed once per template set."""


def template_sets(choice: str) -> tuple[TemplateSet, ...]:
    """The sets a `--templates` choice plays (``all``: each, tune first); ValueError for
    an unknown choice."""
    if choice == ALL:
        return TEMPLATE_SETS
    for name in TEMPLATE_SETS:
        if choice == name:
            return (name,)
    known = ", ".join([*TEMPLATE_SETS, ALL])
    raise ValueError(f"--templates: unknown {choice!r} (known: {known})")


T = TypeVar("T", covariant=True)
Turns = tuple[str, ...]
"""An episode's turns as format strings, alternating, the user's first."""


@dataclass(frozen=True, slots=True)
class Phrasings(Generic[T]):
    """One episode's templates: those tuned against, and the held-out ones."""

    tune: tuple[T, ...]
    held_out: tuple[T, ...]

    def of(self, which: TemplateSet) -> tuple[T, ...]:
        """The templates of one set."""
        return self.tune if which == "tune" else self.held_out


@dataclass(frozen=True, slots=True)
class ToolRead:
    """A tool fact's episode: the user's ask, the call that reads the file (its arguments as
    format strings), the file's layout, and the assistant's reply (which names no value)."""

    ask: str
    tool: str
    arguments: tuple[tuple[str, str], ...]
    layout: Literal["toml", "yaml", "json", "env"]
    reply: str


@dataclass(frozen=True, slots=True)
class Edit:
    """An identifier's episode: the user's request, the edit call (its arguments as format
    strings), the tool's result and the assistant's reply."""

    request: str
    tool: str
    arguments: tuple[tuple[str, str], ...]
    result: str
    reply: str


def template_label(subject: str, which: TemplateSet, index: int) -> str:
    """How a probe names the template it was planted with: ``staging host held-out 2``."""
    return " ".join(part for part in (subject, which, str(index)) if part)


def fill(template: str, **fields: str) -> str:
    """The template with its fields, each also as ``{Field}``: capitalised first letter."""
    capitals = {name.capitalize(): value[:1].upper() + value[1:] for name, value in fields.items()}
    return template.format(**fields, **capitals)


INSTRUCTION: Phrasings[Turns] = Phrasings(
    tune=(
        (
            "One rule for this whole session: end every answer with the tag [{tag}], so I "
            "can find your replies in my notes later.",
            "Understood. I will end every answer with the tag [{tag}].",
        ),
    ),
    held_out=(
        (
            "Please put [{tag}] at the very end of each reply you send me from now on; I "
            "search my notes for it.",
            "Will do: [{tag}] goes at the end of each reply.",
        ),
        (
            "Could you sign off every answer in this session with [{tag}]? That's how I file them.",
            "Sure, each of my answers will close with [{tag}].",
        ),
        (
            "Housekeeping before we start:\n- keep answers short\n- the last thing in every "
            "answer is the tag [{tag}]",
            "OK: short answers, each one ending in [{tag}].",
        ),
    ),
)

NOTED = "Noted, I will keep that in mind."
USER_FACTS: dict[str, Phrasings[Turns]] = {
    "project code": Phrasings(
        tune=(("For the record, our internal project code is {value}.", NOTED),),
        held_out=(
            (
                "{value} is the internal project code we file everything under, by the way.",
                "Thanks, I'll remember that.",
            ),
            (
                "Do you have our internal project code? If not, it's {value}; the finance "
                "forms ask for it.",
                "I didn't, thanks. Got it now.",
            ),
            (
                "Some context you may need:\n- internal project code: {value}\n- team: "
                "platform\n- repository: the monorepo",
                "Got it, thanks for the context.",
            ),
        ),
    ),
    "staging host": Phrasings(
        tune=(("The staging host is {value}; every deploy goes there first.", NOTED),),
        held_out=(
            ("Every deploy lands on {value} first, that's our staging box.", "OK, good to know."),
            (
                "If you need to poke at staging, ssh into {value} and have a look around.",
                "Understood, I'll use that host for anything on staging.",
            ),
            (
                "Where does staging live? On {value}, behind the VPN.",
                "Thanks, that's useful.",
            ),
        ),
    ),
    "customer number": Phrasings(
        tune=(("Our customer number with the hosting vendor is {value}.", NOTED),),
        held_out=(
            (
                "When you open a ticket with the hosting vendor, quote {value} as our customer "
                "number.",
                "Will do.",
            ),
            (
                "The hosting vendor knows us as customer {value}, in case their support asks.",
                "Good to know, thanks.",
            ),
            (
                "Hosting vendor details, in case support asks:\n- customer number: {value}\n"
                "- plan: business",
                "Noted.",
            ),
        ),
    ),
    "database": Phrasings(
        tune=(("The main database is called {value}, in case you need it for queries.", NOTED),),
        held_out=(
            ("Queries go against {value}; that's the main database.", "OK."),
            (
                "You'll want {value} for any query you write: it's our main database and the "
                "others are replicas.",
                "Understood, I'll point queries at it.",
            ),
            (
                "Which database? The main one, {value}. Everything else is a read replica.",
                "Thanks, that clears it up.",
            ),
        ),
    ),
}
"""Per subject (in the generator's order), the user's statement of the value and the reply."""

ASSISTANT_FACTS: dict[str, Phrasings[Turns]] = {
    "port": Phrasings(
        tune=(
            (
                "Pick a free port for the mock payment server, anything above twenty thousand.",
                "I'll use port {value} for the mock payment server; nothing else uses it.",
            ),
        ),
        held_out=(
            (
                "The mock payment server needs a port. Anything above twenty thousand that's free?",
                "{value} is free on this machine, so the mock payment server can listen there.",
            ),
            (
                "Can you choose a port above twenty thousand for the mock payment server?",
                "How about {value}? Nothing else binds to it.",
                "Fine by me.",
                "Good, the mock payment server is configured to listen on it.",
            ),
            (
                "Set up the mock payment server on some free port above twenty thousand, "
                "whatever you like.",
                "Done. The mock payment server now runs with:\n- host: localhost\n- port: "
                "{value}\n- TLS: off",
            ),
        ),
    ),
    "email": Phrasings(
        tune=(
            (
                "Make up an email address for the QA test account.",
                "Use {value}; the example.test domain can never receive real mail.",
            ),
        ),
        held_out=(
            (
                "The QA test account needs an email address. Can you invent one?",
                "Sure: {value}. Mail to example.test goes nowhere, so nobody real gets it.",
            ),
            (
                "What email should the QA test account have? Make one up.",
                "I'd register the QA test account as {value}, since example.test is reserved "
                "and never delivers mail.",
            ),
            (
                "Invent an email for the QA test account, please.",
                "Here is one that can't reach a real inbox: {value}",
            ),
        ),
    ),
    "bucket": Phrasings(
        tune=(
            (
                "Suggest a name for the new storage bucket for the nightly backups.",
                "I suggest {value}: it follows your naming scheme and is unlikely to be taken.",
            ),
        ),
        held_out=(
            (
                "We need a name for the nightly backups' storage bucket. Ideas?",
                "{value} would fit your naming scheme, and nobody is likely to have taken it.",
            ),
            (
                "What should we call the new storage bucket for the nightly backups?",
                "Call it {value}. It matches your other buckets and should be free.",
            ),
            (
                "Name the storage bucket for the nightly backups, please.",
                "How about {value}? It follows the scheme of your other buckets.",
                "Sounds fine.",
                "Good, I'll create the bucket under that name once you give the go-ahead.",
            ),
        ),
    ),
}
"""Per subject, the user's ask and the assistant's pick (the value is in no user's turn)."""

TOOL_FACT: Phrasings[ToolRead] = Phrasings(
    tune=(
        ToolRead(
            "Can you check {path} before we touch the importer?",
            "read_file", (("path", "{path}"),), "toml",
            "I read {path}: the file is well formed and nothing looks out of place.",
        ),
    ),
    held_out=(
        ToolRead(
            "Before we change the importer, have a look at {path}.",
            "run_command", (("command", "cat {path}"),), "yaml",
            "Looked through it: the settings seem sane and nothing needs changing.",
        ),
        ToolRead(
            "What's in {path}? I want to be sure before we touch the importer.",
            "read_file", (("path", "{path}"),), "json",
            "That's the whole file. Nothing in it looks wrong to me.",
        ),
        ToolRead(
            "Open {path}, please; the importer reads it.",
            "read_file", (("path", "{path}"),), "env",
            "The file parses fine and every setting has a value.",
        ),
    ),
)  # fmt: skip
"""The user's ask, the read (the file's layout, and so its extension), the reply."""

CORRECTED_FACTS: dict[str, Phrasings[Turns]] = {
    "gateway port": Phrasings(
        tune=(
            (
                "The API gateway listens on port {old}.",
                "Noted.",
                "Correction: the API gateway listens on port {new}, not {old}. I misread the "
                "chart.",
                "Thanks, I have updated that.",
            ),
        ),
        held_out=(
            (
                "FYI the API gateway is on port {old}.",
                "OK.",
                "Sorry, I had that wrong: port {new} is where the API gateway listens.",
                "No problem, updated.",
            ),
            (
                "Port {old} is what the API gateway listens on.",
                "Got it.",
                "Scratch that, the API gateway moved to port {new} last week; {old} is the "
                "old one.",
                "Thanks, noted the new port.",
            ),
            (
                "What port is the API gateway on? {old}, if I remember right.",
                "OK, {old} then.",
                "I checked the deployment: the API gateway listens on {new}, not on {old}.",
                "Thanks for checking.",
            ),
        ),
    ),
    "on-call": Phrasings(
        tune=(
            (
                "The on-call engineer this week is {old}.",
                "Noted.",
                "Update: {old} swapped shifts, so the on-call engineer this week is now {new}.",
                "Thanks, I have updated that.",
            ),
        ),
        held_out=(
            (
                "{old} is on call this week if anything breaks.",
                "Good to know.",
                "Change of plan: {new} took over the on-call week from {old}.",
                "OK, {new} is the one to page then.",
            ),
            (
                "This week's on-call engineer? That's {old}.",
                "Thanks.",
                "{new} is on call this week after all; {old} is off sick.",
                "Noted, thanks.",
            ),
            (
                "On-call rota for this week:\n- primary: {old}\n- escalation: the team lead",
                "Noted.",
                "The rota changed: the primary on call this week is {new} now.",
                "Thanks, updated.",
            ),
        ),
    ),
    "upload size": Phrasings(
        tune=(
            (
                "The maximum upload size is {old} MB.",
                "Noted.",
                "Correction: the maximum upload size is {new} MB, not {old} MB.",
                "Thanks, I have updated that.",
            ),
        ),
        held_out=(
            (
                "Uploads are capped at {old} MB.",
                "OK.",
                "I was wrong about the cap: uploads can be up to {new} MB.",
                "Got it, updated.",
            ),
            (
                "We allow files of up to {old} MB per upload.",
                "Noted.",
                "Ops raised the limit, so it's {new} MB per upload now.",
                "Thanks, I'll use the new limit.",
            ),
            (
                "How big can an upload be? {old} MB at most.",
                "OK.",
                "Forget the {old} MB I told you; the maximum upload size is {new} MB.",
                "Thanks, updated.",
            ),
        ),
    ),
}
"""Per subject, the first statement and its reply, then (placed later) the correction and
its reply."""

DECISION: Phrasings[Turns] = Phrasings(
    tune=(
        (
            "For {purpose}, should we use {first} or {second}?",
            "Both would work. {first} is simpler to run and well documented; {second} gives "
            "more headroom but costs more to operate. For a team of your size either is "
            "defensible, so pick the one your operations people know best.",
            "Decision: we go with {chosen} for {purpose}; {rejected} is out.",
            "Agreed, {chosen} it is for {purpose}.",
        ),
    ),
    held_out=(
        (
            "I'm torn between {first} and {second} for {purpose}. Thoughts?",
            "{first} is easier to operate and has better docs. {second} scales further but "
            "needs more care. Either can carry your load.",
            "Let's use {chosen} for {purpose} and drop {rejected}.",
            "Sounds good: I'll set up {purpose} on {chosen}.",
        ),
        (
            "We need a {kind} for {purpose}. The candidates are {first} and {second}.",
            "Both are solid. {second} has the bigger ecosystem; {first} is lighter and quicker "
            "to set up. I would not worry much about either choice.",
            "OK, {rejected} is off the table. {chosen} for {purpose}.",
            "Understood, {chosen} for {purpose} then.",
        ),
        (
            "Which {kind} would you use for {purpose}: {first} or {second}?",
            "It depends on who runs it. {first} needs less tuning, {second} handles more "
            "traffic out of the box. Your team could live with either.",
            "{chosen}, final answer. We can look at {rejected} again next year if we outgrow it.",
            "Great, I'll wire {purpose} to {chosen}.",
        ),
    ),
)
"""The question between two options, the assistant's comparison, the user's choice and the
reply."""

PATCH = (
    "*** Begin Patch\n*** Update File: {path}\n@@\n-    total = round(total)\n"
    "+    total = quantize(total)\n*** End Patch"
)
IDENTIFIER: Phrasings[Edit] = Phrasings(
    tune=(
        Edit(
            "Please fix {bug}.",
            "edit_file",
            (("path", "{path}"), ("old", "total = round(total)"),
             ("new", "total = quantize(total)")),
            "Edited {path}: three lines changed.",
            "Done: the fix is in and the related tests pass.",
        ),
    ),
    held_out=(
        Edit(
            "Can you take care of {bug}? It keeps coming up in support.",
            "apply_patch",
            (("patch", PATCH),),
            "Success. Updated the following files:\nM {path}",
            "Fixed, and the tests are green again.",
        ),
        Edit(
            "{Bug} is next on the list; go ahead and fix it.",
            "str_replace_editor",
            (("command", "str_replace"), ("path", "{path}"),
             ("old_str", "total = round(total)"), ("new_str", "total = quantize(total)")),
            "The file {path} has been edited.",
            "That should do it; the related tests pass now.",
        ),
        Edit(
            "I'd like {bug} gone before the release. Could you fix it?",
            "replace_in_file",
            (("file", "{path}"), ("find", "total = round(total)"),
             ("replace", "total = quantize(total)")),
            "ok",
            "All set: the change is in and nothing else broke.",
        ),
    ),
)  # fmt: skip
"""The request, the edit call touching the file, its result, the assistant's reply."""

NEXT_STEP: Phrasings[Turns] = Phrasings(
    tune=(
        (
            "Let's pause that thread. When we come back to it, the next step is to {first}.",
            "Noted: next we {first}.",
            "That step is done: we did {first_key}. The next step now is to {then}.",
            "Noted: the open next step is to {then}.",
        ),
    ),
    held_out=(
        (
            "Let's park this for now. First thing when we pick it up again: {first}.",
            "OK, I'll remember that we have to {first}.",
            "Done with {first_key}. What's left is to {then}.",
            "Right, so we still have to {then}.",
        ),
        (
            "We'll stop here. Could you remind me later that we still have to {first}?",
            "Sure, I'll remind you that we have to {first}.",
            "Good news, {first_key} went through fine. After that, we should {then}.",
            "OK, so the plan is to {then}.",
        ),
        (
            "Let's stop here for today. Open items for next time:\n- {first}",
            "Noted, that's the one open item.",
            "Status:\n- done: {first_key}\n- open: {then}",
            "Thanks, so what's open now is to {then}.",
        ),
    ),
)
"""The step agreed and its reply, then (placed later) the step done, the new one agreed,
and the reply."""

Template = Turns | ToolRead | Edit
"""Any kind's template."""
BY_KIND: Mapping[str, Mapping[str, Phrasings[Template]]] = {
    "user_fact": USER_FACTS,
    "assistant_fact": ASSISTANT_FACTS,
    "tool_fact": {"": TOOL_FACT},
    "corrected_fact": CORRECTED_FACTS,
    "decision": {"": DECISION},
    "identifier": {"": IDENTIFIER},
    "next_step": {"": NEXT_STEP},
    "instruction": {"": INSTRUCTION},
}
"""Every probe kind's templates by subject ("" for a kind planted without subjects)."""
