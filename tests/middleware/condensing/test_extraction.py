"""Tests for middleware.condensing.extraction: the fact ledger, sizes, map-reduce, rejection."""

from __future__ import annotations

import re
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from itertools import pairwise
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kernel.errors import ContextWindowExceeded
from kernel.tokens import count_messages, count_text
from kernel.types import Completion, Message
from middleware.condensing.cutting import cut_middle, cut_tail
from middleware.condensing.extraction import (
    MIN_CHUNK_TOKENS,
    PROMPT_VERSION,
    BadExtraction,
    Extraction,
    cut_history,
    extract_history,
    plan_merge_groups,
    plan_sizes,
    rejection,
)
from middleware.condensing.ledger import Ledger, Previous
from middleware.condensing.ledger.carry import carried
from middleware.condensing.ledger.fit import fit
from middleware.condensing.ledger.rank import select_facts
from middleware.condensing.ledger.records import Fact
from middleware.condensing.ledger.render import FACTS_HEADER
from middleware.condensing.ledger.select import fact_lines
from middleware.condensing.prompt import clean_output, drop_unsupported, looks_refused

FACTS = {
    "ZX-4471": "For the record, our internal project code is ZX-4471.",
    "8443": "The staging server listens on port 8443.",
    "orca_ledger": "The main database is named orca_ledger.",
    "Halvorsen": "My manager is Ingrid Halvorsen, please cc her on status mails.",
    "14 March": "The public release is scheduled for 14 March 2025.",
}


def grown(made: Extraction) -> Previous:
    """An extraction as the next growth starts from it (as its stored entry reads back)."""
    return Previous(made.text, made.notes, made.facts)


FILLER_Q = "Can you explain how list comprehensions work?"
FILLER_A = (
    "A list comprehension builds a list from an iterable in one expression. You can add a "
    "condition at the end to filter items. They are usually easier to read than a loop that "
    "appends to a list, but very long ones are better written as ordinary loops. "
)


def conversation(pairs: int = 10, filler_repeat: int = 1) -> list[Message]:
    """User/assistant pairs: the planted facts first, then filler."""
    messages: list[Message] = []
    facts = list(FACTS.values())
    for i in range(pairs):
        user = facts[i] if i < len(facts) else FILLER_Q
        answer = "Noted." if i < len(facts) else FILLER_A * filler_repeat
        messages += [{"role": "user", "content": user}, {"role": "assistant", "content": answer}]
    return messages


def prompt_text(messages: Sequence[Message]) -> str:
    """All the text of a prompt."""
    return "\n".join(str(m["content"]) for m in messages)


def is_merge(messages: Sequence[Message]) -> bool:
    """Whether a prompt is a merge prompt."""
    return "Notes on consecutive parts" in prompt_text(messages)


Answer = Callable[[Sequence[Message], int], Completion]


@dataclass
class Scripted:
    """A scripted `Complete`: answers with a function of the prompt, records every call."""

    answer: Answer
    window: int | None = None
    prompts: list[Sequence[Message]] = field(default_factory=list)
    max_tokens: list[int] = field(default_factory=list)

    async def __call__(self, messages: Sequence[Message], *, max_tokens: int) -> Completion:
        """Record the call; overflow when the prompt exceeds the window, else answer."""
        self.prompts.append(messages)
        self.max_tokens.append(max_tokens)
        tokens = count_messages(messages)
        if self.window is not None and tokens + max_tokens > self.window:
            raise ContextWindowExceeded("too long", requested=tokens, limit=self.window)
        return self.answer(messages, max_tokens)

    def merges(self) -> list[Sequence[Message]]:
        """The merge prompts seen."""
        return [p for p in self.prompts if is_merge(p)]


def fixed(text: str, prompt_tokens: int | None = 50, completion_tokens: int | None = 5) -> Answer:
    """An answer function that always says `text`."""
    return lambda _messages, _max: Completion(text, prompt_tokens, completion_tokens, "stop")


NOTES = "Goal:\n- plan the release\nOpen tasks:\n- cc the manager"


# ---------------------------------------------------------------- the fact ledger (pure)


def test_fact_lines_keep_every_planted_fact_and_skip_filler_questions() -> None:
    """Each planted fact is a ledger line, verbatim; a filler question is not."""
    ledger = fact_lines(conversation())
    texts = [fact.text for fact in ledger]
    for sentence in FACTS.values():
        assert sentence in texts
    assert FILLER_Q not in texts


def test_fact_lines_rank_the_users_facts_above_the_assistants() -> None:
    """A user's fact outranks an assistant's explanation full of numbers."""
    messages: list[Message] = [
        {"role": "user", "content": "The offsite is in Tallinn."},
        {"role": "assistant", "content": "HTTP 404 differs from 403 and 410 Gone."},
    ]
    user, assistant = fact_lines(messages)
    assert user.role == "user"
    assert user.score > assistant.score


