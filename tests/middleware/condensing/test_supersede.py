"""Corrections in the ledger: the latest value of a subject is quoted, the replaced one is not."""

from __future__ import annotations

import pytest

from kernel.types import Message
from middleware.condensing.ledger.carry import carried
from middleware.condensing.ledger.fit import fit
from middleware.condensing.ledger.notes import drop_contradicted
from middleware.condensing.ledger.records import LISTING_SCORE, Fact
from middleware.condensing.ledger.select import fact_lines
from middleware.condensing.ledger.supersede import (
    Line,
    contradicts,
    settle,
    settled,
    stated_subject,
    subjects,
)
from middleware.condensing.ledger.terms import key_spans


def lines(*said: tuple[str, str]) -> list[Line]:
    """Ledger lines from (role, text) pairs, with their key terms."""
    return [Line(role, text, key_spans(text)) for role, text in said]


def users(*texts: str) -> list[Line]:
    """The user's lines."""
    return lines(*(("user", text) for text in texts))


@pytest.mark.parametrize(
    ("first", "later"),
    [
        ("The maximum upload size is 550 MB.", "Correction: the maximum upload size is 380 MB."),
        (
            "The API gateway listens on port 4410.",
            "Correction: the API gateway listens on port 5678, not 4410. I misread the chart.",
        ),
        (
            "The on-call engineer this week is Ingrid Halvorsen.",
            "Update: Ingrid Halvorsen swapped shifts, so the on-call engineer this week is now "
            "Tomasz Novak.",
        ),
        (
            "Let's pause. When we come back to it, the next step is to bisect test_otter_ibis.",
            "That step is done: we did test_otter_ibis. The next step now is to rotate the key "
            "of lynx-gateway-431.",
        ),
        ("Actually, ignore that: the deadline is Friday.", "The deadline is now Monday."),
        (
            "Kenji Kowalczyk is on call this week if anything breaks.",
            "Change of plan: Amara Abernathy took over the on-call week from Kenji Kowalczyk.",
        ),
    ],
)
def test_a_correction_replaces_the_earlier_statement_of_its_subject(first: str, later: str) -> None:
    """A later user statement of the same subject that reads as a correction replaces it."""
    assert settle(users(first, later)).replaced == {0}


@pytest.mark.parametrize(
    ("first", "later"),
    [
        ("The timeout is 30s.", "The timeout is 60s for writes."),
        ("The staging host is alpha-101.", "Correction: the production host is beta-202."),
        ("The maximum upload size is 550 MB.", "Is the maximum upload size now 380 MB?"),
        (
            "The API gateway listens on port 4410 and the cache on 6380.",
            "Correction: the API gateway listens on port 5678.",
        ),
    ],
)
def test_what_cannot_be_told_a_correction_is_kept(first: str, later: str) -> None:
    """No correction word, another subject, a question, or a value the later line would lose:
    both statements stay."""
    assert settle(users(first, later)).replaced == set()


@pytest.mark.parametrize(
    ("first", "later"),
    [
        (
            "I'll use port 24379 for the mock payment server.",
            "Correction: the API gateway listens on port 2362, not 6169. I misread the chart.",
        ),
        ("The backup runs at 01:00.", "Correction: the backup moved from 02:00 to 03:30."),
    ],
)
def test_a_correction_naming_its_old_value_replaces_only_that_value(first: str, later: str) -> None:
    """A change that names the value it replaces ("not 6169", "from 02:00") leaves a line
    without that value alone, though it shares a word and a kind of value with it."""
    assert settle(lines(("assistant", first), ("user", later))).replaced == set()
    assert settle(users(first, later)).replaced == set()


def test_the_subject_is_the_clause_before_the_value_up_to_its_verb() -> None:
    """The words "the maximum upload size" are the subject of 380 in a correction's first clause."""
    found = subjects("Correction: the maximum upload size is 380 MB.", ("380",))
    assert found == [(frozenset({"maximum", "upload", "size"}), "380")]


def test_an_assistant_echo_ranks_last_and_goes_with_a_replaced_value() -> None:
    """The assistant repeating a user's value is an echo; repeating a replaced one, it goes."""
    found = settle(
        lines(
            ("user", "The maximum upload size is 550 MB."),
            ("assistant", "Noted: uploads up to 550 MB."),
            ("user", "The project code is PRJ-4410."),
            ("assistant", "Noted: PRJ-4410."),
            ("user", "Correction: the maximum upload size is 380 MB, not 550 MB."),
        )
    )
    assert found.replaced == {0, 1}
    assert found.echoes == {3}


