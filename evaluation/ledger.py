"""What the fact ledger alone keeps of `overspill eval`'s conversations: no model, in seconds.

The notes an extraction holds come from a model; the quoted-facts ledger beside them does
not. This replays the evaluation's generated conversations (evaluation/conversations.py)
through the ledger's rules with empty notes (or `--notes N` tokens of notes holding no fact,
the room a model's notes take) and reports, per probe kind, how often the right
value is still in what the model would be shown (the ledger plus the intact tail), and how
often it is in a quoted line while no line holds a stale value alone (a corrected value, a
rejected option, a finished step): what a small model can answer from, since a bare term on
the merged line has no sentence around it; the third figure also counts a merged term that
holds the value with words around it (a setting's ``name = value``). Under the table, how
often the user's line holding the value is quoted with the assistant's reply confirming it
(``Fact.confirmed``), for the kinds where a user's line is confirmed, and how often a
line holding the value is quoted after the user's request it answered (``Fact.asked``:
an edit's call line after "Please fix …"), for the kinds where one is:

    once    one extraction of everything before the tail
    nested  a growth every `--step` messages, each carrying the previous ledger's records forward

The tail is split off as the history splice does (`split_history`); the sizes and the
cadence approximate a 2,048-token window (an extraction target of `--target` tokens, a tail
of `--tail`); the real pipeline with a real model is `overspill eval`. Tune seeds (below
1000) and held-out seeds are reported apart, and with `--templates all` the tune, held-out
and blind templates too (evaluation/phrasings.py: the same seeds and values, said otherwise),
then the points held-out and blind templates are from tune ones. With `--relevant` each probe
is also shown what the splice quotes for its question from the condensed turns (relevance.py),
as the answering call is: what the model sees, where the default measures the ledger alone.

    .venv/bin/python -m evaluation.ledger                 # fillers 24 and 60
    .venv/bin/python -m evaluation.ledger --fillers 60 --seeds 1-8,1000-1007
    .venv/bin/python -m evaluation.ledger --templates all  # phrasings no rule was tuned on
    .venv/bin/python -m evaluation.ledger --relevant       # + the turns a question is about

Compare a revision: run the same command in a worktree of it (`git worktree add /tmp/old
REV`; before the evaluation left `proxy/`, this was `scripts/bench_ledger.py`).
"""

from __future__ import annotations

import argparse
import itertools
import random
import re
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from evaluation import locomo, taubench
from evaluation.cli import add_templates_argument, parse_seeds
from evaluation.conditions import drop_oldest
from evaluation.conversations import Conversation, generate
from evaluation.phrasings import template_sets
from evaluation.places import last_excerpt
from evaluation.probes import PROBE_KINDS, Probe, contains_any, normalise
from kernel.config import ContextSettings
from kernel.tokens import count_messages, count_text
from kernel.types import Message
from middleware.condensing.condenser import latest_question
from middleware.condensing.ledger import Fact, Ledger, Previous
from middleware.condensing.ledger.records import MERGED_ROLE
from middleware.condensing.prompt import render_transcript
from middleware.condensing.relevance import passages, pick, quoted
from middleware.condensing.split import split_history
from proxy.arguments import positive


def tail_start(messages: Sequence[Message], tail: int) -> int:
    """Where the intact tail starts, as the history splice splits (whole tool units)."""
    counts = [count_messages([message]) for message in messages]
    return split_history(messages, counts, tail_budget=tail).historical_end


def stand_in_notes(tokens: int) -> str:
    """Notes of about `tokens` tokens holding no key term: the room a model's notes take
    from the quoted facts (a small model's notes often hold nothing a probe asks)."""
    line = "- the team discussed the services and the tests of the project"
    lines: list[str] = []
    while tokens > 0 and count_text("\n".join(lines)) < tokens:
        lines.append(line)
    return "\n".join(lines)


