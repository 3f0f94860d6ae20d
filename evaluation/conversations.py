"""Seeded conversations that plant every kind of probe. Pure: the same seed, the same bytes.

A conversation is a coding-assistant session: a system message, an instruction given in the
first turn that must hold to the end, then filler episodes (questions and answers, test runs
and code searches whose tool results are long) with the planted episodes among them:

    user_fact       the user states a value
    assistant_fact  the assistant picks a value (it appears in no user or tool message)
    tool_fact       a value only a tool result holds (a config file the assistant read)
    corrected_fact  the user states a value, later corrects it (the old one is stale)
    decision        two options discussed, one chosen (the other is stale)
    identifier      the file an assistant's edit call touched
    next_step       a next step agreed, done later, and a new one agreed (the first is stale)
    instruction     "end every answer with the tag [X]", checked on an unrelated question

Every value a probe asks about is drawn fresh for the conversation (never used twice), every
number in it is at least 101 and every incidental number in fillers is below 100, so a value
found in an answer can only come from the episode that planted it.

Seeds at or above `HELD_OUT_FROM` form the held-out set: prompts and the ledger may be tuned
on the others, never on these, and reports list the two sets apart.

Independently of the seed, a conversation is said in one *template set* (phrasings.py): the
tune templates, the sentences the ledger's rules were written against (the default: the
same bytes as before held-out templates existed), the held-out templates, phrasings no
rule was written against, or the blind templates, written without reading the rules. The
templates are drawn from a random stream of their own, so a seed's values, fillers and
positions are the same in every set: only the words differ.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Generic, Literal, TypeVar

from evaluation.phrasings import (
    ASSISTANT_FACTS,
    CORRECTED_FACTS,
    DECISION,
    IDENTIFIER,
    INSTRUCTION,
    NEXT_STEP,
    TOOL_FACT,
    USER_FACTS,
    Phrasings,
    TemplateSet,
    Turns,
    fill,
    template_label,
)
from evaluation.probes import PROBE_KINDS, Asked, Probe
from kernel.types import Message

SeedSet = Literal["tune", "held-out"]
HELD_OUT_FROM = 1000
"""Seeds from here on are held out: never used to tune a prompt or the ledger."""
DEFAULT_FILLERS = 24
SYSTEM_PROMPT = "You are a coding assistant working with a developer on their services."


def seed_set(seed: int) -> SeedSet:
    """Which set a seed belongs to."""
    return "held-out" if seed >= HELD_OUT_FROM else "tune"


Q = TypeVar("Q", bound=Asked, covariant=True)
P = TypeVar("P")


@dataclass(frozen=True, slots=True)
class Conversation(Generic[Q]):
    """A generated conversation and the probes to ask after it."""

    seed: int
    messages: tuple[Message, ...]
    probes: tuple[Q, ...]
    source: str | None = None
    """Where a conversation nobody here wrote comes from (``locomo``); None: generated."""
    templates: TemplateSet = "tune"
    """The set its episodes' phrasings were drawn from (evaluation/phrasings.py)."""

    @property
    def seed_set(self) -> str:
        """tune or held-out for a generated conversation, else its source."""
        return self.source or seed_set(self.seed)

    def request_points(self) -> list[int]:
        """The prefix lengths a client sends as requests: each prefix whose next message is
        the assistant's (after a user message, after a tool call's results)."""
        return [
            index
            for index in range(1, len(self.messages))
            if self.messages[index].get("role") == "assistant"
        ]