def test_fact_lines_name_tools_and_read_text_parts_and_tool_calls() -> None:
    """Tool results carry the tool's name; content parts and tool-call arguments are read."""
    messages: list[Message] = [
        {"role": "user", "content": [{"type": "text", "text": "Use bucket logs-2291 please."}]},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [{"function": {"name": "lookup", "arguments": '{"id": "A-77"}'}}],
        },
        {"role": "tool", "name": "lookup", "content": "Order A-77 shipped on 3 May."},
    ]
    rendered = [fact.render() for fact in fact_lines(messages)]
    assert "- user: Use bucket logs-2291 please." in rendered
    assert "- tool(lookup): Order A-77 shipped on 3 May." in rendered
    assert any("A-77" in line and line.startswith("- assistant") for line in rendered)


def test_fact_lines_clip_an_overlong_sentence_around_its_fact() -> None:
    """A very long sentence is cut to a window that still holds its code."""
    long = "word " * 200 + "the key is QX-1234 " + "word " * 200
    (fact,) = fact_lines([{"role": "user", "content": long}])
    assert "QX-1234" in fact.text
    assert len(fact.text) < 320


def test_fact_lines_drop_exact_repeats() -> None:
    """The same sentence said twice is one ledger line."""
    sentence = "The staging server listens on port 8443."
    messages: list[Message] = [{"role": "user", "content": sentence}] * 2
    assert len(fact_lines(messages)) == 1


@given(st.lists(st.tuples(st.sampled_from(["user", "assistant", "tool"]), st.text()), max_size=8))
@settings(max_examples=60, deadline=None)
def test_fact_lines_are_deterministic(pairs: list[tuple[str, str]]) -> None:
    """The ledger is a pure function of the messages."""
    messages: list[Message] = [{"role": role, "content": text} for role, text in pairs]
    assert fact_lines(messages) == fact_lines(list(messages))


def test_a_rendered_extraction_keeps_its_notes_and_the_records_it_quotes() -> None:
    """An assembled extraction comes with its notes and its ledger's records, which the next
    growth carries as they were quoted."""
    facts = fact_lines(conversation())
    made = fit(NOTES, facts, 1000)
    assert made.notes == NOTES
    carried_on = carried(made.facts)
    assert [(f.role, f.text) for f in carried_on] == [(f.role, f.text) for f in facts]
    assert all(fact.render() in made.text for fact in made.facts)


# ---------------------------------------------------------------- output checks (pure)


def test_clean_output_drops_repeated_lines_and_cuts_loops() -> None:
    """Repeated lines go, a phrase looping inside a line is cut at its second start."""
    loop = "- the user wants the report by Friday and " * 4
    text = f"Notes:\n- a\n- a\n- b\n{loop}"
    cleaned = clean_output(text)
    assert cleaned.splitlines()[:2] == ["- a", "- b"]
    assert cleaned.count("the user wants the report") == 1


def test_clean_output_drops_the_cut_last_line_of_a_truncated_answer() -> None:
    """When the answer hit max_tokens its last, unfinished line is dropped."""
    assert clean_output("- one\n- two\n- thr", truncated=True) == "- one\n- two"
    assert clean_output("- one", truncated=True) == "- one"


@pytest.mark.parametrize(
    "text",
    [
        "I'm sorry, but I can't help with that.",
        "I cannot summarise this conversation.",
        "As an AI language model, I do not keep notes.",
        '{"error": "upstream failed"}',
        "Error: model overloaded",
    ],
)
def test_looks_refused_spots_refusals_and_error_texts(text: str) -> None:
    """Refusal and error openings are recognised."""
    assert looks_refused(text)


def test_clean_output_drops_echoes_of_the_instructions() -> None:
    """Lines that repeat the prompt's own wording are not notes."""
    echo = "Conversation:\n<<<\n- copy names, numbers, dates, codes and identifiers exactly\n- port 8443"
    assert clean_output(echo) == "- port 8443"


def test_looks_refused_ignores_a_refusal_quoted_inside_notes() -> None:
    """Notes that merely report someone saying "I cannot" are fine."""
    assert not looks_refused("- user said: I cannot attend on Friday")


def test_drop_unsupported_removes_elaboration_the_source_never_said() -> None:
    """A note line made mostly of words absent from the source is dropped."""
    notes = "- use PostgreSQL for the new service\n- PostgreSQL is robust, scalable, widely loved"
    source = "We decided to use PostgreSQL instead of MySQL for the new service."
    assert drop_unsupported(notes, source) == "- use PostgreSQL for the new service"