def varying_notes(seed: int, low: int, high: int) -> Callable[[int], str]:
    """Stand-in notes whose size each growth draws between `low` and `high` tokens, the
    same for a seed and growth on every run."""

    def notes(growth: int) -> str:
        return stand_in_notes(random.Random(seed * 1000 + growth).randint(low, high))

    return notes


@dataclass(frozen=True, slots=True)
class Shown:
    """What a condition shows (the ledger, then the tail), the records its ledger quotes,
    and how many of the conversation's messages the ledger stands for."""

    text: str
    facts: tuple[Fact, ...]
    condensed: int

    def asked(self, conversation: Conversation[Probe], room: int) -> Callable[[Probe], str]:
        """What each probe's answering call is shown: this, and, with `room` tokens for them,
        the condensed turns its question is about quoted before it, as the splice quotes them
        (relevance.py) for the message the answering call sends (the question and its
        instruction, `Probe.prompt`)."""
        if room <= 0:
            return lambda probe: self.text
        found = passages(conversation.messages, range(self.condensed))
        replaced = replaced_in(self.facts)
        later = conversation.messages[self.condensed :]
        newest = passages(conversation.messages, range(self.condensed, len(conversation.messages)))

        def shown(probe: Probe) -> str:
            picked = pick(probe.prompt, found, room, count_text, replaced, later, newest)
            return f"{self.text}\n{quoted(picked)}" if picked else self.text

        return shown


def replaced_in(facts: Sequence[Fact]) -> list[str]:
    """The statements a ledger's records say later ones replaced, which the splice does not
    quote back (``Fact.supersedes``)."""
    return [fact.supersedes for fact in facts if fact.supersedes]


def once(conversation: Conversation[Probe], target: int, tail: int, notes: str = "") -> Shown:
    """One extraction's ledger of everything before the tail, then the tail."""
    end = tail_start(conversation.messages, tail)
    made = Ledger.grow(None, (), conversation.messages[1:end]).render(notes, target)
    text = f"{made.text}\n{render_transcript(conversation.messages[end:])}"
    return Shown(text, made.facts, end)


def nested(
    conversation: Conversation[Probe],
    target: int,
    tail: int,
    step: int,
    notes: str | Callable[[int], str] = "",
    rebuild: bool = False,
) -> tuple[Shown, int]:
    """Growths every `step` messages as the conversation is played; the last ledger (and
    its records), the tail after it, and how many growths there were. `notes`: the same at
    every growth, or a growth's by its number; `rebuild`: each growth quotes every message
    it stands for anew (the client resent them) instead of carrying the previous ledger's
    records forward."""
    messages = conversation.messages
    previous: Previous | None = None
    done, growths = 1, 0
    for point in conversation.request_points():
        end = tail_start(messages[:point], tail)
        first = not previous and end > done and count_messages(messages[:point]) > target + tail
        if end - done >= step or first:
            if rebuild:
                ledger = Ledger.grow(None, (), messages[1:end])
            else:
                ledger = Ledger.grow(previous, (), messages[done:end])
            text = notes if isinstance(notes, str) else notes(growths)
            made = ledger.render(text, target)
            previous = Previous(made.text, made.notes, made.facts)
            done, growths = end, growths + 1
    shown = previous.text if previous else ""
    facts = previous.facts if previous else ()
    text = f"{shown}\n{render_transcript(messages[done:])}"
    return Shown(text, facts, done if previous else 0), growths


MERGED_LINE = "- " + MERGED_ROLE.split("{", 1)[0]
"""How the ledger's merged line starts (``- merged(N facts): `term` …``)."""


def quoted_text(shown: str) -> str:
    """What is shown without the merged line (bare key terms, no sentence around them)."""
    return "\n".join(line for line in shown.splitlines() if not line.startswith(MERGED_LINE))