ANIMALS = (
    "kestrel", "otter", "heron", "lynx", "marten", "osprey", "badger", "ibis", "puffin",
    "gecko", "walrus", "bison", "condor", "tapir", "egret", "jackal", "narwhal", "ocelot",
)  # fmt: skip
NOUNS = (
    "ledger", "invoice", "payload", "cursor", "ticket", "voucher", "parcel", "quota",
    "session", "report", "channel", "bucket", "anchor", "harbor", "signal", "lantern",
)  # fmt: skip
VERBS = ("add", "drop", "rename", "index", "split", "merge", "backfill")
FIRST_NAMES = ("Ingrid", "Tomasz", "Amara", "Kenji", "Lucia", "Oskar", "Priya", "Mateo")
LAST_NAMES = (
    "Halvorsen", "Wierzbicki", "Okonkwo", "Takahashi", "Ferreira", "Lindqvist", "Raghavan",
    "Castellano", "Dubois", "Novak", "Abernathy", "Kowalczyk",
)  # fmt: skip
INSTRUCTION_TASKS = (
    "In one sentence, what does a linter do?",
    "In one sentence, why do we write unit tests?",
    "In one sentence, what is a database index for?",
    "In one sentence, what is a pull request?",
)
CHAT_FILLERS = (
    (
        "Can you explain what a list comprehension is?",
        "A list comprehension builds a list from an iterable in one expression, such as the "
        "squares of the numbers in a range. You can add a condition at the end to filter "
        "items. They are usually easier to read than a loop that appends to a list, but very "
        "long ones with nested loops are better written as ordinary loops.",
    ),
    (
        "What's the difference between a process and a thread?",
        "A process has its own memory space, while threads inside one process share memory. "
        "Creating a process is heavier, but a crash in one process does not take down the "
        "others. Threads are cheaper and communicate through shared data, which is why they "
        "need locks or queues to avoid race conditions.",
    ),
    (
        "How do I write a good commit message?",
        "Start with a short summary line in the imperative mood, like 'Fix crash when the "
        "config file is empty'. Leave a blank line, then explain what changed and why. Keep "
        "each commit focused on one logical change so the history stays easy to review and "
        "to revert.",
    ),
    (
        "What does an HTTP 404 mean?",
        "It means Not Found: the server understood the request but has no resource at that "
        "address. It differs from Forbidden, where the resource exists but you may not access "
        "it, and from Gone, which says it was removed on purpose. For APIs, answering Not "
        "Found for an unknown id is the usual convention.",
    ),
    (
        "How can I make the unit tests run faster?",
        "Avoid real network calls and sleeps by using fakes and injected clocks. Share "
        "expensive setup through fixtures with a wider scope when it is safe, run the tests "
        "in parallel, and profile the slowest ones: often a handful of tests account for most "
        "of the time.",
    ),
    (
        "What is a race condition?",
        "A race condition happens when the result depends on the timing of events that run "
        "concurrently, such as two threads updating the same counter: each reads the old "
        "value, adds one and writes it back, so one update is lost. Make the operation "
        "atomic, with a lock or by giving each piece of data a single owner.",
    ),
    (
        "How should I deal with a flaky test?",
        "First reproduce it by running the test many times in a loop, in isolation and with "
        "the same random seed. Common causes are shared state between tests, timing "
        "assumptions and dependence on test order. Quarantine it if it blocks others, but fix "
        "the root cause rather than adding retries.",
    ),
    (
        "What's a good way to name variables?",
        "Name things for what they mean in the problem, not for their type: unpaid invoices "
        "says more than a generic list name. Short names are fine for tiny scopes like loop "
        "indices. Use verbs for functions and nouns for values, and stay consistent with the "
        "names the codebase already uses.",
    ),
    (
        "Why would I use a context manager?",
        "A context manager pairs setup with cleanup, so a file is closed or a lock released "
        "even when an exception escapes the block. It keeps the happy path readable and makes "
        "the cleanup impossible to forget. You can write one as a class or with a generator "
        "and the contextlib helpers.",
    ),
    (
        "When is caching a bad idea?",
        "When the data changes more often than it is read, when a stale answer is worse than "
        "a slow one, or when you cannot say when an entry becomes invalid. A cache also adds "
        "a second source of truth and memory pressure, so measure first and cache the few "
        "hot paths that matter.",
    ),
)