def test_drop_unsupported_removes_invented_codes_and_their_empty_heading() -> None:
    """A note line with a code the source never had goes, and so does its bare heading."""
    notes = "Goal:\n- ship ZX-4471\nCodes:\n- customer CUST-0000"
    assert drop_unsupported(notes, "ship our code ZX-4471") == "Goal:\n- ship ZX-4471"


def test_drop_unsupported_removes_a_line_that_answers_the_current_question() -> None:
    """A note using a word only the user's current question has answers it: it goes."""
    notes = "- the team merges twice a week\n- a pull request asks reviewers to merge a branch"
    source = "user: The team merges twice a week; reviewers merge a branch once it passes."
    focus = "In one sentence, what is a pull request?"
    assert drop_unsupported(notes, source) == notes
    assert drop_unsupported(notes, source, focus) == "- the team merges twice a week"


def test_drop_unsupported_removes_a_line_that_only_restates_the_current_question() -> None:
    """A note made only of the question's words says nothing more than it: it goes."""
    source = "John: I started kickboxing last year, and I've done some judo too. Dave: Nice!"
    notes = "- John has done martial arts has John done?\n- John does kickboxing and judo"
    focus = "What martial arts has John done? Answer with a short phrase."
    assert drop_unsupported(notes, source) == notes
    assert drop_unsupported(notes, source, focus) == "- John does kickboxing and judo"
    assert drop_unsupported("- John's locker: 42", "John's locker is 42", "John's locker?") == (
        "- John's locker: 42"
    )


def test_drop_unsupported_removes_quoted_terms_and_identifiers_the_source_never_had() -> None:
    """A term quoted in double quotes or backticks, or a snake_case identifier, that the
    source never holds is invented; one the source holds (case and spacing aside) stays."""
    source = (
        "user: The staging host is ibis-756.staging.internal; every deploy goes there first.\n"
        'assistant: I renamed `Quota_Report` to the "nightly  build" job.'
    )
    notes = (
        '- The staging server\'s host name is "staging-server"\n'
        "- The staging host is called `staging_host`\n"
        "- the staging host is hosting_vendor\n"
        "- the staging host is ibis-756.staging.internal\n"
        '- quota_report became the "Nightly build" job'
    )
    assert drop_unsupported(notes, source) == (
        "- the staging host is ibis-756.staging.internal\n"
        '- quota_report became the "Nightly build" job'
    )


def test_drop_unsupported_removes_dotted_names_the_source_never_had() -> None:
    """A host, file or module name with a dot that the source never holds is invented; one it
    holds, in any case or as part of a path, and prose abbreviations ("e.g.") stay."""
    source = (
        "user: The staging host is walrus-494.staging.internal; every deploy goes there first.\n"
        "tool: Edited src/billing/Quota_Osprey.py: three lines changed."
    )
    notes = (
        "- The staging server is located at staging.example.com\n"
        "- The staging host is Walrus-494.staging.internal, e.g. for every deploy\n"
        "- quota_osprey.py was edited (see https://docs.example.org/billing)\n"
        "- three lines changed in src/billing/quota_osprey.py."
    )
    assert drop_unsupported(notes, source) == (
        "- The staging host is Walrus-494.staging.internal, e.g. for every deploy\n"
        "- three lines changed in src/billing/quota_osprey.py."
    )


def test_drop_unsupported_keeps_lines_whose_question_words_the_source_has() -> None:
    """The question's words that the conversation also used do not condemn a line."""
    notes = "- the mock payment server uses port 26883"
    source = "assistant: I'll use port 26883 for the mock payment server."
    focus = "Which port did you pick for the mock payment server?"
    assert drop_unsupported(notes, source, focus) == notes


@pytest.mark.parametrize(
    ("text", "tokens", "reason"),
    [
        ("  ", None, "empty"),
        ("I'm sorry, I can't.", None, "refusal"),
        ("a b c d e f", 3, "not shorter"),
    ],
)
def test_rejection_says_why(text: str, tokens: int | None, reason: str) -> None:
    """Each kind of bad extraction is named."""
    found = rejection(text, tokens)
    assert found is not None
    assert reason in found
    assert rejection("- fine notes", 100) is None


# ---------------------------------------------------------------- budgets and cuts (pure)