def labelled(shown: str, probe: Probe) -> bool:
    """Whether the right value stands with words around it: in a quoted line, or in a merged
    line's term that is more than the value (a setting's ``name = value``)."""
    if probe.present(quoted_text(shown)):
        return True
    terms = [
        term
        for line in shown.splitlines()
        if line.startswith(MERGED_LINE)
        for term in re.findall(r"`([^`\n]+)`", line)
    ]
    return any(probe.present(term) and normalise(term) not in probe.accept for term in terms)


def stale_alone(quoted: str, probe: Probe) -> bool:
    """Whether a quoted line holds a stale value without a right one (a correction that
    names the old value beside the new one is fine)."""
    return any(
        contains_any(line, probe.stale) and not probe.present(line) for line in quoted.splitlines()
    )


def confirmed(facts: Sequence[Fact], probe: Probe) -> bool:
    """Whether a user's line holding the right value is quoted with the assistant's reply
    that confirmed it (``Fact.confirmed``: the reply on the line after, or a decision's
    first on one ``- decided:`` line), holding the value too."""
    return any(
        fact.confirmed and probe.present(fact.text) and probe.present(fact.confirmed)
        for fact in facts
    )


def requested(quoted: str, probe: Probe) -> bool:
    """Whether a line holding the right value is quoted after the user's request it answered
    (``Fact.asked``: an edit's call line after "Please fix …"): what ties the file
    touched to the bug a question names."""
    lines = quoted.splitlines()
    return any(
        line.startswith("- user: ") and not probe.present(line)
        and after.startswith(("- assistant: ", "- tool: ")) and probe.present(after)
        for line, after in itertools.pairwise(lines)
    )  # fmt: skip


EXTRACTION_SHARE = 0.3
"""The extraction's share of the budget (1 - `context.intact_share`)."""
LANDING_TAIL_SHARE = 0.2
"""The tail's share when a growth lands the spliced request at `context.compact_to` (0.5)."""
RELEVANT_SHARE = float(ContextSettings.model_fields["relevant_share"].default)
"""`context.relevant_share`'s default."""


def shown_for(
    messages: Sequence[Message],
    questions: Sequence[str],
    budget: int,
    notes: str = "",
    relevant_share: float = RELEVANT_SHARE,
) -> list[dict[str, str]]:
    """What each condition shows of `messages` before each of `questions` within `budget`
    prompt tokens, with no model: the ledger of one extraction (the room `EXTRACTION_SHARE`
    gives it) and the tail the splice lands with, that plus the condensed turns relevance.py
    recalls for the question (in `relevant_share` of the budget), and drop-oldest in the
    whole budget."""
    end = tail_start(messages, int(budget * LANDING_TAIL_SHARE))
    history = render_transcript(messages[end:])
    target = int(budget * EXTRACTION_SHARE)
    made = Ledger.grow(None, (), messages[1:end]).render(notes, target)
    replaced = replaced_in(made.facts)
    spliced = f"{made.text}\n{history}"
    found = passages(messages, range(end))
    newest = passages(messages, range(end, len(messages)))
    dropped = render_transcript(drop_oldest(messages, budget, count_messages) or [])
    room = int(budget * relevant_share)
    return [
        {
            "ledger+tail": spliced,
            "ledger+tail+relevant": f"{spliced}\n"
            + quoted(pick(question, found, room, count_text, replaced, messages[end:], newest)),
            "drop-oldest": dropped,
        }
        for question in questions
    ]


IN_A_SENTENCE = "without-merged-line"
"""LoCoMo's column of answers in what the splice shows (the ledger, the tail, the quoted
turns) when the ledger's merged line is left out: an answer whose words are there only as
bare terms of facts that did not fit has no sentence around it to be read from."""


LAST_EXCERPT = "last-excerpt"
"""LoCoMo's column of answers in the quoted turns' last excerpt: what a reader reads right
before the question, and answers from most."""


WITH_EVIDENCE = "answer+evidence"
"""LoCoMo's column of answers in what the splice shows together with every turn the
annotators marked as answering the question, whole (`Question.evidence_in`): an answer's
words alone can stand elsewhere (a temporal answer's date is in the stamp of every turn said
that day)."""
EVIDENCE_DROPPED = "drop-oldest+evidence"
"""The same for drop-oldest."""