@dataclass(slots=True)
class _Builder:
    """The state of one generation: its random source, the values used, the tool call ids,
    and the template set its phrasings come from (drawn from a stream of their own, so the
    values do not depend on the set)."""

    rng: random.Random
    phrasing: random.Random
    templates: TemplateSet = "tune"
    used: set[str] = field(default_factory=set)
    calls: int = 0

    def fresh(self, make: Callable[[], str]) -> str:
        """A value never drawn before in this conversation."""
        while True:
            value = make()
            if value.lower() not in self.used:
                self.used.add(value.lower())
                return value

    def number(self, low: int = 101, high: int = 9999) -> str:
        """A fresh number in [low, high] (probe values are never below 101)."""
        return self.fresh(lambda: str(self.rng.randint(low, high)))

    def word(self, pool: tuple[str, ...]) -> str:
        """A fresh word of the pool (joined with a small number when the pool runs dry)."""
        return self.fresh(lambda: self.rng.choice(pool))

    def say(self, phrasings: Phrasings[P], subject: str = "") -> tuple[P, str]:
        """A template of the conversation's set, and its label (``template_label``)."""
        options = phrasings.of(self.templates)
        index = self.phrasing.randrange(len(options))
        return options[index], template_label(subject, self.templates, index)

    def call(self, name: str, arguments: dict[str, Any], result: str) -> list[Message]:
        """An assistant tool call and its result."""
        self.calls += 1
        call_id = f"call_{self.calls:03d}"
        function = {"name": name, "arguments": json.dumps(arguments)}
        return [
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [{"id": call_id, "type": "function", "function": function}],
            },
            {"role": "tool", "tool_call_id": call_id, "content": result},
        ]


def _user(text: str) -> Message:
    return {"role": "user", "content": text}


def _assistant(text: str) -> Message:
    return {"role": "assistant", "content": text}


def _turns(template: Turns, **fields: str) -> list[Message]:
    """A template's turns filled with `fields`, the user's first, then alternating."""
    return [
        (_user if index % 2 == 0 else _assistant)(fill(text, **fields))
        for index, text in enumerate(template)
    ]


Episode = tuple[list[Message], Probe | None]


def _instruction(b: _Builder) -> tuple[list[Message], Probe]:
    tag = b.fresh(lambda: f"{b.rng.choice(ANIMALS).upper()}-{b.rng.randint(101, 999)}")
    template, label = b.say(INSTRUCTION)
    messages = _turns(template, tag=tag)
    task = b.rng.choice(INSTRUCTION_TASKS)
    return messages, Probe("instruction", task, (tag,), template=label)


def _user_fact(b: _Builder) -> Episode:
    choice = b.rng.randrange(4)
    if choice == 0:
        value = b.fresh(lambda: f"PRJ-{b.rng.randint(1001, 9999)}")
        question = "What is our internal project code?"
    elif choice == 1:
        value = f"{b.word(ANIMALS)}-{b.number(101, 999)}.staging.internal"
        question = "What is the host name of the staging server?"
    elif choice == 2:
        value = b.fresh(lambda: f"CUST-{b.rng.randint(10001, 99999)}")
        question = "What is our customer number with the hosting vendor?"
    else:
        value = f"{b.word(ANIMALS)}_{b.word(NOUNS)}"
        question = "What is the main database called?"
    subject = list(USER_FACTS)[choice]
    template, label = b.say(USER_FACTS[subject], subject)
    return _turns(template, value=value), Probe("user_fact", question, (value,), template=label)


def _assistant_fact(b: _Builder) -> Episode:
    choice = b.rng.randrange(3)
    if choice == 0:
        value = b.number(20001, 29999)
        question = "Which port did you pick for the mock payment server?"
    elif choice == 1:
        value = b.fresh(lambda: f"qa.{b.rng.choice(ANIMALS)}{b.rng.randint(101, 999)}@example.test")
        question = "Which email address did you make up for the QA test account?"
    else:
        value = f"backups-{b.word(ANIMALS)}-{b.number(1001, 9999)}"
        question = "Which name did you suggest for the nightly backups' storage bucket?"
    subject = list(ASSISTANT_FACTS)[choice]
    template, label = b.say(ASSISTANT_FACTS[subject], subject)
    probe = Probe("assistant_fact", question, (value,), template=label)
    return _turns(template, value=value), probe


