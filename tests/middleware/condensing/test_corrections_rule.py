"""The supersede rule on sentences of many forms: a later statement replaces an earlier one by
its speaker, subject, value shape and change word, not by a phrasing."""

from __future__ import annotations

import pytest

from middleware.condensing.ledger.supersede import settle, value_shape
from tests.middleware.condensing.test_supersede import lines as said
from tests.middleware.condensing.test_supersede import users


@pytest.mark.parametrize(
    ("first", "later"),
    [
        (
            "We allow attachments of up to 25 MB each.",
            "Legal raised that, so attachments can be 40 MB each from today.",
        ),
        (
            "Our standup happens at 09:30 every day.",
            "Standup moved to 10:15 because of the time zone change.",
        ),
        (
            "The billing service is looked after by Priya Raman.",
            "Update: Marcus Lee owns the billing service now.",
        ),
        (
            "Send the invoices to ap@northwind.example please.",
            "Send the invoices to billing@northwind.example, not ap@northwind.example.",
        ),
        (
            "Before we stop: the next thing to do is migrate the orders_v2 table.",
            "Finished migrating orders_v2. Still to do: archive the audit_log table.",
        ),
        (
            "The launch is planned for 2025-03-14.",
            "We pushed the launch back; it is 2025-04-02 now.",
        ),
        (
            "Staging runs on host kite-14.",
            "Staging no longer runs on kite-14; it runs on wren-22.",
        ),
        (
            "Reports go out with 3 retries.",
            "We lowered the number of retries for reports to 2.",
        ),
        (
            "The nightly job runs at 02:00.",
            "We took the nightly job from 02:00 to 03:30.",
        ),
        (
            "The bucket holds 200 GB.",
            "Turns out the bucket holds 300 GB, I misremembered.",
        ),
        (
            "Port 8443 is what the proxy listens on.",
            "The proxy listens on 9443 now.",
        ),
        (
            "Then we need to reindex search_main.",
            "Reindexing search_main is out of the way. Prune old_logs next.",
        ),
    ],
)
def test_a_later_change_of_one_subject_replaces_the_earlier_statement(
    first: str, later: str
) -> None:
    """A change word and a value of the same shape in a sentence about the same thing, or
    the earlier value named as done or old: the earlier statement is replaced."""
    assert settle(users(first, later)).replaced == {0}


@pytest.mark.parametrize(
    ("first", "later"),
    [
        ("The upload limit is 500 MB.", "The database uses 800 MB of memory now."),
        ("Our team has 12 engineers.", "We now have 40 laptops in the office."),
        ("The cache holds 2 GB.", "The cache also holds 4 GB on the replica."),
        ("The primary region is eu-west-1.", "Now the backup region is us-east-2."),
        ("Reads time out after 30s.", "Writes now time out after 60s, reads after 30s."),
        ("Reads time out after 30s.", "Now reads time out after 30s and writes after 60s."),
        ("The release ships on Friday.", "Changed my mind about lunch: we meet on Tuesday."),
        ("The port is 8080 and the host is kite-14.", "Now the port is 9090."),
        ("The limit is 25 MB.", "Is the limit now 40 MB?"),
    ],
)
def test_another_subject_or_no_change_keeps_both_statements(first: str, later: str) -> None:
    """One unit said of two things, a second fact without a change word, two subjects that
    each hold a word the other lacks, an old value still named as current, a value the
    later line would lose, or a question: both statements stay."""
    assert settle(users(first, later)).replaced == set()


def test_the_user_corrects_the_assistant_but_not_the_other_way_round() -> None:
    """The user's change replaces the assistant's statement of the subject; the assistant's
    change never replaces the user's."""
    corrected = said(
        ("assistant", "I set the retry limit to 3 attempts."),
        ("user", "Make the retry limit 5 attempts instead."),
    )
    assert settle(corrected).replaced == {0}
    kept = said(
        ("user", "The retry limit is 3 attempts."),
        ("assistant", "Now the retry limit is 5 attempts."),
    )
    assert settle(kept).replaced == set()


@pytest.mark.parametrize(
    ("first", "later"),
    [
        ("Dana: The garden looks lovely, Ana!", "Dana: Hey Ravi, the garden is all green now."),
        ("Dana: Lovely garden this spring.", "Dana: Wow, the garden changed so much!"),
    ],
)
def test_a_name_spoken_to_or_opening_a_sentence_is_no_value(first: str, later: str) -> None:
    """The person addressed ("..., Ana!", "Hey Ravi, ...") and a capitalised first word after
    a speaker's label are no values a change word could replace."""
    assert settle(users(first, later)).replaced == set()


def test_a_word_on_most_lines_names_no_subject() -> None:
    """A speaker's name before every line is shared by all of them and makes no two values
    one subject."""
    chat = [
        f"Lena: I visited {city} with my cousin."
        for city in ("Porto", "Lyon", "Ghent", "Bergen", "Turku", "Split")
    ]
    lines = users(*chat, "Lena: Now we moved to Graz for good.")
    assert settle(lines).replaced == set()


def test_two_reports_of_a_tool_are_two_events() -> None:
    """A tool's line replaces nothing: two edits that each "changed" lines both stay."""
    lines = said(
        ("tool", "Edited src/app/alpha.py: 3 lines changed."),
        ("tool", "Edited src/app/beta.py: 1 line changed."),
    )
    assert settle(lines).replaced == set()


def test_a_step_named_done_is_replaced_only_when_nothing_else_is_lost() -> None:
    """ "Done with X" completes the step X; a step line naming a second value the later line
    drops stays."""
    done = users("Next up: rebuild the search_index.", "Done with search_index, all green.")
    assert settle(done).replaced == {0}
    lost = users(
        "Next up: rebuild the search_index on node-7.", "Done with search_index, all green."
    )
    assert settle(lost).replaced == set()


@pytest.mark.parametrize(
    ("value", "after", "shape"),
    [
        ("719", " MB per upload", "9 mb"),
        ("1,500", " MB", "9 mb"),
        ("30s", ".", "9s"),
        ("4410", ", not 4411", "9"),
        ("kite-7", "", "a-9"),
        ("db-gateway-12", "", "a-9"),
        ("10:15", "", "9:9"),
        ("2025-03-14", "", "9-9"),
        ("Ingrid Halvorsen", "", "A"),
        ("src/billing/x.py", "", "a/a.a"),
        ("ap@northwind.example", "", "a@a.a"),
    ],
)
def test_a_value_shape_is_its_kind_of_characters_and_unit(
    value: str, after: str, shape: str
) -> None:
    """Numbers carry the unit after them, hosts and dates their separators, names are one
    kind whatever their length."""
    assert value_shape(value, after) == shape
