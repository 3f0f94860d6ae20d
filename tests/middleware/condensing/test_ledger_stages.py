"""The ledger's stages one by one, its records, and its one entry point."""

from __future__ import annotations

from dataclasses import replace

from kernel.records import HistoryEntry
from kernel.types import Message
from middleware.condensing.ledger import Ledger, Previous
from middleware.condensing.ledger.carry import carried, growth_facts, regained_settings
from middleware.condensing.ledger.fit import fit, merged_line
from middleware.condensing.ledger.records import (
    FOCUS_BONUS,
    LEFT_OUT,
    LISTING_SCORE,
    MERGED,
    REGAINED_SETTING_SCORE,
    Fact,
    from_stored,
    merged_fact,
    to_stored,
)
from middleware.condensing.ledger.render import FACTS_HEADER, layout
from middleware.condensing.ledger.select import fact_lines
from middleware.condensing.ledger.supersede import settled
from middleware.condensing.prompt import NOTES_HEADER

READ: list[Message] = [
    {"role": "user", "content": "Please check the channel settings for me."},
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "call_1",
                "type": "function",
                "function": {"name": "read_file", "arguments": '{"path": "config/a.toml"}'},
            }
        ],
    },
    {
        "role": "tool",
        "tool_call_id": "call_1",
        "content": "pool_size = 4200\nshard_count = 735\nqueue_depth = 136",
    },
    {"role": "user", "content": "Our customer number with the vendor is CUST-89712."},
]


def test_a_record_round_trips_through_its_stored_form() -> None:
    """Every field of a record, a merged line's terms among them, survives the store's form."""
    facts = [
        Fact("user", "Our code is ZX-4471.", 9, focused=True, index=4, rule="said"),
        Fact("tool", "Edited src/a.py.", 4, asked="Please fix the totals.", source="edit_file"),
        Fact("user", "Correction: it is 380 MB.", 9, supersedes="It is 550 MB."),
        merged_fact(7, ("ZX-1", "limit = 3"), left_out=2),
    ]
    assert [from_stored(to_stored(fact)) for fact in facts] == facts


def test_a_records_kind_names_what_line_it_is() -> None:
    """The kind is the speaker, or listing, settings or merged, whatever the role's details."""
    kinds = [
        Fact("tool(read_file)", "x 1", 3).kind,
        Fact("tool listing", "a.py:1: x", 1).kind,
        Fact("tool settings", "a = 1", 5).kind,
        Fact("notes listing", "a.py:1: x", 1).kind,
        merged_fact(3, ("x",)).kind,
        Fact("assistant", "x 1", 3).kind,
    ]
    assert kinds == ["tool", "listing", "settings", "listing", MERGED, "assistant"]


def test_select_names_each_records_message_call_and_rule() -> None:
    """A quoted line records the request index of its message, the call that read a tool's
    result, and the rule that chose it."""
    facts = fact_lines(READ, positions=[3, 4, 5, 7])
    (settings,) = [fact for fact in facts if fact.kind == "settings"]
    (number,) = [fact for fact in facts if "CUST-89712" in fact.text]
    assert (settings.index, settings.source, settings.rule) == (
        5,
        "read_file config/a.toml",
        "settings",
    )
    assert (number.index, number.source, number.rule) == (7, "", "said")
    assert [fact.index for fact in fact_lines(READ)] == [2, 3]


def test_supersede_names_the_statement_a_correction_replaced() -> None:
    """The correction is live and says what it supersedes; the replaced line is not live."""
    old = Fact("user", "The maximum upload size is 550 MB.", 9)
    new = Fact("user", "Correction: the maximum upload size is 380 MB.", 9)
    every, live = settled([old, new])
    assert live == [replace(new, supersedes=old.text)]
    assert every == [old, replace(new, supersedes=old.text)]


def test_fit_returns_the_records_it_rendered_with_the_merged_one() -> None:
    """The rendered text is the layout of the records fit returns, the merged line last,
    counting every record it does not quote."""
    facts = [Fact("user", f"The code for box {i} is QZ-{7000 + i}.", 9) for i in range(30)]
    made = fit("- a note", facts, 260)
    assert made.text == layout("- a note", made.facts)
    assert made.notes == "- a note"
    merged = made.facts[-1]
    assert merged.merged
    assert merged.count == len(facts) - (len(made.facts) - 1)
    assert all(term in merged.text for term in merged.terms)


def test_the_merged_line_records_its_terms_and_what_it_left_out() -> None:
    """With no room for every term the merged record keeps the terms it lists and the count
    of the others, and its text says both."""
    facts = [Fact("user", f"Our code is QZ-{7000 + i}.", 9) for i in range(40)]
    found = merged_line(facts, [], "", 60)
    assert found is not None
    merged = found[0]
    assert merged.left_out > 0
    assert merged.count == 40
    assert len(merged.terms) + merged.left_out == 40
    assert LEFT_OUT.format(merged.left_out) in merged.text