def locomo_main(path: Path, window: int, names: Sequence[str], relevant_share: float) -> None:
    """Per LoCoMo question kind: how often the annotated answer is in what each condition
    shows, the dialogues developed on and the others apart."""
    budget = int(window * 0.9) - 48 - 64  # the safety margin, the answer, the question
    every = locomo.load(path)
    chosen = locomo.chosen(every, names)
    apart = [d for d in every if d.name not in names]
    for label, dialogues in (("developed on", chosen), ("kept apart", apart)):
        if not dialogues:
            continue
        found: dict[tuple[str, str], list[bool]] = defaultdict(list)
        for dialogue in dialogues:
            whole = render_transcript(dialogue.messages)
            asked = locomo.asked(dialogue, locomo.DEFAULT_KINDS)
            every_shown = shown_for(
                dialogue.messages,
                [q.prompt for q in asked],
                budget,
                relevant_share=relevant_share,
            )
            for question, shown in zip(asked, every_shown, strict=True):
                found[(question.kind, "whole")].append(question.present(whole))
                for condition, text in shown.items():
                    found[(question.kind, condition)].append(question.present(text))
                relevant = quoted_text(shown["ledger+tail+relevant"])
                found[(question.kind, IN_A_SENTENCE)].append(question.present(relevant))
                last = last_excerpt(shown["ledger+tail+relevant"])
                found[(question.kind, LAST_EXCERPT)].append(question.present(last))
                for column, text in (
                    (WITH_EVIDENCE, shown["ledger+tail+relevant"]),
                    (EVIDENCE_DROPPED, shown["drop-oldest"]),
                ):
                    held = question.present(text) and bool(question.evidence_in(text))
                    found[(question.kind, column)].append(held)
        names_of = ", ".join(d.name for d in dialogues)
        print(f"\nLoCoMo {names_of} ({label}), window {window}: the answer in what is shown")
        columns = [
            "whole", "ledger+tail", "ledger+tail+relevant", IN_A_SENTENCE, LAST_EXCERPT,
            WITH_EVIDENCE, "drop-oldest", EVIDENCE_DROPPED,
        ]  # fmt: skip
        print(f"{'':<12}" + "".join(f"{c:>24}" for c in columns))
        for kind in locomo.DEFAULT_KINDS:
            cells = [found[(kind, c)] for c in columns]
            print(f"{kind:<12}" + "".join(f"{f'{sum(c)}/{len(c)}':>24}" for c in cells))


