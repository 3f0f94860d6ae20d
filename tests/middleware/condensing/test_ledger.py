"""The fact ledger's budget policy: nothing is dropped silently, the merged line says what went."""

from __future__ import annotations

import re

from hypothesis import given, settings
from hypothesis import strategies as st

from kernel.tokens import count_text
from middleware.condensing.extraction import carried_notes
from middleware.condensing.ledger import (
    FACTS_HEADER,
    FactLine,
    assemble,
    key_spans,
    key_tokens,
    merged_count,
    merged_line,
    parse_extraction,
    term_weight,
)
from tests.reliability import examples

MERGED = re.compile(r"^- merged\((\d+) facts\): ", re.MULTILINE)


def facts_about(n: int) -> list[FactLine]:
    """`n` distinct user facts, each hanging on one code."""
    return [FactLine("user", f"The code for box {i} is QZ-{7000 + i}.", 9) for i in range(n)]


def test_key_spans_keep_the_case_and_skip_case_blind_repeats() -> None:
    """Codes, identifiers and names come back as written, each once."""
    spans = key_spans("Ask Ingrid Halvorsen about ZX-4471, then zx-4471 and orca_ledger.")
    assert spans == ("ZX-4471", "orca_ledger", "Ingrid Halvorsen")


def test_term_weight_ranks_codes_over_bare_small_numbers() -> None:
    """A letters-and-digits code identifies more than a name or a long number, then a bare one."""
    assert term_weight("ZX-4471") > term_weight("orca_ledger") > term_weight("53")
    assert term_weight("8443") == term_weight("Ingrid Halvorsen") == 2


def test_facts_that_do_not_fit_are_merged_into_one_visible_line() -> None:
    """Under pressure dropped lines leave their codes on a merged line that counts them."""
    facts = facts_about(30)
    text = assemble("", facts, 260)
    assert count_text(text) <= 260
    match = MERGED.search(text)
    assert match is not None
    kept = sum(f.render() in text for f in facts)
    assert int(match.group(1)) == len(facts) - kept
    for i in range(30):
        assert f"QZ-{7000 + i}" in text


def test_a_merged_line_parses_back_and_keeps_its_count_when_merged_again() -> None:
    """The next growth reads the merged line as one fact standing for N facts, and N adds up."""
    first = assemble("", facts_about(30), 260)
    _, parsed = parse_extraction(first)
    merged = [f for f in parsed if f.role.startswith("merged")]
    assert len(merged) == 1
    before = merged_count(merged[0])
    second = assemble("", [*parsed, *facts_about(40)[30:]], 260)
    match = MERGED.search(second)
    assert match is not None
    kept = sum(f.render() in second for f in parsed if not f.role.startswith("merged"))
    assert int(match.group(1)) >= before + (len(parsed) - 1 - kept)


def test_when_even_key_terms_do_not_fit_the_line_says_how_many_were_left_out() -> None:
    """A budget too small for every key term lists fewer and counts the rest, visibly."""
    text = assemble("", facts_about(200), 120)
    assert "more key terms left out: no room" in text
    assert count_text(text) <= 120


def test_earlier_note_lines_the_new_notes_lost_are_carried_as_quoted_lines() -> None:
    """An earlier note naming a code the new notes do not hold comes back as a notes line."""
    earlier = "- the code for item 3 is DX-4211\n- the user likes tea\n- port 8443 is open"
    carried = carried_notes(earlier, "- port 8443 is open")
    assert [f.render() for f in carried] == ["- notes: the code for item 3 is DX-4211"]


fact_text = st.builds(
    "The {} for {} is {}.".format,
    st.sampled_from(["code", "port", "owner", "date"]),
    st.sampled_from(["box", "Ingrid Halvorsen", "orca_ledger", "staging"]),
    st.from_regex(r"[A-Z]{2}-[0-9]{3,5}|[0-9]{2,6}", fullmatch=True),
)
facts_strategy = st.lists(
    st.builds(
        FactLine, st.sampled_from(["user", "tool", "assistant"]), fact_text, st.integers(1, 12)
    ),
    max_size=40,
)


@given(notes=st.sampled_from(["", "- the plan is set", "- code AB-123 is live"]),
       facts=facts_strategy, target=st.integers(40, 500))  # fmt: skip
@settings(max_examples=examples(40, 300), deadline=None)
def test_no_fact_is_dropped_silently(notes: str, facts: list[FactLine], target: int) -> None:
    """Each fact's key terms are in the output, or the output says visibly that some were left
    out; the merged line's count covers every line not kept; the output fits the target."""
    text = assemble(notes, facts, target)
    assert count_text(text) <= target
    visible_cut = "left out: no room" in text or "tokens cut …]" in text
    out_keys = key_tokens(text)
    for fact in facts:
        assert key_tokens(fact.text) <= out_keys or visible_cut
    match = MERGED.search(text)
    dropped = [f for f in facts if f.render() not in text]
    if match is not None:
        assert int(match.group(1)) >= len({f.text for f in dropped}) or visible_cut
    else:
        assert not dropped or visible_cut
    assert FACTS_HEADER in text or not facts or visible_cut


def test_a_lone_name_is_a_key_term_and_survives_a_merge() -> None:
    """A fact that hangs on one capitalised name (a city) keeps it: as a key span, and on the
    merged line when its quoted line does not fit."""
    assert key_spans("The team offsite will take place in Tallinn.") == ("Tallinn",)
    assert key_spans("Ask Ingrid Halvorsen in Oslo.") == ("Ingrid Halvorsen", "Oslo")
    facts = [FactLine("user", "The team offsite will take place in Tallinn.", 2)]
    line = merged_line(facts, [], "", None)
    assert line is not None
    assert "`Tallinn`" in line[0].text