CONFIG_KEYS = (
    "max_connections", "retry_limit", "cache_ttl_seconds", "pool_size", "shard_count",
    "batch_window_ms", "queue_depth", "flush_interval_ms", "read_timeout_ms", "max_payload_kb",
)  # fmt: skip


def _settings_file(path: str, layout: str, settings: list[tuple[str, str]]) -> str:
    """A config file holding `settings` in one of the layouts a service's config is kept in."""
    if layout == "toml":
        lines = [f"{key} = {value}" for key, value in settings]
        return f"# {path}\n[service]\n" + "\n".join(lines) + "\n"
    if layout == "yaml":
        lines = [f"  {key}: {value}" for key, value in settings]
        return f"# {path}\nservice:\n" + "\n".join(lines) + "\n"
    if layout == "json":
        body = {"service": {key: int(value) for key, value in settings}}
        return json.dumps(body, indent=2) + "\n"
    if layout in LAID_OUT:
        return LAID_OUT[layout](path, settings)
    lines = [f"SERVICE_{key.upper()}={value}" for key, value in settings]
    return f"# {path}\n" + "\n".join(lines) + "\n"


def _ini(path: str, settings: list[tuple[str, str]]) -> str:
    lines = [f"{key}={value}" for key, value in settings]
    return f"; {path}\n[DEFAULT]\nlog_level = info\n\n[service]\n" + "\n".join(lines) + "\n"


def _xml(path: str, settings: list[tuple[str, str]]) -> str:
    lines = [f'    <setting name="{key}" value="{value}"/>' for key, value in settings]
    return (
        f'<?xml version="1.0" encoding="utf-8"?>\n<!-- {path} -->\n<config>\n'
        '  <service name="importer">\n' + "\n".join(lines) + "\n  </service>\n</config>\n"
    )


def _python(path: str, settings: list[tuple[str, str]]) -> str:
    lines = [f"{key.upper()} = {value}" for key, value in settings]
    return f'"""The importer\'s settings ({path})."""\n\n' + "\n".join(lines) + "\n"


def _compose(path: str, settings: list[tuple[str, str]]) -> str:
    lines = [f'      {key.upper()}: "{value}"' for key, value in settings]
    head = "services:\n  importer:\n    image: registry.local/importer:latest\n"
    return f"# {path}\n{head}    environment:\n" + "\n".join(lines) + "\n"


def _table(path: str, settings: list[tuple[str, str]]) -> str:
    """The settings as a CLI prints them: a boxed table, a row per key."""
    width = max(len(key) for key, _ in settings)
    rule = f"+-{'-' * width}-+-------+--------+"
    rows = [f"| {key:<{width}} | {value:<5} | file   |" for key, value in settings]
    head = f"| {'key':<{width}} | value | source |"
    return "\n".join([f"loaded {path}", rule, head, rule, *rows, rule]) + "\n"


LAID_OUT: dict[str, Callable[[str, list[tuple[str, str]]], str]] = {
    "ini": _ini, "xml": _xml, "py": _python, "compose": _compose, "table": _table,
}  # fmt: skip
"""The blind templates' layouts (evaluation/phrasings.py): the file, or the CLI's table of it."""
EXTENSIONS = {"compose": "yml", "table": "conf"}
"""A file's extension where it is not its layout's name."""


def _tool_fact(b: _Builder) -> Episode:
    word = b.word(NOUNS)
    keys = list(CONFIG_KEYS)
    b.rng.shuffle(keys)
    settings = [(key, b.number()) for key in keys]
    target = b.rng.randrange(len(keys))
    value = settings[target][1]
    read, label = b.say(TOOL_FACT)
    path = f"config/{word}.{EXTENSIONS.get(read.layout, read.layout)}"
    arguments = {name: fill(text, path=path) for name, text in read.arguments}
    messages = [
        _user(fill(read.ask, path=path)),
        *b.call(read.tool, arguments, _settings_file(path, read.layout, settings)),
        _assistant(fill(read.reply, path=path)),
    ]
    question = f"According to {path}, what is {keys[target]} set to?"
    return messages, Probe("tool_fact", question, (value,), template=label)