def test_the_ledger_quotes_the_correction_and_counts_the_replaced_line() -> None:
    """Assembled, the correction is quoted and the replaced statement is not; the merged line
    counts it, and the next growth carries the records without it; the correction names the
    statement it supersedes."""
    messages: list[Message] = [
        {"role": "user", "content": "The maximum upload size is 550 MB."},
        {"role": "assistant", "content": "Noted."},
        {"role": "user", "content": "Our project code is PRJ-4410."},
        {"role": "user", "content": "Correction: the maximum upload size is 380 MB, not 550."},
    ]
    facts = fact_lines(messages)
    made = fit("", facts, 400)
    text = made.text
    assert "- user: Correction: the maximum upload size is 380 MB, not 550." in text
    assert "- user: The maximum upload size is 550 MB." not in text
    assert "- merged(1 facts): (no key terms)" in text
    carried_on = carried(made.facts)
    assert [fact.text for fact in carried_on if fact.role == "user"] == [
        "Our project code is PRJ-4410.",
        "Correction: the maximum upload size is 380 MB, not 550.",
    ]
    assert carried_on[1].supersedes == "The maximum upload size is 550 MB."


def test_an_echo_goes_before_any_statement_under_pressure() -> None:
    """At every target the assistant's repeat of the user's code is quoted only if the tool's
    line (scored lower than the echo was) is quoted too."""
    user = Fact("user", "Our project code is PRJ-4410.", 9)
    echo = Fact("assistant", "Noted, the project code is PRJ-4410.", 5)
    tool = Fact("tool", "Edited src/a/b.py: two lines changed.", 4)
    assert settled([user, echo, tool])[0][1].score == LISTING_SCORE
    seen = set()
    for target in range(20, 120, 2):
        text = fit("", [user, echo, tool], target).text
        quoted = tuple(fact.render() in text for fact in (user, echo, tool))
        assert not (quoted[1] and not quoted[2])
        seen.add(quoted)
    assert (True, False, True) in seen


def test_a_note_guessing_what_the_user_stated_is_dropped() -> None:
    """A note line stating a subject the user stated, without the user's value, goes (a small
    model's guess); a note that agrees, or states something else, stays."""
    facts = fact_lines(
        [
            {"role": "user", "content": "For the record, our internal project code is PRJ-5499."},
            {"role": "user", "content": "The main database is called heron_signal."},
        ]
    )
    notes = "\n".join(
        [
            "- Our internal project code is called ledger.",
            "- Our internal project code is PRJ-5499.",
            "- The main database is called PostgreSQL.",
            "- heron_signal",
            "- The release is on Friday.",
            "- What is the main database called?",
        ]
    )
    assert drop_contradicted(notes, facts).splitlines() == [
        "- Our internal project code is PRJ-5499.",
        "- heron_signal",
        "- The release is on Friday.",
        "- What is the main database called?",
    ]


def test_a_note_of_a_corrected_value_stays_and_one_of_the_replaced_value_goes() -> None:
    """Only the user's latest statement of a subject judges the notes: the corrected value
    agrees with it, the replaced one contradicts it."""
    facts = fact_lines(
        [
            {"role": "user", "content": "The maximum upload size is 550 MB."},
            {"role": "user", "content": "Correction: the maximum upload size is 380 MB, not 550 MB."},
        ]
    )  # fmt: skip
    notes = "- The maximum upload size is 380 MB.\n- The maximum upload size is 550 MB."
    assert drop_contradicted(notes, facts) == "- The maximum upload size is 380 MB."


def test_only_the_users_statements_judge_the_notes() -> None:
    """A tool's or the assistant's statement of a subject never removes a note, nor does a
    note without a verb, nor anything when the user stated nothing."""
    said = [
        Line("assistant", "The mock port is 24642.", ("24642",)),
        Line("tool", "The pool size is 8751.", ("8751",)),
    ]
    assert not contradicts("- The mock port is 9000.", said)
    assert not contradicts("- The pool size is 10.", said)
    assert stated_subject("- mock port 9000") == frozenset()
    assert drop_contradicted("- The port is 1.", []) == "- The port is 1."


def test_one_value_corrected_among_many_in_a_sentence_replaces_the_listing() -> None:
    """A sentence listing many values is replaced by a correction naming one of them old in
    its clause (the others said again), not by the same listing said again."""
    listing = "The ports are: api 4410, cache 6379, db 5432, search 9200, queue 5672, mail 2525."
    again = (
        "The ports are: api 4410, cache 6379, db 5432, search 9200, queue 5672, mail 2525 again."
    )
    fixed = (
        "Correction: the ports are api 4410, cache 6379, db 5433 (not 5432), search 9200, "
        "queue 5672, mail 2525."
    )
    assert settle(users(listing, again)).replaced == frozenset()
    assert settle(users(listing, fixed)).corrections == ((0, 1),)