def taubench_main(path: Path, window: int, relevant_share: float) -> None:
    """Over τ-bench's runs, the tasks developed on and those kept apart apart: of the tool
    calls made once the request no longer fit, how often each condition still shows the
    values the call carried (each value, and every value of a call)."""
    budget = int(window * 0.9) - 48 - 64  # as for LoCoMo: the margin, the answer, a turn
    runs = taubench.load(path)
    for label, chosen in (
        ("tasks developed on (even ids)", [r for r in runs if not r.kept_apart]),
        ("tasks kept apart (odd ids)", [r for r in runs if r.kept_apart]),
    ):
        found: dict[str, list[tuple[int, int]]] = defaultdict(list)
        probes = taubench.probes(chosen, budget, count_messages)
        for run, call in probes:
            messages = run.messages[: call.position]
            question = latest_question(messages) or ""
            shown = shown_for(messages, [question], budget, "", relevant_share)[0]
            for condition, text in shown.items():
                found[condition].append((len(call.present(text)), len(call.values)))
        calls = sum(1 for run in chosen for _ in run.calls())
        print(
            f"\nτ-bench {path.name}, {label}: {len(chosen)} runs, {calls} tool calls carrying "
            f"a value said earlier, {len(probes)} of them made once the request outgrew a "
            f"{window}-token window: the carried values in what is shown"
        )
        print(f"{'':<24}{'values':>18}{'calls with all':>18}")
        for condition, cells in found.items():
            held, total = sum(c[0] for c in cells), sum(c[1] for c in cells)
            whole = sum(1 for c in cells if c[0] == c[1])
            print(
                f"{condition:<24}{f'{held}/{total} ({held / total:.0%})':>18}"
                f"{f'{whole}/{len(cells)} ({whole / len(cells):.0%})':>18}"
            )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    locomo.add_arguments(parser)
    taubench.add_arguments(parser)
    parser.add_argument("--window", type=positive, default=4096, help="with --locomo or --taubench")
    parser.add_argument(
        "--relevant-share",
        type=float,
        default=RELEVANT_SHARE,
        help="with --locomo or --taubench",
    )
    parser.add_argument("--seeds", default="1-8,1000-1007")
    add_templates_argument(parser)
    parser.add_argument("--fillers", default="24,60")
    parser.add_argument("--target", type=positive, default=480)
    parser.add_argument("--tail", type=positive, default=1100)
    parser.add_argument("--step", type=positive, default=12)
    parser.add_argument(
        "--notes", default="0",
        help="tokens of notes (holding no fact) beside the ledger, as a model's take room; "
        "LOW-HIGH: each growth's drawn between them (a model's notes vary)",
    )  # fmt: skip
    parser.add_argument(
        "--rebuild", action="store_true",
        help="each growth quotes every message it stands for anew (no ledger carried)",
    )  # fmt: skip
    parser.add_argument(
        "--relevant", action="store_true",
        help="each probe is also shown the condensed turns its question is about, in "
        "--relevant-share of the budget the target stands for, as the splice quotes them",
    )  # fmt: skip
    args = parser.parse_args()
    if args.taubench:
        taubench_main(Path(args.taubench), args.window, args.relevant_share)
        return
    if args.locomo:
        locomo_main(Path(args.locomo), args.window, args.dialogues.split(","), args.relevant_share)
        return
    low, _, high = args.notes.partition("-")
    notes = stand_in_notes(int(low))
    room = int(args.relevant_share * args.target / EXTRACTION_SHARE) if args.relevant else 0
    for fillers in (int(f) for f in args.fillers.split(",")):
        counted = Counted()
        for seed in parse_seeds(args.seeds):
            for templates in template_sets(args.templates):
                conversation = generate(seed, fillers=fillers, templates=templates)
                varied = varying_notes(seed, int(low), int(high)) if high else notes
                shown_nested, grown = nested(
                    conversation, args.target, args.tail, args.step, varied, args.rebuild
                )
                counted.growths.append(grown)
                for mode, shown in (
                    ("once", once(conversation, args.target, args.tail, notes)),
                    ("nested", shown_nested),
                ):
                    counted.add(conversation, mode, shown.asked(conversation, room), shown.facts)
        span = f"{min(counted.growths)}-{max(counted.growths)}"
        rebuilt = ", rebuilt at each growth" if args.rebuild else ""
        rebuilt += ", with the turns each question is about" if room else ""
        said = template_sets(args.templates)
        for templates in said:
            print(f"\nfillers {fillers}, notes {args.notes}{rebuilt}, {templates} templates:"
                  " right value present (ledger + tail) / quoted in a line, no stale value alone"
                  " in a line / quoted or with its name on the merged line;"
                  f" growths {span}")  # fmt: skip
            counted.print_table(templates)
        if "tune" in said:
            for other in said[1:]:
                counted.print_gap(other)


Column = tuple[str, str]
"""A seed set and a mode (``once``, ``nested``)."""
MODES = ("once", "nested")