def _corrected_fact(b: _Builder) -> tuple[Episode, list[Message]]:
    """The first statement (with the probe) and the correction, placed later."""
    choice = b.rng.randrange(3)
    if choice == 0:
        old, new = b.number(1001, 9999), b.number(1001, 9999)
        question, accept, stale = "Which port does the API gateway listen on?", (new,), (old,)
    elif choice == 1:
        old_last, new_last = b.word(LAST_NAMES), b.word(LAST_NAMES)
        old = f"{b.rng.choice(FIRST_NAMES)} {old_last}"
        new = f"{b.rng.choice(FIRST_NAMES)} {new_last}"
        question, accept, stale = "Who is the on-call engineer this week?", (new_last,), (old_last,)
    else:
        old, new = b.number(101, 999), b.number(101, 999)
        question = "What is the maximum upload size, in MB?"
        accept, stale = (new,), (old,)
    subject = list(CORRECTED_FACTS)[choice]
    template, label = b.say(CORRECTED_FACTS[subject], subject)
    turns = _turns(template, old=old, new=new)
    probe = Probe("corrected_fact", question, accept, stale, template=label)
    return (turns[:2], probe), turns[2:]


DECISIONS = (
    ("message broker", "the order events", ("RabbitMQ", "Kafka", "NATS")),
    ("HTTP client library", "the billing service", ("httpx", "aiohttp", "urllib3")),
    ("database", "the audit log", ("PostgreSQL", "MongoDB", "Cassandra")),
    ("CI system", "the mobile app", ("Buildkite", "Jenkins", "CircleCI")),
    ("serialisation format", "the event payloads", ("Protobuf", "Avro", "MessagePack")),
)


def _decision(b: _Builder) -> Episode:
    kind, purpose, options = b.rng.choice(DECISIONS)
    chosen, rejected = b.rng.sample(options, 2)
    first, second = sorted((chosen, rejected), key=lambda _: b.rng.random())
    template, label = b.say(DECISION)
    messages = _turns(
        template, kind=kind, purpose=purpose, first=first, second=second,
        chosen=chosen, rejected=rejected,
    )  # fmt: skip
    question = f"Which {kind} did we decide to use for {purpose}?"
    return messages, Probe("decision", question, (chosen,), (rejected,), template=label)


BUGS = (
    ("the rounding bug in the invoice totals", "billing"),
    ("the time zone bug in the report scheduler", "reports"),
    ("the off-by-one error in the pagination", "api"),
    ("the race in the session cache", "auth"),
)


def _identifier(b: _Builder) -> Episode:
    bug, package = b.rng.choice(BUGS)
    name = b.fresh(lambda: f"{b.rng.choice(NOUNS)}_{b.rng.choice(ANIMALS)}")
    path = f"src/{package}/{name}.py"
    edit, label = b.say(IDENTIFIER)
    arguments = {key: fill(text, path=path) for key, text in edit.arguments}
    messages = [
        _user(fill(edit.request, bug=bug)),
        *b.call(edit.tool, arguments, fill(edit.result, path=path)),
        _assistant(fill(edit.reply, path=path)),
    ]
    question = f"Which file did you edit to fix {bug}?"
    return messages, Probe("identifier", question, (path, f"{name}.py"), template=label)


def _step(b: _Builder) -> tuple[str, str]:
    """A next step's text and the identifier that names it."""
    choice = b.rng.randrange(3)
    if choice == 0:
        key = f"{b.number(1001, 9999)}_{b.rng.choice(VERBS)}_{b.word(NOUNS)}_index"
        return f"run the migration {key} on staging", key
    if choice == 1:
        key = f"test_{b.word(NOUNS)}_{b.word(ANIMALS)}"
        return f"bisect the failing test {key}", key
    key = f"{b.word(ANIMALS)}-gateway-{b.number(101, 999)}"
    return f"rotate the API key of {key}", key