@given(
    target=st.integers(1, 20_000),
    window=st.integers(MIN_CHUNK_TOKENS, 200_000),
    ledger=st.integers(0, 50_000),
    overhead=st.integers(0, 2_000),
)
def test_plan_sizes_leaves_room_and_respects_floors(
    target: int, window: int, ledger: int, overhead: int
) -> None:
    """Outputs stay within a quarter of the window; inputs never go under the chunk floor."""
    budget = plan_sizes(target, window, ledger, overhead)
    assert budget.input >= MIN_CHUNK_TOKENS
    assert 16 <= budget.output <= max(16, window // 4)
    assert budget.output <= budget.notes or budget.output == 16
    if budget.input > MIN_CHUNK_TOKENS:
        assert budget.input + budget.output + overhead < window


@given(st.lists(st.integers(1, 500), max_size=30), st.integers(1, 1000))
def test_plan_merge_groups_partitions_in_order_and_reduces_or_stops(
    sizes: list[int], budget: int
) -> None:
    """Groups cover every partial once, in order, within budget; fewer groups when any pair fits."""
    groups = plan_merge_groups(sizes, budget)
    assert [i for group in groups for i in group] == list(range(len(sizes)))
    for group in groups:
        assert len(group) == 1 or sum(sizes[i] for i in group) <= budget
    if any(a + b <= budget for a, b in pairwise(sizes)):
        assert len(groups) < len(sizes)
    else:
        assert len(groups) == len(sizes)


@given(st.text(min_size=1), st.integers(1, 200))
@settings(max_examples=150, deadline=None)
def test_cut_middle_fits_and_keeps_head_and_tail(text: str, max_tokens: int) -> None:
    """The result fits; a cut one is a prefix, the marker, and a suffix of the text."""
    out = cut_middle(text, max_tokens)
    assert count_text(out) <= max_tokens
    if count_text(text) <= max_tokens:
        assert out == text
    elif (
        match := re.fullmatch(r"(.*)\n\[… (\d+) tokens omitted …\]\n(.*)", out, re.S)
    ) is not None:
        assert text.startswith(match[1])
        assert text.endswith(match[3])
    else:
        assert text.startswith(out)


def test_cut_middle_marks_how_much_was_omitted() -> None:
    """A long text keeps its first and last words around the marker."""
    text = "start " + "middle " * 500 + "finish"
    out = cut_middle(text, 40)
    assert out.startswith("start middle")
    assert out.endswith("middle finish")
    assert re.search(r"\[… \d+ tokens omitted …\]", out)


@given(st.text(min_size=1), st.integers(1, 200))
@settings(max_examples=100, deadline=None)
def test_cut_tail_fits_and_keeps_the_head(text: str, max_tokens: int) -> None:
    """The result fits and starts like the text."""
    out = cut_tail(text, max_tokens)
    assert count_text(out) <= max_tokens
    head = out.split("\n[… ")[0]
    assert text.startswith(head.rstrip()) or text.rstrip().startswith(head.rstrip())


facts_strategy = st.lists(
    st.builds(
        Fact, st.sampled_from(["user", "assistant"]), st.text(min_size=1), st.integers(1, 12)
    ),
    max_size=25,
)


@given(notes=st.text(), facts=facts_strategy, target=st.integers(1, 600))
@settings(max_examples=100, deadline=None)
def test_assemble_never_exceeds_the_target(notes: str, facts: list[Fact], target: int) -> None:
    """Whatever the notes and facts, the extraction fits target_tokens."""
    assert count_text(fit(notes, facts, target).text) <= target


def test_select_facts_drops_covered_lines_first() -> None:
    """A fact whose codes the notes already hold goes before an uncovered one."""
    facts = [Fact("user", "The code is ZX-4471.", 9), Fact("user", "Port 8443 it is.", 9)]
    cost = count_text(facts[0].render()) + 1
    kept = select_facts(facts, "- code ZX-4471", cost + 1)
    assert kept == [facts[1]]


def test_select_facts_drops_the_lowest_score_then_keeps_order() -> None:
    """Under pressure the weakest fact goes; the kept ones stay in order."""
    facts = [
        Fact("user", f"Item {n} is K-{n}0{n}.", score) for n, score in [(1, 9), (2, 3), (3, 8)]
    ]
    costs = sum(count_text(f.render()) + 1 for f in facts)
    assert select_facts(facts, "", costs - 1) == [facts[0], facts[2]]


# ---------------------------------------------------------------- the engine


async def test_one_call_when_the_history_fits_and_the_facts_survive() -> None:
    """A history within the window takes one call; notes and every fact fit the target."""
    complete = Scripted(fixed(NOTES, 120, 30))
    result = await extract_history(
        conversation(), complete=complete, target_tokens=300, extractor_window=4096
    )
    assert (result.calls, result.prompt_tokens, result.completion_tokens) == (1, 120, 30)
    assert not result.incremental
    assert count_text(result.text) <= 300
    assert "- plan the release" in result.text
    for key in FACTS:
        assert key in result.text
    assert complete.max_tokens[0] <= 300


async def test_token_counts_are_estimated_when_the_upstream_gives_none() -> None:
    """Without usage figures the prompt and the answer are counted locally."""
    complete = Scripted(fixed(NOTES, None, None))
    result = await extract_history(
        conversation(), complete=complete, target_tokens=300, extractor_window=4096
    )
    assert result.prompt_tokens == count_messages(complete.prompts[0])
    assert result.completion_tokens == count_text(NOTES)


async def test_the_prompt_asks_for_structured_notes_with_the_focus() -> None:
    """The prompt carries the transcript, the headings and the user's question."""
    complete = Scripted(fixed(NOTES))
    await extract_history(
        conversation(),
        complete=complete,
        target_tokens=300,
        extractor_window=4096,
        focus="When is the release?",
    )
    text = prompt_text(complete.prompts[0])
    assert "open tasks" in text
    assert "user: For the record, our internal project code is ZX-4471." in text
    assert "When is the release?" in text
    assert PROMPT_VERSION


async def test_notes_that_answer_the_current_question_are_not_kept() -> None:
    """The extractor answering the user's question in its notes is not a note of the past."""
    notes = NOTES + "\n- a pull request asks reviewers to merge a branch"
    result = await extract_history(
        conversation(),
        complete=Scripted(fixed(notes)),
        target_tokens=300,
        extractor_window=4096,
        focus="In one sentence, what is a pull request?",
    )
    assert "plan the release" in result.text
    assert "pull request" not in result.text


async def test_incremental_extraction_keeps_the_previous_facts() -> None:
    """Only the new messages are sent, with the earlier notes; earlier facts are kept."""
    first = await extract_history(
        conversation(6), complete=Scripted(fixed(NOTES)), target_tokens=300, extractor_window=4096
    )
    new: list[Message] = [
        {"role": "user", "content": "The offsite will take place in Tallinn."},
        {"role": "assistant", "content": "Nice, noted."},
    ]
    complete = Scripted(fixed("Goal:\n- plan the offsite"))
    second = await extract_history(
        new, complete=complete, target_tokens=300, extractor_window=4096, previous=grown(first)
    )
    assert second.incremental
    sent = prompt_text(complete.prompts[0])
    assert "- plan the release" in sent
    assert "For the record" not in sent.split("Conversation since then:")[1]
    for key in [*FACTS, "Tallinn"]:
        assert key in second.text


async def test_nested_extractions_stay_within_target_and_keep_facts() -> None:
    """Five nested extractions over slices keep every planted fact within the target."""
    messages = conversation(20, filler_repeat=2)
    previous: Previous | None = None
    for i in range(5):
        result = await extract_history(
            messages[i * 8 : (i + 1) * 8],
            complete=Scripted(fixed(f"Goal:\n- pass {i}")),
            target_tokens=250,
            extractor_window=4096,
            previous=previous,
        )
        assert count_text(result.text) <= 250
        previous = grown(result)
    assert previous is not None
    for key in FACTS:
        assert key in previous.text


async def test_invented_codes_are_dropped_from_the_notes() -> None:
    """A note naming a code the history never had is removed."""
    complete = Scripted(fixed("Facts:\n- project code ZX-9999\nGoal:\n- cc the manager"))
    result = await extract_history(
        conversation(), complete=complete, target_tokens=300, extractor_window=4096
    )
    assert "ZX-9999" not in result.text
    assert "- cc the manager" in result.text


async def test_a_note_copying_a_message_gives_its_room_to_the_ledger() -> None:
    """A note line the model copied from the history is dropped from the notes; the ledger
    quotes that line once, and the model's own note stays."""
    copied = FACTS["ZX-4471"]
    complete = Scripted(
        fixed(f"Facts:\n- {copied}\n- user: {FACTS['8443']}\nGoal:\n- cc the manager")
    )
    result = await extract_history(
        conversation(), complete=complete, target_tokens=300, extractor_window=4096
    )
    assert result.notes.splitlines() == ["Goal:", "- cc the manager"]
    assert result.text.count(copied) == 1
    assert copied in [fact.text for fact in result.facts]


async def test_a_looping_answer_is_cleaned_before_use() -> None:
    """Repeated lines from the model appear once."""
    complete = Scripted(fixed("- release on 14 March\n" * 30))
    result = await extract_history(
        conversation(), complete=complete, target_tokens=300, extractor_window=4096
    )
    assert result.text.count("- release on 14 March") == 1


async def test_an_over_long_answer_is_cut_to_budget_with_a_marker() -> None:
    """Notes longer than their budget are cut visibly and the result fits."""
    words = ["public", "staging", "main", "internal", "manager", "project", "database"]
    long_notes = "\n".join(f"- {a} {b} release" for a in words for b in words)
    complete = Scripted(fixed(long_notes))
    messages = conversation(40, filler_repeat=2)
    result = await extract_history(
        messages, complete=complete, target_tokens=120, extractor_window=4096
    )
    assert count_text(result.text) <= 120
    assert "tokens cut …]" in result.text


@pytest.mark.parametrize(
    ("answer", "why"),
    [("", "empty"), ("I'm sorry, but I cannot do that.", "refusal"), ("As an AI, no.", "refusal")],
)
async def test_bad_answers_are_rejected(answer: str, why: str) -> None:
    """An empty or refusing answer raises BadExtraction saying why."""
    with pytest.raises(BadExtraction, match=why):
        await extract_history(
            conversation(),
            complete=Scripted(fixed(answer)),
            target_tokens=300,
            extractor_window=4096,
        )


async def test_notes_not_shorter_than_their_input_are_rejected() -> None:
    """Notes as long as the history they summarise are no extraction."""
    messages: list[Message] = [{"role": "user", "content": "The port is 8443."}]
    long_notes = "- the user says that the port is 8443, which is the port"
    with pytest.raises(BadExtraction, match="not shorter"):
        await extract_history(
            messages, complete=Scripted(fixed(long_notes)), target_tokens=300, extractor_window=4096
        )


async def test_no_messages_returns_the_previous_or_is_rejected() -> None:
    """Nothing new keeps the previous extraction; nothing at all is a bad extraction."""
    complete = Scripted(fixed(NOTES))
    earlier = Previous("Notes:\n- x", "- x", (Fact("user", "My code is QZ-7000.", 9),))
    kept = await extract_history(
        [], complete=complete, target_tokens=300, extractor_window=4096, previous=earlier
    )
    assert (kept.text, kept.calls, kept.incremental) == ("Notes:\n- x", 0, True)
    assert (kept.notes, kept.facts) == (earlier.notes, earlier.facts)
    with pytest.raises(BadExtraction, match="no messages"):
        await extract_history([], complete=complete, target_tokens=300, extractor_window=4096)


@pytest.mark.parametrize(("target", "window"), [(0, 4096), (100, 100)])
async def test_impossible_sizes_are_refused(target: int, window: int) -> None:
    """A zero target or a window under the chunk floor is a ValueError."""
    with pytest.raises(ValueError, match="must be at least"):
        await extract_history(
            conversation(),
            complete=Scripted(fixed(NOTES)),
            target_tokens=target,
            extractor_window=window,
        )


# ---------------------------------------------------------------- map-reduce


def short_notes(messages: Sequence[Message], _max: int) -> Completion:
    """Short notes naming which codes the prompt held (merges: one line per part)."""
    text = prompt_text(messages)
    keys = [key for key in FACTS if key in text] or ["filler"]
    return Completion("- " + ", ".join(keys), None, None, "stop")


async def test_map_reduce_when_the_history_exceeds_the_window() -> None:
    """Chunks are mapped, then merged; every prompt fits the extractor's window."""
    window = 1200
    complete = Scripted(short_notes, window=window)
    messages = conversation(30, filler_repeat=2)
    assert count_messages(messages) > window
    result = await extract_history(
        messages, complete=complete, target_tokens=300, extractor_window=window
    )
    maps = [p for p in complete.prompts if not is_merge(p)]
    assert len(maps) >= 3
    assert len(complete.merges()) >= 1
    assert result.calls == len(complete.prompts)
    assert count_text(result.text) <= 300


async def test_a_map_overflow_halves_only_that_chunk() -> None:
    """The extractor's real window is smaller than estimated: chunks split, none redone."""
    complete = Scripted(short_notes, window=900)
    messages = conversation(30, filler_repeat=2)
    result = await extract_history(
        messages, complete=complete, target_tokens=300, extractor_window=1600
    )
    maps = [prompt_text(p) for p in complete.prompts if not is_merge(p)]
    succeeded = [m for m in maps if count_text(m) + 200 < 900]
    assert len(succeeded) >= 2
    assert len(set(maps)) == len(maps)  # no prompt sent twice
    assert count_text(result.text) <= 300


async def test_a_single_call_that_overflows_falls_back_to_halves() -> None:
    """The history looked small enough for one call; the extractor disagreed: map-reduce."""
    complete = Scripted(short_notes, window=1000)
    messages = conversation(16, filler_repeat=2)
    result = await extract_history(
        messages, complete=complete, target_tokens=300, extractor_window=4096
    )
    texts = [prompt_text(p) for p in complete.prompts]
    assert len(texts) >= 3
    assert len(set(texts)) == len(texts)
    for key in FACTS:
        assert key in result.text


def test_select_facts_on_a_huge_ledger_is_bounded_and_fits() -> None:
    """Thousands of fact lines are narrowed to the best before the exact selection."""
    facts = [Fact("user", f"Ticket T-{n} goes to Maria on Friday.", n % 7 + 1) for n in range(3000)]
    kept = select_facts(facts, "", 400)
    assert sum(count_text(f.render()) + 1 for f in kept) <= 400
    assert min(f.score for f in kept) >= 6


async def test_a_map_overflow_at_the_floor_gives_up() -> None:
    """A window no chunk of the floor size fits is a BadExtraction, not a loop."""
    complete = Scripted(short_notes, window=200)
    with pytest.raises(BadExtraction, match="floor"):
        await extract_history(
            conversation(30, filler_repeat=2),
            complete=complete,
            target_tokens=300,
            extractor_window=1600,
        )


async def test_a_merge_overflow_retries_that_merge_alone_in_smaller_groups() -> None:
    """A merge that overflows is split; no map call is repeated."""

    def answer(messages: Sequence[Message], max_tokens: int) -> Completion:
        if is_merge(messages) and prompt_text(messages).count("[Part ") > 2:
            raise ContextWindowExceeded("merge too long")
        return short_notes(messages, max_tokens)

    def raising(messages: Sequence[Message], max_tokens: int) -> Completion:
        return answer(messages, max_tokens)

    complete = Scripted(raising)
    messages = conversation(40, filler_repeat=2)
    await extract_history(messages, complete=complete, target_tokens=300, extractor_window=1000)
    maps = [prompt_text(p) for p in complete.prompts if not is_merge(p)]
    assert len(set(maps)) == len(maps)
    merges = [prompt_text(p).count("[Part ") for p in complete.merges()]
    assert any(n > 2 for n in merges)
    assert any(n == 2 for n in merges)


async def test_a_non_reducing_merge_stops_and_cuts_to_budget() -> None:
    """Merges that grow the notes stop the passes; the result is cut with a marker."""

    def answer(messages: Sequence[Message], _max: int) -> Completion:
        if is_merge(messages):
            return Completion(prompt_text(messages) + "\n- more", None, None, "stop")
        words = prompt_text(messages).split("Conversation:")[1].split()
        return Completion("- " + " ".join(words[:60]), None, None, "stop")

    complete = Scripted(answer)
    messages = conversation(40, filler_repeat=2)
    result = await extract_history(
        messages, complete=complete, target_tokens=200, extractor_window=1000
    )
    maps = len(complete.prompts) - len(complete.merges())
    assert 1 <= len(complete.merges()) < maps  # one pass only: it did not reduce
    assert count_text(result.text) <= 200
    assert "tokens cut …]" in result.text


async def test_an_empty_chunk_is_skipped_but_all_empty_is_rejected() -> None:
    """A chunk with nothing worth noting adds nothing; nothing from every chunk is bad."""

    def answer(messages: Sequence[Message], max_tokens: int) -> Completion:
        if "ZX-4471" in prompt_text(messages) or is_merge(messages):
            return short_notes(messages, max_tokens)
        return Completion("", None, None, "stop")

    messages = conversation(30, filler_repeat=2)
    result = await extract_history(
        messages, complete=Scripted(answer), target_tokens=300, extractor_window=1000
    )
    assert "- ZX-4471" in result.text
    with pytest.raises(BadExtraction, match="empty"):
        await extract_history(
            messages, complete=Scripted(fixed("")), target_tokens=300, extractor_window=1000
        )


async def test_a_refusal_in_one_chunk_rejects_the_extraction() -> None:
    """One bad partial makes the whole extraction bad (it is never cached)."""

    def answer(messages: Sequence[Message], max_tokens: int) -> Completion:
        if "ZX-4471" in prompt_text(messages):
            return Completion("I'm sorry, I can't help with that.", None, None, "stop")
        return short_notes(messages, max_tokens)

    with pytest.raises(BadExtraction, match="refusal"):
        await extract_history(
            conversation(30, filler_repeat=2),
            complete=Scripted(answer),
            target_tokens=300,
            extractor_window=1000,
        )


def test_the_extraction_text_names_its_sections() -> None:
    """The layout has the notes header and the verbatim-facts header."""
    text = fit(NOTES, fact_lines(conversation()), 400).text
    assert text.startswith("Notes:\n")
    assert FACTS_HEADER in text


# ---------------------------------------------------------------- bounds and the cut rung


async def test_messages_past_the_bound_keep_only_their_facts() -> None:
    """Older messages past the extraction bound are not sent to the model; their facts stay."""
    extractor = Scripted(fixed("- the release is planned"))
    older, newer = conversation(4), conversation(12)[8:]
    result = await extract_history(
        newer, complete=extractor, target_tokens=400, extractor_window=4096, beyond_bound=older
    )
    sent = "\n".join(prompt_text(p) for p in extractor.prompts)
    assert FACTS["ZX-4471"] not in sent
    assert FACTS["ZX-4471"] in result.text
    assert "past the extraction bound" in result.text
    assert result.bounded == len(older)


def test_the_cut_rung_keeps_head_tail_and_facts_without_a_model() -> None:
    """With no model, the transcript is cut in the middle (marked) beside the quoted facts."""
    messages = conversation(10, filler_repeat=30)
    result = cut_history(messages, target_tokens=300)
    assert result.cut
    assert result.calls == 0
    assert "tokens omitted" in result.text
    assert count_text(result.text) <= 300
    assert FACTS_HEADER in result.text


def test_a_third_line_of_one_template_is_no_note() -> None:
    """A small model repeating one pattern of the conversation ("Run the tests for the X
    module") keeps two such lines; lines that only share a few words all stay."""
    notes = "\n".join(
        [
            *(
                f"- Run the tests for the {m} module, please."
                for m in ("quota", "bucket", "cursor")
            ),
            "- port 8443 is for staging",
            "- port 9000 is for production",
            "- port 9100 is for metrics",
        ]
    )
    kept = clean_output(notes).splitlines()
    assert [line for line in kept if line.startswith("- Run")] == [
        "- Run the tests for the quota module, please.",
        "- Run the tests for the bucket module, please.",
    ]
    assert len(kept) == 5


async def test_a_note_guessing_a_value_the_user_stated_is_dropped() -> None:
    """The model's notes guess a value the user stated otherwise: the guess is not in the
    extraction, the user's quoted statement is."""
    messages: list[Message] = [
        {"role": "user", "content": "The main database is called heron_signal, for queries."},
        {"role": "assistant", "content": "Noted."},
        *conversation(8)[6:],
    ]
    complete = Scripted(fixed("- The main database is called PostgreSQL.\n- cc the manager"))
    result = await extract_history(
        messages, complete=complete, target_tokens=300, extractor_window=4096
    )
    assert "PostgreSQL" not in result.text
    assert "- cc the manager" in result.text
    assert "heron_signal" in result.text


async def test_a_growth_quotes_again_a_line_an_earlier_growth_dropped() -> None:
    """Given the messages the previous extraction stands in for, a growth quotes them anew:
    a line a tight earlier growth dropped (its term listed nowhere) is back once there is
    room, where the previous ledger carried forward has lost it for good."""
    messages = conversation(6)
    tight = await extract_history(
        messages, complete=Scripted(fixed(NOTES)), target_tokens=110, extractor_window=4096
    )
    assert "Halvorsen" not in tight.text
    new: list[Message] = [
        {"role": "user", "content": "Thanks, that is all for today."},
        {"role": "assistant", "content": "Glad to help."},
    ]

    async def grow(condensed: Sequence[Message]) -> str:
        made = await extract_history(
            new,
            complete=Scripted(fixed(NOTES)),
            target_tokens=300,
            extractor_window=4096,
            previous=grown(tight),
            condensed=condensed,
        )
        return made.text

    assert "Halvorsen" not in await grow(())
    regrown = await grow(messages)
    assert FACTS["Halvorsen"] in regrown
    assert all(regrown.count(fact) == 1 for fact in FACTS.values())


async def test_a_growth_quoting_anew_keeps_the_earlier_carried_note_lines() -> None:
    """The note lines an earlier extraction carried into its ledger (no message holds them)
    stay in the ledger of a growth that quotes the condensed messages anew."""
    note = Fact("notes", "The Android build needs signing key 4471.", 3)
    made = fit(NOTES, [note], 300)
    previous = Previous(made.text, made.notes, made.facts)
    first, second = conversation(2)[:2], conversation(2)[2:]
    grown = await extract_history(
        second,
        complete=Scripted(fixed(NOTES)),
        target_tokens=300,
        extractor_window=4096,
        previous=previous,
        condensed=first,
    )
    assert "- notes: The Android build needs signing key 4471." in grown.text


async def test_the_ledger_is_built_and_assembled_off_the_event_loop(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Quoting the history and assembling the extraction run in a worker thread: a growth
    of a long conversation does not hold the loop that serves every other request."""
    threads: dict[str, int] = {}

    def recorded(name: str, function: Callable[..., Any]) -> Callable[..., Any]:
        def call(*args: Any, **kwargs: Any) -> Any:
            threads[name] = threading.get_ident()
            return function(*args, **kwargs)

        return call

    monkeypatch.setattr(Ledger, "grow", recorded("quote", Ledger.grow))
    monkeypatch.setattr(Ledger, "extraction", recorded("assemble", Ledger.extraction))
    result = await extract_history(
        conversation(), complete=Scripted(fixed(NOTES)), target_tokens=300, extractor_window=4096
    )
    assert FACTS["ZX-4471"] in result.text
    loop = threading.get_ident()
    assert set(threads) == {"quote", "assemble"}
    assert loop not in threads.values()
