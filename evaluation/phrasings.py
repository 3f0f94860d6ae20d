"""The words each planted episode is said in: tune, held-out and blind templates. Pure data.

A *template* is one phrasing of the turns of an episode that carry its fact (the statement
and the reply to it, the request and the tool call with its result, the correction, the
decision between two options, the next-step agreement), as format strings filled with the
episode's values (``{value}``, ``{old}``, ``{chosen}`` …; a field's capitalised form,
``{Bug}``, starts a sentence with it). Turns alternate, the user's first.

Each kind's templates are split in three sets:

    tune      the phrasings the ledger's rules were written against: the generator's
              sentences as they were before held-out templates existed, byte for byte, so
              every figure measured on them stays comparable
    held-out  phrasings no rule was written against (other verbs and word orders, the
              value first or mid-sentence, a question, a list, another tool's call or
              result layout), only measured: a rule that holds for them holds for language,
              not for our sentences (since read to diagnose rules, so no longer clean)
    blind     phrasings written by someone who had not read the ledger's rules (chat in
              every register, other config layouts and edit tools), measured once and
              never used to tune a rule: the check held-out can no longer be

A conversation draws every episode's template from one set (``generate(templates=…)``);
the values drawn do not depend on the set, so the same seed under any set is the same
conversation said otherwise.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Generic, Literal, TypeVar, get_args

TemplateSet = Literal["tune", "held-out", "blind"]
TEMPLATE_SETS: tuple[TemplateSet, ...] = get_args(TemplateSet)
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
    """One episode's templates: those tuned against, the held-out ones, the blind ones."""

    tune: tuple[T, ...]
    held_out: tuple[T, ...]
    blind: tuple[T, ...]

    def of(self, which: TemplateSet) -> tuple[T, ...]:
        """The templates of one set."""
        if which == "tune":
            return self.tune
        return self.held_out if which == "held-out" else self.blind