def _next_step(b: _Builder) -> tuple[Episode, list[Message]]:
    """The first step agreed, then (later, with the probe) done and replaced by a new one."""
    first, first_key = _step(b)
    then, then_key = _step(b)
    template, label = b.say(NEXT_STEP)
    turns = _turns(template, first=first, first_key=first_key, then=then)
    question = "What is the open next step we agreed on?"
    probe = Probe("next_step", question, (then_key,), (first_key,), template=label)
    return (turns[2:], probe), turns[:2]


def _chat_filler(b: _Builder) -> list[Message]:
    asked, answered = b.rng.choice(CHAT_FILLERS)
    return [_user(asked), _assistant(answered)]


def _tests_filler(b: _Builder) -> list[Message]:
    module = b.rng.choice(NOUNS)
    names = [
        f"test_{b.rng.choice(NOUNS)}_{b.rng.choice(VERBS)}" for _ in range(b.rng.randint(14, 22))
    ]
    lines = [f"tests/test_{module}.py::{name} PASSED" for name in names]
    log = "\n".join(
        [f"collected {len(lines)} items", *lines, f"{len(lines)} passed in {b.rng.randint(2, 9)}s"]
    )
    return [
        _user(f"Run the tests for the {module} module, please."),
        *b.call("run_command", {"command": f"pytest tests/test_{module}.py -v"}, log),
        _assistant(f"All {len(lines)} tests of the {module} module pass."),
    ]


def _search_filler(b: _Builder) -> list[Message]:
    word = b.rng.choice(NOUNS)
    hits = [
        f"src/{b.rng.choice(NOUNS)}/{b.rng.choice(NOUNS)}.py:{b.rng.randint(3, 99)}:    "
        f"{word}_{b.rng.choice(VERBS)}(self, {b.rng.choice(NOUNS)})"
        for _ in range(b.rng.randint(8, 14))
    ]
    return [
        _user(f"Where do we call anything named after {word}?"),
        *b.call("search_code", {"pattern": word}, "\n".join(hits)),
        _assistant(f"There are {len(hits)} call sites, spread over several packages."),
    ]


FILLERS = (_chat_filler, _chat_filler, _tests_filler, _search_filler)


def generate(
    seed: int, *, fillers: int = DEFAULT_FILLERS, templates: TemplateSet = "tune"
) -> Conversation[Probe]:
    """The conversation of `seed`: the same seed, size and template set give the same
    messages and probes; another template set says the same values in other words."""
    rng = random.Random(f"overspill-eval:{seed}")
    b = _Builder(rng, random.Random(f"overspill-eval-phrasing:{seed}"), templates)
    instruction, instruction_probe = _instruction(b)
    placed: list[tuple[float, list[Message]]] = [
        ((i + 0.5) / fillers, rng.choice(FILLERS)(b)) for i in range(fillers)
    ]
    probes: list[Probe] = []

    def place(low: float, high: float, episode: Episode) -> float:
        at = rng.uniform(low, high)
        placed.append((at, episode[0]))
        if episode[1] is not None:
            probes.append(episode[1])
        return at

    for make in (_user_fact, _assistant_fact, _tool_fact, _decision, _identifier):
        place(0.0, 0.85, make(b))
    corrected, correction = _corrected_fact(b)
    stated = place(0.0, 0.4, corrected)
    place(stated + 0.15, 0.85, (correction, None))
    replaced, agreed = _next_step(b)
    first = place(0.35, 0.6, (agreed, None))
    place(first + 0.15, 0.85, replaced)
    placed.sort(key=lambda item: item[0])
    messages: list[Message] = [{"role": "system", "content": SYSTEM_PROMPT}, *instruction]
    for _, episode in placed:
        messages += episode
    probes.append(instruction_probe)
    probes.sort(key=lambda probe: PROBE_KINDS.index(probe.kind))
    return Conversation(seed, tuple(messages), tuple(probes), templates=templates)