def test_render_lays_out_the_notes_then_the_records() -> None:
    """The text is the notes section, then one line per record under the facts header."""
    facts = [Fact("user", "Our code is ZX-4471.", 9), merged_fact(2, ("8443",))]
    assert layout("- a note", facts) == (
        f"{NOTES_HEADER}\n- a note\n\n{FACTS_HEADER}\n- user: Our code is ZX-4471.\n"
        "- merged(2 facts): `8443`"
    )
    assert layout("", []) == ""


def test_carry_scores_each_record_anew_for_the_question() -> None:
    """A carried record ranks for this growth's question, its request's words counting."""
    line = Fact("tool", "Edited src/billing/totals.py: rounding now half-up.", 4)
    request = "Please fix the rounding bug in the invoice totals."
    quoted = replace(line, asked=request)
    (plain,) = carried([quoted])
    (asked,) = carried([quoted], "Which file fixed the invoice bug?")
    assert asked.score == plain.score + FOCUS_BONUS
    assert (asked.asked, asked.focused) == (request, True)


def test_carry_reads_records_as_stored_never_their_text() -> None:
    """A user's line that bears no fact stays the user's line (parsed back from the text, it
    read as the request of the line after it), and a merged record keeps its own count."""
    odd = Fact("user", "can you look at it please", 1)
    tool = Fact("tool", "Edited src/a.py: two lines.", 4)
    merged = merged_fact(5, ("ZX-1",))
    again = carried([odd, tool, merged])
    assert [(f.role, f.text, f.asked) for f in again] == [
        ("user", odd.text, ""),
        ("tool", tool.text, ""),
        (merged.role, merged.text, ""),
    ]
    assert again[2].count == 5


def test_carry_demotes_templates_again() -> None:
    """Two carried lines of one shape, differing in their numbers, rank as a listing's."""
    again = carried([Fact("tool", "16 passed in 5s", 5), Fact("tool", "17 passed in 6s", 5)])
    assert [fact.score for fact in again] == [LISTING_SCORE, LISTING_SCORE]
    assert {fact.rule for fact in again} == {"template"}


def test_regained_settings_keep_the_rest_of_the_merged_record() -> None:
    """The merged record's settings become a settings line; its other terms, its left-out
    count and the facts it still stands for stay on a merged record."""
    merged = merged_fact(6, ("ZX-1", "a = 1", "b = 2", "Tallinn"), left_out=3, score=2)
    settings, rest = regained_settings(merged)
    assert (settings.text, settings.score) == ("a = 1; b = 2", REGAINED_SETTING_SCORE)
    assert rest == merged_fact(5, ("ZX-1", "Tallinn"), left_out=3, score=2)


def test_a_growth_without_the_condensed_messages_carries_the_previous_records() -> None:
    """Without the condensed messages a growth's records are the previous ones, then the
    new messages'; with them, those are quoted anew beside the previous carried notes."""
    earlier = [Fact("user", "Our code is ZX-4471.", 9), Fact("notes", "Key KEY-9 is set.", 3)]
    new: list[Message] = [{"role": "user", "content": "The port is 8443."}]
    assert [f.text for f in growth_facts(earlier, (), new)] == [
        "Our code is ZX-4471.",
        "Key KEY-9 is set.",
        "The port is 8443.",
    ]
    condensed: list[Message] = [{"role": "user", "content": "Our code is QX-1."}]
    assert [f.text for f in growth_facts(earlier, condensed, new)] == [
        "Our code is QX-1.",
        "The port is 8443.",
        "Key KEY-9 is set.",
    ]


def test_the_entry_point_grows_from_a_stored_entry() -> None:
    """A stored entry's records, read back (``Previous.of``), are what the next growth
    carries; its notes are the earlier notes."""
    made = Ledger.grow(None, (), READ).render("- a note", 400)
    entry = HistoryEntry(
        tenant="t",
        conversation_id="c",
        model_id="m",
        historical_end_index=4,
        message_count=5,
        extraction=made.text,
        chain="ab",
        prompt_version="x",
        tokens_before=10,
        tokens_after=5,
        created_at=1.0,
        notes=made.notes,
        facts=Previous.stored(made.facts),
    )
    previous = Previous.of(entry)
    assert previous == Previous(made.text, made.notes, made.facts)
    grown = Ledger.grow(previous, (), [{"role": "user", "content": "The port is 8443."}])
    assert grown.earlier == "- a note"
    assert [f.text for f in grown.facts] == [
        *(f.text for f in carried(made.facts)),
        "The port is 8443.",
    ]


def test_the_entry_point_carries_earlier_note_lines_the_new_notes_lost() -> None:
    """An extraction's earlier note line that the new notes no longer hold comes back as a
    quoted ``notes`` record, and a note copying a quoted line is dropped from the notes."""
    previous = Previous("", "- the signing key is KEY-9071", ())
    ledger = Ledger.grow(previous, (), READ)
    made = ledger.extraction(
        "- Our customer number with the vendor is CUST-89712.\n- the user checks settings",
        source="the user checks settings",
        focus=None,
        lead="",
        notes_tokens=200,
        target_tokens=400,
    )
    assert made.notes == "- the user checks settings"
    assert [f.text for f in made.facts if f.kind == "notes"] == ["the signing key is KEY-9071"]