@dataclass(frozen=True, slots=True)
class ToolRead:
    """A tool fact's episode: the user's ask, the call that reads the file (its arguments as
    format strings), the file's layout, and the assistant's reply (which names no value)."""

    ask: str
    tool: str
    arguments: tuple[tuple[str, str], ...]
    layout: Literal["toml", "yaml", "json", "env", "ini", "xml", "py", "compose", "table"]
    """How the file is laid out (``compose``: a docker-compose service's environment block;
    ``table``: the file as a CLI prints it, a boxed table)."""
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
    blind=(
        (
            "btw can you tag every reply with [{tag}] at the end? makes grepping my chat log "
            "way easier",
            "Sure thing. Every reply from here on ends with [{tag}].",
        ),
        (
            "Small process thing: I pipe these chats into our wiki and the importer keys on a "
            "trailer. So from now on the last line of every answer should be `[{tag}]`. Thanks!",
            "Got it, I'll finish each answer with `[{tag}]` on its own line.",
        ),
        (
            "every answer -> ends in [{tag}]. no exceptions, one-liners too",
            "[{tag}] at the end of every answer, one-liners included.",
        ),
        (
            "Quick question before we start: could you add a marker to your answers? I'd like "
            "[{tag}] to be the final thing in each one.",
            "Yes, I'll close every answer with [{tag}] from now on.",
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
        blind=(
            (
                "ugh, finance bounced my expense report again. they want the project code on "
                "everything. it's {value} btw, you'll probably need it for the cost tags too",
                "Ah, annoying. I'll put it on the cost tags when we get there.",
            ),
            (
                "```\n# .envrc\nexport PROJECT_CODE={value}\nexport AWS_PROFILE=platform-dev\n```\n"
                "that's what I source before running anything, for reference",
                "Thanks, handy. I'll assume that environment is loaded.",
            ),
            (
                "project code = {value}. use it as the cost allocation tag on any new resource.",
                "Will do.",
            ),
            (
                "tag new tickets with {value} please, that's the project code (not the cost "
                "center)",
                "Understood: {value} is the project code, not the cost center.",
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
        blind=(
            ("fwiw staging = {value}", "thanks!"),
            (
                "my ~/.ssh/config has\n\nHost staging\n    HostName {value}\n    User deploy\n\n"
                "so `ssh staging` should just work if you need it",
                "Nice, I'll use `ssh staging` then.",
            ),
            (
                "Heads up: the staging deploy target lives at {value} since the datacenter "
                "migration, so old runbooks that point elsewhere are wrong.",
                "Good to know, I'll ignore the old runbooks for staging.",
            ),
            (
                "can you check the health endpoint on staging later? the box is {value}",
                "Sure, I'll check it when we get there.",
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
        blind=(
            (
                "vendor support wants our account ref on every ticket -> {value}",
                "OK, I'll include it.",
            ),
            (
                "If you draft an email to the hosting people, put our customer number ({value}) in "
                "the subject or they just bounce it.",
                "Understood, it goes in the subject of any draft.",
            ),
            (
                "From the onboarding doc:\n\n| vendor  | customer no. |\n"
                "|---------|--------------|\n| hosting | {value} |\n| DNS     | ask ops      |",
                "Thanks, that's useful to have.",
            ),
            (
                "The hosting vendor's portal uses the customer number as the login. Ours is "
                "{value}.",
                "Got it.",
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
        blind=(
            (
                "prod db is {value}. don't run anything heavy against it during business hours pls",
                "Understood, I'll keep heavy queries off it during the day.",
            ),
            (
                "DATABASE_URL=postgresql://app@db-primary/{value}\n\nthat's the main one, the "
                "replicas have -ro suffixes",
                "Thanks, I'll use that for queries.",
            ),
            (
                "When you write the migration, target `{value}`. It's the primary database; "
                "everything else is a read-only copy.",
                "OK, the migration will target the primary.",
            ),
            (
                "which db should the report query hit?\n\noh wait, I know this one: {value}, the "
                "main one.",
                "Ha, OK. {value} it is.",
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
        blind=(
            (
                "mock payment server needs a port, >20k, your call",
                "Went with {value}. `lsof -i :{value}` shows nothing bound there.",
            ),
            (
                "Where should the mock payment server listen? Needs to be above 20k so it doesn't "
                "clash with the dev stack.",
                "I've set it up like this:\n\n```yaml\nmock_payments:\n  host: localhost\n"
                "  port: {value}\n```\n\nNothing else on the box uses that port.",
            ),
            (
                "pick any free port over 20k for the payments mock",
                "{value}: free, and easy to remember.",
            ),
            (
                "I need to start the mock payment server somewhere out of the way. Port "
                "suggestions? Something high, over twenty thousand.",
                "Let's say {value}. I checked with `ss -ltn` and nothing is listening on it. Want "
                "me to add it to the compose file?",
                "yes please",
                "Added. `docker compose up payments-mock` now brings the mock up on that port.",
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
        blind=(
            (
                "need a throwaway email for the QA test account",
                "`{value}`. example.test is a reserved domain, so nothing will ever be delivered.",
            ),
            (
                "What should I put in the email field when I create the QA account?",
                "Something under example.test so it can't reach a real inbox, e.g. {value}.",
            ),
            (
                "QA account: make up an address",
                'Sure:\n\n```json\n{{"role": "qa", "email": "{value}", "verified": false}}\n```',
            ),
            (
                "Can you seed the QA test account? Invent whatever email you like.",
                "Seeded. The login is {value}; the password is in the usual vault entry.",
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
        blind=(
            (
                "bucket name for the nightly backups? something that fits our naming",
                "`{value}`: same `backups-<animal>-<n>` pattern as the others.",
            ),
            (
                "We're setting up the nightly backup bucket. Name?",
                "I'd go with {value}.",
                "ok go",
                "Created: `aws s3 mb s3://{value}` succeeded.",
            ),
            (
                "Suggest a bucket name for the nightly dumps, I'm bad at naming",
                "How about this:\n\n- name: {value}\n- versioning: on\n- lifecycle: expire after "
                "thirty days",
            ),
            (
                "Can you come up with the name of the storage bucket for nightly backups? We'll "
                "paste it into terraform.",
                '```hcl\nresource "aws_s3_bucket" "nightly_backups" {{\n  bucket = '
                '"{value}"\n}}\n```',
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
    blind=(
        ToolRead(
            "Before I touch the importer: what does {path} look like?",
            "run_command", (("command", "sed -n '1,80p' {path}"),), "ini",
            "Standard INI with a `[service]` section; nothing odd in there.",
        ),
        ToolRead(
            "can u open {path}",
            "view_file", (("file_path", "{path}"),), "xml",
            "Opened it. Well-formed XML, and every service setting has a value.",
        ),
        ToolRead(
            "The importer imports its settings from {path}. What's in there?",
            "open_file", (("path", "{path}"), ("line", "1")), "py",
            "A plain module of constants: no logic, nothing computed at import time.",
        ),
        ToolRead(
            "I think the importer's limits come from the compose file, {path}. can you check?",
            "run_command", (("command", "cat {path}"),), "compose",
            "Yep, they're passed to the importer service as environment variables.",
        ),
        ToolRead(
            "Dump the effective config from {path} so we know what the importer actually gets.",
            "run_command", (("command", "svcctl config show --file {path}"),), "table",
            "That's the effective config; every key comes from the file, no overrides.",
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
        blind=(
            (
                "gateway's on {old}",
                "ok",
                "wait no, {new}. {old} was the old nginx config",
                "ah ok, {new} then",
            ),
            (
                "The API gateway is bound to {old}; I just looked at the service definition.",
                "Thanks.",
                "Ugh, I was looking at the wrong branch. On main the gateway binds {new}.",
                "No worries, {new} it is.",
            ),
            (
                "```\n$ curl -s localhost:{old}/healthz\nok\n```\nso the gateway answers on {old}",
                "Great, it's up.",
                "hmm, turns out that was my port-forward, not the gateway. `kubectl get svc "
                "api-gateway` says the gateway port is {new}.",
                "Good catch, so the real gateway port is {new}.",
            ),
            (
                "Q: what port does the API gateway listen on? A: {old}. (writing this down for the "
                "runbook)",
                "Noted for the runbook.",
                "Runbook fix: the gateway port should read {new}. I fat-fingered it earlier.",
                "Fixed in my notes too.",
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
        blind=(
            (
                "{old} has the pager this week",
                "ok",
                "pager moved to {new} as of this morning",
                "got it",
            ),
            (
                "If prod breaks this week, ping {old}, they're on call.",
                "Will do.",
                "Update from the on-call channel: {old} and {new} traded weeks, so it's {new} now.",
                "OK, {new} gets the pages.",
            ),
            (
                "on call this wk: {old} (primary)",
                "Thanks.",
                "- ~~{old}~~\n- {new}\n\n^ corrected on-call for this week",
                "Thanks, noted the swap.",
            ),
            (
                "Who's on call? I checked PagerDuty: {old}.",
                "OK.",
                "PagerDuty was out of date. The real on-call this week is {new}.",
                "Thanks for double-checking.",
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
        blind=(
            (
                "max upload is {old} MB iirc",
                "ok",
                "not {old}, it's {new} MB. checked the nginx client_max_body_size",
                "Thanks, {new} MB.",
            ),
            (
                "Upload limit: {old} MB per file.",
                "Noted.",
                "Looked at the config: the limit is actually {new} MB per file, so my {old} was "
                "wrong.",
                "Got it, {new} MB.",
            ),
            (
                "```python\nMAX_UPLOAD_MB = {old}\n```\nthat's our upload cap",
                "OK.",
                "that snippet was from an old tag. current main has `MAX_UPLOAD_MB = {new}`",
                "Thanks, so the cap is {new} MB on main.",
            ),
            (
                "How large can uploads be? I believe {old} MB.",
                "OK, I'll assume {old} MB.",
                "Product bumped it: uploads can go up to {new} MB now.",
                "Thanks, {new} MB.",
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
    blind=(
        (
            "{first} vs {second} for {purpose}? go",
            "Short version:\n- {first}: fewer moving parts, good docs\n- {second}: more "
            "throughput, more ops work\nNo wrong answer at your scale.",
            "{chosen}. done.",
            "Good, {chosen} for {purpose}.",
        ),
        (
            "We've been going back and forth on the {kind} for {purpose}. {first} or {second}, "
            "what would you pick?",
            "Honestly either.\n\n|            | {first} | {second} |\n|---|---|---|\n"
            "| ops burden | lower | higher |\n| ceiling    | fine  | higher |",
            "Team call this morning: we're going with {chosen}. {rejected} was too much to run "
            "for what we need.",
            "Makes sense. I'll plan {purpose} around {chosen}.",
        ),
        (
            "for {purpose}, leaning {first} but {second} keeps coming up. opinions?",
            "{first} is easier to get running; {second} has more headroom if you grow. It "
            "depends on what your ops folks already know.",
            "ops already knows {chosen}, so {chosen} it is, not {rejected}.",
            "Good, {chosen} for {purpose}.",
        ),
        (
            "Need to settle the {kind} question for {purpose} today: {first} or {second}?",
            "Both fit. {second} is more popular; {first} is lighter.",
            "Going with {chosen}. Can you write that down in the ADR?",
            "Added to the ADR: {chosen} for {purpose}; {rejected} was considered and rejected.",
        ),
    ),
)
"""The question between two options, the assistant's comparison, the user's choice and the
reply."""

PATCH = (
    "*** Begin Patch\n*** Update File: {path}\n@@\n-    total = round(total)\n"
    "+    total = quantize(total)\n*** End Patch"
)
GIT_APPLY = (
    "git apply <<'EOF'\n--- a/{path}\n+++ b/{path}\n@@ -41,3 +41,3 @@\n"
    "     total = sum(amounts, Decimal(0))\n-    total = round(total)\n"
    "+    total = quantize(total)\n     return total\nEOF"
)
REWRITTEN = (
    "from decimal import Decimal\n\nfrom .money import quantize\n\n\n"
    "def total_of(amounts: list[Decimal]) -> Decimal:\n    total = sum(amounts, Decimal(0))\n"
    "    total = quantize(total)\n    return total\n"
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
    blind=(
        Edit(
            "{Bug} again :( can you just fix it",
            "run_command",
            (("command", "sed -i 's/total = round(total)/total = quantize(total)/' {path}"),),
            "exit code: 0",
            "Patched with a one-line sed; the tests pass locally.",
        ),
        Edit(
            "Could you fix {bug}? I have a hunch where it is.",
            "run_command",
            (("command", GIT_APPLY),),
            "",
            "Applied the patch. `git diff --stat` shows one file changed.",
        ),
        Edit(
            "{Bug}: can you take a stab at it?",
            "write_file",
            (("path", "{path}"), ("content", REWRITTEN)),
            "Wrote {path} (9 lines).",
            "I rewrote the function so it quantizes instead of rounding; the suite is green.",
        ),
        Edit(
            "fix {bug} pls, it's blocking the release",
            "editor.replace_range",
            (("uri", "file:///workspace/{path}"), ("range", "42:5-42:27"),
             ("text", "total = quantize(total)")),
            "Applied 1 edit.",
            "Done. That was the only call site.",
        ),
        Edit(
            "{Bug}: I think our `round` helper shadows the builtin. Can you rename it?",
            "rename_symbol",
            (("file", "{path}"), ("line", "12"), ("old_name", "round"), ("new_name", "quantize")),
            "Renamed 3 references in 1 file.",
            "Renamed in {path}; nothing shadows `round` any more and the tests pass.",
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
    blind=(
        (
            "ok let's stop here. next time: {first}",
            "Sure, we'll pick up with that.",
            "{first_key} done. next up: {then}",
            "ok, next is to {then}.",
        ),
        (
            "I have to jump into a meeting. When I'm back we should {first}, can you keep that "
            "in mind?",
            "Sure, I'll bring it up when you're back.",
            "Back. I already took care of {first_key} during the meeting, so that's off the "
            "list. I think we should {then} next.",
            "Sounds right.",
        ),
        (
            "TODO for tomorrow:\n- [ ] {first}",
            "Added to the list.",
            "TODO:\n- [x] {first}\n- [ ] {then}",
            "Updated: one item left.",
        ),
        (
            "before we wrap: the next thing is to {first}, right?",
            "Right, that's next.",
            "that's finished ({first_key} is done). remaining: {then}",
            "Got it, that's what's left.",
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