@dataclass
class Counted:
    """Per template set, seed set, mode and probe kind: what was kept of each probe."""

    kept: dict[tuple[str, str, str, str], list[tuple[bool, bool, bool]]] = field(
        default_factory=lambda: defaultdict(list)
    )
    confirming: dict[tuple[str, str, str, str], list[bool]] = field(
        default_factory=lambda: defaultdict(list)
    )
    asking: dict[tuple[str, str, str, str], list[bool]] = field(
        default_factory=lambda: defaultdict(list)
    )
    growths: list[int] = field(default_factory=list)

    def add(
        self,
        conversation: Conversation[Probe],
        mode: str,
        shown_to: Callable[[Probe], str],
        facts: Sequence[Fact],
    ) -> None:
        """Count what each probe is shown (`shown_to`) and the ledger's `facts` keep of it."""
        for probe in conversation.probes:
            shown = shown_to(probe)
            quoted = quoted_text(shown)
            key = (conversation.templates, conversation.seed_set, mode, probe.kind)
            right = probe.present(shown)
            clean = probe.present(quoted) and not stale_alone(quoted, probe)
            self.kept[key].append((right, clean, labelled(shown, probe)))
            self.confirming[key].append(confirmed(facts, probe))
            self.asking[key].append(requested(quoted, probe))

    def columns(self) -> list[Column]:
        """The seed sets counted, each once and nested."""
        sets = [s for s in ("tune", "held-out") if any(k[1] == s for k in self.kept)]
        return [(s, m) for s in sets for m in MODES]

    def figures(self, templates: str, column: Column, kind: str) -> tuple[int, int, int, int]:
        """Present, answerable (quoted, no stale value alone), named, and how many probes."""
        found = self.kept[(templates, *column, kind)]
        present = sum(right for right, _, _ in found)
        answerable = sum(clean for _, clean, _ in found)
        return present, answerable, sum(beside for _, _, beside in found), len(found)

    def print_table(self, templates: str) -> None:
        """The three figures per kind and column, then the confirmations and requests."""
        columns = self.columns()
        print(f"{'':<16}" + "".join(f"{s + ' ' + m:>18}" for s, m in columns))
        for kind in PROBE_KINDS:
            cells = []
            for column in columns:
                present, answerable, named, n = self.figures(templates, column, kind)
                cells.append(f"{present}/{n} {answerable}/{n} {named}/{n}")
            print(f"{kind:<16}" + "".join(f"{cell:>18}" for cell in cells))
        keyed = [(templates, *column) for column in columns]
        print_counts("with the assistant's confirmation:", self.confirming, keyed)
        print_counts("after the user's request it answered:", self.asking, keyed)

    def print_gap(self, other: str) -> None:
        """Per kind and column, the `other` templates' three figures minus the tune
        templates', in points (the same seeds and values, said otherwise)."""
        columns = self.columns()
        print(f"\n{other} templates against tune templates, points (present / quoted, no stale"
              " alone / quoted or named)")  # fmt: skip
        print(f"{'':<16}" + "".join(f"{s + ' ' + m:>18}" for s, m in columns))
        for kind in PROBE_KINDS:
            cells = []
            for column in columns:
                said = self.figures(other, column, kind)
                tune = self.figures("tune", column, kind)
                pairs = zip(said[:3], tune[:3], strict=True)
                gaps = [round(100 * (s / said[3] - t / tune[3])) for s, t in pairs]
                cells.append(" ".join(f"{gap:+d}" for gap in gaps))
            print(f"{kind:<16}" + "".join(f"{cell:>18}" for cell in cells))


def print_counts(
    title: str,
    counted: dict[tuple[str, str, str, str], list[bool]],
    columns: Sequence[tuple[str, str, str]],
) -> None:
    """One count per kind and column (a template set, a seed set, a mode), for the kinds
    counted anywhere."""
    print(title)
    for kind in PROBE_KINDS:
        counts = [counted[(*column, kind)] for column in columns]
        if any(any(found) for found in counts):
            cells = [f"{sum(found)}/{len(found)}" for found in counts]
            print(f"{kind:<16}" + "".join(f"{cell:>18}" for cell in cells))


if __name__ == "__main__":
    main()
