"""The fact ledger's budget policy: nothing is dropped silently, the merged line says what went."""

from __future__ import annotations

import re
from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st

from kernel.tokens import count_text
from kernel.types import Message
from middleware.condensing.ledger.carry import carried
from middleware.condensing.ledger.fit import MERGED_SHARE, fit, merged_line
from middleware.condensing.ledger.notes import carried_notes, copied_rows_demoted, drop_copied
from middleware.condensing.ledger.rank import confirmation_score, select_facts
from middleware.condensing.ledger.records import (
    CONFIRMATION_SCORE,
    FOCUS_BONUS,
    LISTING,
    LISTING_SCORE,
    NOTES_SCORE,
    REGAINED_SETTING_SCORE,
    SETTING_SCORE,
    SETTINGS,
    USER_BONUS,
    Fact,
    merged_fact,
    settles,
)
from middleware.condensing.ledger.render import FACTS_HEADER, layout
from middleware.condensing.ledger.select import (
    MAX_LINE_CHARS,
    call_sources,
    confirms,
    fact_lines,
    setting_pairs,
)
from middleware.condensing.ledger.terms import fact_signal, key_spans, key_tokens, term_weight
from middleware.condensing.prompt import focus_words_of
from tests.reliability import examples

MERGED = re.compile(r"^- merged\((\d+) facts\): ", re.MULTILINE)


def facts_about(n: int) -> list[Fact]:
    """`n` distinct user facts, each hanging on one code."""
    return [Fact("user", f"The code for box {i} is QZ-{7000 + i}.", 9) for i in range(n)]


def test_key_spans_keep_the_case_and_skip_case_blind_repeats() -> None:
    """Codes, identifiers and names come back as written, each once."""
    spans = key_spans("Ask Ingrid Halvorsen about ZX-4471, then zx-4471 and orca_ledger.")
    assert spans == ("ZX-4471", "orca_ledger", "Ingrid Halvorsen")


def test_a_name_no_sentence_start_explains_is_a_key_term_wherever_it_stands() -> None:
    """A word with a capital inside (MongoDB, GitHub) is a name even starting a sentence; an
    ordinary capitalised first word, or a word in capitals (a log's PASSED), is not."""
    assert key_spans("Let's use MongoDB and drop PostgreSQL.") == ("MongoDB", "PostgreSQL")
    assert key_spans("GitHub, final answer. Agreed.") == ("GitHub",)
    assert key_spans("Sounds good. OK, the test PASSED.") == ()
    assert fact_signal("Let's use MongoDB and drop PostgreSQL.") == 2


def test_a_capital_after_a_colon_or_a_line_break_starts_a_clause_and_is_no_name() -> None:
    """A speaker's first word ("Dave: Thanks, Calvin!"), a label's clause and a new line's
    first word are capitalised by where they stand, as after a full stop; a name inside
    the clause still counts."""
    assert key_spans("Dave: Thanks, Calvin! Haven't seen Boston yet.") == ("Calvin", "Boston")
    assert key_spans("Note: Remember the lease.\nSounds good to Amara.") == ("Amara",)
    assert key_spans("Sounds good.  Thanks, Amara.") == ("Amara",)
    assert fact_signal("Calvin: Woohoo, that's wild!") == 0


def test_a_run_of_capitals_where_a_clause_starts_is_no_name_of_several_words() -> None:
    """Capitalised words one after the other are read by the same rule as a lone one: a run
    whose first word starts a line, or follows a full stop and two spaces, is no name."""
    assert key_spans("Sounds good.  Thanks Amara.") == ("Amara",)
    assert key_spans("Hi\nThanks Dave, see you Monday.") == ("Dave", "Monday")
    assert key_spans("Booked it.  Great Barrier Reef in May.") == ("Barrier Reef", "May")


def test_term_weight_ranks_codes_over_bare_small_numbers() -> None:
    """A letters-and-digits code identifies more than a name or a long number, then a bare one."""
    assert term_weight("ZX-4471") > term_weight("orca_ledger") > term_weight("53")
    assert term_weight("8443") == term_weight("Ingrid Halvorsen") == 2


def test_facts_that_do_not_fit_are_merged_into_one_visible_line() -> None:
    """Under pressure dropped lines leave their codes on a merged line that counts them; the
    codes it cannot list it counts, and it never takes more than its share of the room from
    the quoted sentences."""
    facts = facts_about(30)
    for target in (260, 500):
        text = fit("", facts, target).text
        assert count_text(text) <= target
        match = MERGED.search(text)
        assert match is not None
        kept = sum(f.render() in text for f in facts)
        assert int(match.group(1)) == len(facts) - kept
        listed = sum(f"QZ-{7000 + i}" in text for i in range(30))
        assert listed == 30 or "more key terms left out: no room" in text
        quoted = sum(count_text(f.render()) + 1 for f in facts if f.render() in text)
        assert quoted >= (1 - MERGED_SHARE) * target - 40
    roomy = fit("", facts, 500).text
    assert all(f"QZ-{7000 + i}" in roomy for i in range(30))


def test_a_merged_line_is_carried_and_keeps_its_count_when_merged_again() -> None:
    """The next growth reads the merged record as one fact standing for N facts, and N adds
    up."""
    carried_on = carried(fit("", facts_about(30), 260).facts)
    merged = [f for f in carried_on if f.role.startswith("merged")]
    assert len(merged) == 1
    before = merged[0].count
    second = fit("", [*carried_on, *facts_about(40)[30:]], 260).text
    match = MERGED.search(second)
    assert match is not None
    kept = sum(f.render() in second for f in carried_on if not f.role.startswith("merged"))
    assert int(match.group(1)) >= before + (len(carried_on) - 1 - kept)


def test_an_earlier_merged_line_is_folded_into_the_new_one_never_quoted_beside_it() -> None:
    """After nested growths there is one merged line, holding the earlier one's terms."""
    carried_on = carried(fit("", facts_about(30), 260).facts)
    earlier = next(f for f in carried_on if f.role.startswith("merged"))
    second = fit("", [*carried_on, *facts_about(34)[30:]], 400).text
    assert len(MERGED.findall(second)) == 1
    assert earlier.render() not in second
    terms = re.findall(r"`([^`]+)`", earlier.text)
    assert terms
    assert all(term in second for term in terms)


def test_an_earlier_merged_lines_terms_take_no_room_from_quoted_statements() -> None:
    """Statements that fit are quoted; an earlier merged line's terms get what is left."""
    earlier = merged_fact(60, tuple(f"OLD-{100 + i}" for i in range(60)), score=2)
    facts = facts_about(8)
    text = fit("", [earlier, *facts], count_text(layout("", facts)) + 40).text
    assert all(fact.render() in text for fact in facts)
    assert MERGED.search(text) is not None


def test_an_earlier_merged_lines_terms_take_the_room_of_a_listings_rows() -> None:
    """A setting an earlier growth could only list on the merged line is listed again before
    any listing's row is quoted; with room for both, the rows stay."""
    settings = tuple(f"limit_{i} = {5000 + i}" for i in range(8))
    earlier = merged_fact(30, settings, score=2)
    rows = [
        Fact(f"tool {LISTING}", f"tests/test_{n}.py::test_{n}_split PASSED", LISTING_SCORE)
        for n in ("cart", "box", "tag", "lid", "pan", "cup")
    ]
    facts = facts_about(3)
    tight = count_text(layout("", [*facts, *rows])) + 8
    text = fit("", [earlier, *facts, *rows], tight).text
    assert all(fact.render() in text for fact in facts)
    assert "`limit_0 = 5000`" in text
    assert not all(row.render() in text for row in rows)
    roomy = fit("", [earlier, *facts, *rows], tight + 200).text
    assert all(row.render() in roomy for row in rows)
    assert "`limit_7 = 5007`" in roomy


def test_when_even_key_terms_do_not_fit_the_line_says_how_many_were_left_out() -> None:
    """A budget too small for every key term lists fewer and counts the rest, visibly."""
    text = fit("", facts_about(200), 120).text
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
    st.builds(Fact, st.sampled_from(["user", "tool", "assistant"]), fact_text, st.integers(1, 12)),
    max_size=40,
)


@given(notes=st.sampled_from(["", "- the plan is set", "- code AB-123 is live"]),
       facts=facts_strategy, target=st.integers(40, 500))  # fmt: skip
@settings(max_examples=examples(40, 300), deadline=None)
def test_no_fact_is_dropped_silently(notes: str, facts: list[Fact], target: int) -> None:
    """Each fact's key terms are in the output, or the output says visibly that some were left
    out; the merged line's count covers every line not kept; the output fits the target."""
    text = fit(notes, facts, target).text
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
    facts = [Fact("user", "The team offsite will take place in Tallinn.", 2)]
    line = merged_line(facts, [], "", None)
    assert line is not None
    assert "`Tallinn`" in line[0].text


SEARCH_HITS = "\n".join(
    f"src/{a}/{b}.py:{10 + i}:    {b}_merge(self, {a})"
    for i, (a, b) in enumerate(
        [("quota", "cursor"), ("ledger", "bucket"), ("anchor", "invoice"), ("parcel", "lantern")]
    )
)


def test_a_tool_result_of_one_shaped_lines_is_a_listing_quoted_last() -> None:
    """Search hits are quoted as `tool listing` with the lowest score, and keep that when
    an extraction's records are carried."""
    facts = fact_lines([{"role": "tool", "content": SEARCH_HITS}])
    assert {fact.role for fact in facts} == {f"tool {LISTING}"}
    assert {fact.score for fact in facts} == {LISTING_SCORE}
    carried_on = carried(fit("", facts, 400).facts)
    assert [fact.score for fact in carried_on] == [LISTING_SCORE] * len(facts)


def test_a_tool_result_in_prose_is_no_listing() -> None:
    """One edit's result is a tool fact, ranked above the assistant's and below the user's."""
    (tool,) = fact_lines(
        [{"role": "tool", "content": "Edited src/billing/session_ocelot.py: three lines changed."}]
    )
    (user,) = fact_lines([{"role": "user", "content": "Our customer number is CUST-89712."}])
    (assistant,) = fact_lines([{"role": "assistant", "content": "Use qa.jackal321@example.test."}])
    assert tool.role == "tool"
    assert user.score > tool.score > LISTING_SCORE
    assert "src/billing/session_ocelot.py" in key_spans(tool.text)
    assert assistant.score > LISTING_SCORE


def test_lines_that_differ_only_in_numbers_are_templates_except_the_users() -> None:
    """`16 passed in 5s` twice is a template (lowest score); two user lines of one shape stay
    (a repeated shape there may be a correction)."""
    messages = [
        {"role": "tool", "content": "16 passed in 5s"},
        {"role": "tool", "content": "17 passed in 4s"},
        {"role": "user", "content": "The gate code is 4417."},
        {"role": "user", "content": "The gate code is 4471."},
    ]
    scores = {fact.text: fact.score for fact in fact_lines(messages)}
    assert scores["16 passed in 5s"] == scores["17 passed in 4s"] == LISTING_SCORE
    assert scores["The gate code is 4417."] == scores["The gate code is 4471."] > LISTING_SCORE


def test_hundreds_of_listing_rows_never_push_a_users_fact_out() -> None:
    """A small target over a history of search hits still quotes the user's one fact, and
    the merged line counts every row it did not quote."""
    hits = [{"role": "tool", "content": SEARCH_HITS} for _ in range(60)]
    salted = [{"role": "tool", "content": SEARCH_HITS.replace("self", f"s{i}")} for i in range(60)]
    user = {"role": "user", "content": "Our customer number with the vendor is CUST-89712."}
    facts = fact_lines([*hits[:30], *salted[:30], user, *salted[30:]])
    text = fit("", facts, 200).text
    assert "- user: Our customer number with the vendor is CUST-89712." in text
    match = MERGED.search(text)
    assert match is not None
    quoted = sum(fact.render() in text for fact in facts)
    assert int(match.group(1)) == len(facts) - quoted


SETTINGS_READ = [
    ("pool_size", 4200),
    ("shard_count", 735),
    ("queue_depth", 136),
    ("retry_limit", 794),
]
CONFIG_READ: list[Message] = [
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "call_7",
                "type": "function",
                "function": {"name": "read_file", "arguments": '{"path": "config/channel.toml"}'},
            }
        ],
    },
    {
        "role": "tool",
        "tool_call_id": "call_7",
        "content": "# config/channel.toml\n[service]\n"
        + "\n".join(f"{name} = {value}" for name, value in SETTINGS_READ),
    },
]


def test_a_settings_file_is_quoted_on_one_line_naming_the_call_that_read_it() -> None:
    """`name = value` lines of a file read are one `tool settings` line that starts with the
    call that read them (the file's name beside every value): above search hits, below a
    statement, and the rank holds when the records are carried."""
    facts = fact_lines([*CONFIG_READ, {"role": "tool", "content": SEARCH_HITS}])
    (setting,) = [fact for fact in facts if fact.role == f"tool {SETTINGS}"]
    assert setting.text == (
        "[read_file config/channel.toml] pool_size = 4200; shard_count = 735; "
        "queue_depth = 136; retry_limit = 794"
    )
    assert (
        LISTING_SCORE
        < setting.score
        < fact_lines([{"role": "tool", "content": "Edited src/a.py: three lines."}])[0].score
    )
    carried_on = carried(fit("", [setting], 100).facts)
    assert carried_on == [setting]


def test_a_long_settings_file_is_split_into_lines_each_naming_its_source() -> None:
    """A file of many settings is quoted on several lines of at most `MAX_LINE_CHARS`, each
    starting with the call that read it; every setting is on exactly one of them."""
    settings = [f"option_{i} = {1000 + i}" for i in range(60)]
    read = [
        CONFIG_READ[0],
        {"role": "tool", "tool_call_id": "call_7", "content": "\n".join(settings)},
    ]
    lines = [fact.text for fact in fact_lines(read) if fact.role.endswith(SETTINGS)]
    assert len(lines) > 1
    assert all(line.startswith("[read_file config/channel.toml] ") for line in lines)
    assert all(len(line) <= MAX_LINE_CHARS for line in lines)
    assert [pair for line in lines for pair in setting_pairs(line)] == settings


def test_a_setting_left_out_keeps_its_name_beside_its_value_on_the_merged_line() -> None:
    """A settings line not quoted leaves each `name = value` as one term on the merged line
    (a value apart from its name answers nothing); carried to a nested growth the pairs
    are a settings line again (naming no file), and not quoted they are the same terms."""
    statement = Fact("user", "Our customer number with the vendor is CUST-89712.", 12)
    (setting,) = [fact for fact in fact_lines(CONFIG_READ) if fact.role.endswith(SETTINGS)]
    found = merged_line([statement, setting], [statement], "", None)
    assert found is not None
    merged = found[0]
    assert "`retry_limit = 794`" in merged.text
    assert "`config/channel.toml`" in merged.text
    assert "`794`" not in merged.text
    carried_on = carried([statement, merged])
    assert carried_on[1] == Fact(
        f"tool {SETTINGS}",
        "pool_size = 4200; shard_count = 735; queue_depth = 136; retry_limit = 794",
        REGAINED_SETTING_SCORE,
        rule="regained",
    )
    again = merged_line(carried_on, [statement], "", None)
    assert again is not None
    assert sorted(re.findall(r"`([^`]+)`", again[0].text)) == sorted(
        re.findall(r"`([^`]+)`", merged.text)
    )
    held = merged_line([setting], [], "we set retry_limit to 794", None)
    assert held is not None
    assert "retry_limit = 794" not in held[0].text


def test_settings_squeezed_onto_the_merged_line_are_quoted_again_when_there_is_room() -> None:
    """A growth with little room lists a file's setting on the merged line; the next growth,
    with room, quotes it as a settings line again (not as a bare term below every quoted
    line)."""
    statement = Fact("user", "Our customer number with the vendor is CUST-89712.", 12)
    (setting,) = [fact for fact in fact_lines(CONFIG_READ) if fact.role.endswith(SETTINGS)]
    squeezed = fit("", [statement, setting], count_text(layout("", [statement])) + 40)
    assert "`pool_size = 4200`" in squeezed.text
    assert "- tool settings:" not in squeezed.text
    carried_on = carried(squeezed.facts)
    assert "- tool settings: pool_size = 4200\n" in fit("", carried_on, 400).text


def test_a_call_names_its_source_by_name_and_short_arguments() -> None:
    """A call's source is its name and short string arguments; arguments that are not JSON
    leave the name alone, and a call without an id names nothing."""
    calls: Message = {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": "a", "function": {"name": "run_command", "arguments": '{"command": "cat x.env", "n": 3}'}},
            {"id": "b", "function": {"name": "read_file", "arguments": "{not json"}},
            {"function": {"name": "read_file", "arguments": '{"path": "y.toml"}'}},
            {"id": "c", "function": {"name": "read_file", "arguments": '{"path": "' + "p" * 200 + '"}'}},
        ],
    }  # fmt: skip
    assert call_sources(calls) == {"a": "run_command cat x.env", "b": "read_file", "c": "read_file"}


def test_a_covered_line_of_a_higher_score_outlives_the_line_that_covers_it() -> None:
    """The user's line and an assistant's line share their one key term: under pressure the
    assistant's goes, though the user's alone was covered."""
    user = Fact("user", "Please fix src/billing/session_ocelot.py before Friday's release.", 12)
    echo = Fact("assistant", "Opening src/billing/session_ocelot.py now.", 4)
    chosen = select_facts([user, echo], "", count_text(user.render()) + 2)
    assert chosen == [user]


def test_a_read_only_tool_call_is_no_fact_and_an_edit_is() -> None:
    """A search or a test run the assistant called holds nothing a tool cannot give again; an
    edit call names the file it changed."""
    calls: list[Message] = [
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"function": {"name": name, "arguments": arguments}}
                for name, arguments in [
                    ("search_code", '{"pattern": "quota"}'),
                    ("run_command", '{"command": "pytest tests/test_quota.py -v"}'),
                    ("edit_file", '{"path": "src/billing/anchor_walrus.py"}'),
                ]
            ],
        }
    ]
    (edit,) = fact_lines(calls)
    assert "edit_file" in edit.text


def test_a_question_ranks_below_what_anyone_stated() -> None:
    """The user's question with a number ranks below a file's settings, which rank with an
    assistant's pick and above its explanations, below what a tool or the user stated."""
    (question,) = fact_lines([{"role": "user", "content": "What does an HTTP 404 mean?"}])
    setting = Fact(f"tool {SETTINGS}", "[read_file a.toml] pool_size = 8751", 5)
    (carried_on,) = carried(fit("", [setting], 100).facts)
    picked = "I picked port 24642 for the mock server."
    (pick,) = fact_lines([{"role": "assistant", "content": picked}])
    said = "Unlike Forbidden or Gone, it never says whether the resource existed."
    (explained,) = fact_lines([{"role": "assistant", "content": said}])
    modal = "It differs from Forbidden, where the resource exists but you may not access it."
    assert fact_lines([{"role": "assistant", "content": modal}]) == []  # "may" is no month
    (edited,) = fact_lines([{"role": "tool", "content": "Edited src/a.py: three lines."}])
    assert LISTING_SCORE < question.score < explained.score < carried_on.score
    assert carried_on.score == pick.score < edited.score


def test_a_standing_request_said_as_a_question_keeps_the_users_rank() -> None:
    """A request for something to hold from now on ranks with the user's statements even
    said as a question; a one-off request or a question about a habit ranks as a question."""

    def score(text: str) -> int:
        (line,) = fact_lines([{"role": "user", "content": text}])
        return line.score

    standing = "Would you always quote prices for order 4471 in euros?"
    habit = "Do you always quote prices for order 4471 in euros?"
    once = "Could you quote the price for order 4471 in euros?"
    assert score(standing) == score(habit) + USER_BONUS
    assert score(once) == fact_signal(once)  # no role bonus: it asks for one act


def test_a_date_is_a_month_or_a_day_not_a_word_starting_like_one() -> None:
    """A month or a weekday counts as a date; "decide", "separate", "market", "octal" and the
    modal "may" do not (they made explanations outrank a decision's confirmation)."""
    for dated in ("the review is in March", "we ship it in May", "we meet on fridays"):
        assert fact_signal(dated) >= 2, dated
    for plain in ("we separate the parsers and decide later", "the market may shift", "octal"):
        assert fact_signal(plain) == 0, plain


def test_a_short_user_message_is_one_line() -> None:
    """A message like "That step is done: we did X. The next step now is Y." stays one line, so the done step
    is never quoted apart from what replaced it; a long message is split into sentences."""
    said = "That step is done: we did test_otter_ibis. The next step now is to run mig_4410."
    (line,) = fact_lines([{"role": "user", "content": said}])
    assert line.text == said
    long = " ".join(f"Box {i} holds code QZ-{7000 + i}." for i in range(20))
    assert len(fact_lines([{"role": "user", "content": long}])) == 20


def test_a_carried_note_copying_a_listings_rows_ranks_as_those_rows() -> None:
    """An earlier note line copying a listing's row (spacing and backticks aside) or a search
    hit comes back as a listing's row, below the notes that say something, also when carried_on
    back; a note of another shape stays a note."""
    rows = "\n".join(f"tests/test_{n}.py::test_{n}_split PASSED" for n in ("cart", "box", "tag"))
    facts = fact_lines([{"role": "tool", "tool_call_id": "c1", "content": rows}])
    earlier = (
        "- `tests/test_quota.py::test_quota_merge   PASSED`\n"
        "- src/payload/ledger.py:96:    anchor_rename(self, ticket)\n"
        "- the code is DX-4211"
    )
    *_, row, hit, note = copied_rows_demoted([*facts, *carried_notes(earlier, "")])
    for copied in (row, hit):
        assert (copied.role, copied.score) == (f"notes {LISTING}", LISTING_SCORE)
    assert (note.role, note.score) == ("notes", NOTES_SCORE)
    carried_on = carried([row, hit, note])
    assert [(fact.role, fact.score) for fact in carried_on] == [
        (fact.role, fact.score) for fact in (row, hit, note)
    ]


def test_a_note_line_copying_what_the_ledger_quotes_is_dropped() -> None:
    """A note line each of whose sentences the ledger quotes (a line, a request, a
    confirmation; role, bullets, backticks, case and spacing aside), a listing row's shape or
    a search hit is dropped from the notes; a sentence the ledger does not quote stays, and
    so do the model's own lines and headings."""
    rows = "\n".join(f"tests/test_{n}.py::test_{n}_split PASSED" for n in ("cart", "box", "tag"))
    facts = fact_lines(
        [
            *FIX_REQUEST[:3],
            {"role": "user", "content": "Decision: we go with NATS for the events; Kafka is out."},
            {"role": "assistant", "content": "Agreed, NATS it is for the events."},
            {"role": "tool", "tool_call_id": "c1", "content": rows},
            {"role": "assistant", "content": "The root cause was a stale cache."},
        ]
    )
    notes = (
        "Done:\n"
        "- - please fix the rounding bug in the invoice totals.\n"
        "tool: Edited src/billing/x.py:   three lines changed.\n"
        "- Decision: we go with NATS for the events; Kafka is out. Agreed, NATS it is for the events.\n"
        "- `tests/test_quota.py::test_quota_merge PASSED`\n"
        "- src/payload/ledger.py:96:    anchor_rename(self, ticket)\n"
        "- The root cause was a stale cache.\n"
        "- The invoice totals are rounded by quantize now.\n"
        "```"
    )
    assert drop_copied(notes, facts).splitlines() == [
        "Done:",
        "- The root cause was a stale cache.",
        "- The invoice totals are rounded by quantize now.",
        "```",
    ]
    assert drop_copied(notes, []).splitlines() == [
        line for line in notes.splitlines() if "ledger.py" not in line
    ]


def test_a_carried_note_ranks_below_every_statement_and_keeps_that_when_parsed_back() -> None:
    """An earlier note line carried into the ledger (a model's paraphrase) ranks below the
    assistant's own words, also at the next growth."""
    (note,) = carried_notes("- 16 passed in 4s for module quota_report", "")
    (pick,) = fact_lines([{"role": "assistant", "content": "I picked port 24642 for the mock."}])
    assert LISTING_SCORE < note.score < pick.score
    carried_on = carried(fit("", [note, pick], 200).facts)
    assert [fact.score for fact in carried_on] == [note.score, pick.score]


FIX_REQUEST: list[Message] = [
    {"role": "user", "content": "Please fix the rounding bug in the invoice totals."},
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": "call_3", "function": {"name": "edit_file", "arguments": '{"path": "src/billing/x.py"}'}},
        ],
    },
    {"role": "tool", "tool_call_id": "call_3", "content": "Edited src/billing/x.py: three lines changed."},
    {"role": "tool", "tool_call_id": "call_4", "content": "Edited src/billing/y.py: one line changed."},
]  # fmt: skip


def test_an_action_is_quoted_beside_the_request_it_answered() -> None:
    """The user's request, quoted nowhere for holding no fact, is rendered just before the
    first line of the action that answered it (and no other), adds no key term and no score,
    goes with that line, and is carried with it."""
    facts = fact_lines(FIX_REQUEST)
    assert [fact.asked for fact in facts] == [FIX_REQUEST[0]["content"], "", ""]
    call = facts[0]
    assert call.render() == (
        "- user: Please fix the rounding bug in the invoice totals.\n"
        '- assistant: called edit_file({"path": "src/billing/x.py"})'
    )
    (alone,) = fact_lines([FIX_REQUEST[1]])
    assert (call.score, key_tokens(call.text)) == (alone.score, key_tokens(alone.text))
    carried_on = carried(fit("", facts, 200).facts)
    assert carried_on == facts
    kept = select_facts(facts, "", sum(count_text(f.render()) + 1 for f in facts[1:]))
    assert "invoice totals" not in layout("", kept)


def test_a_request_is_carried_only_when_it_says_something_no_line_quotes() -> None:
    """A request holding a fact has its own line, a long one costs more than it tells, and
    "Thanks." asks nothing: none of them is carried; a newer request replaces an older one."""
    stated = "Please fix the rounding bug in INV-2291."
    long = "Please fix the rounding bug in the invoice totals " + "and the reports " * 12
    for request in (stated, long, "Thanks."):
        facts = fact_lines([{"role": "user", "content": request}, *FIX_REQUEST[1:]])
        assert not any(fact.asked for fact in facts)
    newer = "Look at the reports module instead."
    later = [FIX_REQUEST[0], {"role": "user", "content": newer}, *FIX_REQUEST[1:]]
    assert [fact.asked for fact in fact_lines(later)] == [newer, "", ""]


def test_a_request_sharing_the_focus_ranks_its_action_higher() -> None:
    """Asked which file fixed the rounding bug, the edit that answered that request ranks as
    a line sharing the question's words would, also when carried."""
    focus = "Which file did you edit to fix the rounding bug?"
    plain = fact_lines(FIX_REQUEST)[0]
    focused = fact_lines(FIX_REQUEST, focus)[0]
    assert focused.score == plain.score + FOCUS_BONUS
    carried_on = carried([focused], focus)
    assert carried_on == [focused]


DECIDED: list[Message] = [
    {"role": "user", "content": "Decision: we go with Jenkins for the mobile app; CircleCI is out."},
    {"role": "assistant", "content": "Agreed, Jenkins it is for the mobile app."},
    {"role": "user", "content": "The staging host is walrus-494.staging.internal."},
    {"role": "assistant", "content": "Noted."},
]  # fmt: skip


def test_a_reply_confirming_a_users_line_is_quoted_with_it() -> None:
    """The assistant's short reply repeating the user's line is rendered with it, not on its
    own line (a decision's first, on the line's bullet, so the chosen option is read before
    the rejected one), adds no key term and no score, goes with the line, and is carried."""
    facts = fact_lines(DECIDED)
    assert [fact.confirmed for fact in facts] == [DECIDED[1]["content"], ""]
    decision = facts[0]
    assert decision.render() == (
        "- decided: Agreed, Jenkins it is for the mobile app. "
        "(user: Decision: we go with Jenkins for the mobile app; CircleCI is out.)"
    )
    (rule,) = fact_lines(RULE)
    assert rule.render() == f"- user: {RULE[0]['content']}\n- assistant: {RULE[1]['content']}"
    (alone,) = fact_lines(DECIDED[:1])
    assert (decision.score, decision.text) == (alone.score, alone.text)
    carried_on = carried(fit("", facts, 200).facts)
    assert carried_on == facts
    kept = select_facts(facts, "", count_text(facts[1].render()) + 1)
    assert "Agreed" not in layout("", kept)


RULE: list[Message] = [
    {
        "role": "user",
        "content": "One rule for this whole session: end every answer with the tag [OTTER-665].",
    },
    {"role": "assistant", "content": "Understood. I will end every answer with the tag [OTTER-665]."},
]  # fmt: skip


def kept_short_of_one_line(lines: list[Fact]) -> list[Fact]:
    """What `select_facts` keeps with one token less than all the lines cost."""
    return select_facts(lines, "", sum(count_text(f.render()) + 1 for f in lines) - 1)


def test_a_confirmation_goes_before_any_stated_value_and_with_its_line() -> None:
    """Short of room, the confirmation of a line taking no decision goes before a line
    stating a value, even the weakest (its line stays, without it); dropping its line drops
    it too."""
    (rule,) = fact_lines(RULE)
    assert rule.confirmed
    assert confirmation_score(rule) == CONFIRMATION_SCORE
    stated = Fact("assistant", "I'll use port 26567 for the mock payment server.", 4)
    lines = [rule, stated]
    kept = kept_short_of_one_line(lines)
    assert kept == [replace(rule, confirmed=""), stated]
    assert merged_line(lines, kept, "", None) is None  # nothing is counted as left out
    assert select_facts([replace(rule, score=CONFIRMATION_SCORE - 1), stated], "", 20) == [stated]


def test_a_decisions_confirmation_goes_and_stays_with_its_line() -> None:
    """The confirmation of a decision ("Decision: X; Y is out") says which value holds:
    short of room it stays while its line does, before any lower line, and goes with its
    line when the line is the one to go; carried too."""
    decision, _ = fact_lines(DECIDED)
    assert settles(decision)
    assert confirmation_score(decision) == decision.score
    stated = Fact("assistant", "I'll use port 26567 for the mock payment server.", 5)
    setting = Fact("tool settings", "pool_size = 8663; retry_limit = 4863", SETTING_SCORE)
    for other in (stated, setting):
        assert kept_short_of_one_line([decision, other]) == [decision]
    stronger = Fact("user", "Our customer number with the vendor is CUST-15312.", 11)
    assert decision.score < stronger.score
    assert select_facts([decision, stronger], "", count_text(stronger.render()) + 1) == [stronger]
    carried_on = carried(fit("", [decision], 200).facts)
    assert carried_on == [decision]
    (aside,) = fact_lines(
        [
            {"role": "user", "content": "Decision: we go with Jenkins (hosted: v2) for "
             "the mobile app; CircleCI is out."},
            DECIDED[1],
        ]
    )  # fmt: skip
    assert carried([aside]) == [aside]
    assert kept_short_of_one_line([carried_on[0], stated]) == [decision]


def test_only_a_short_reply_mostly_of_the_lines_words_confirms_it() -> None:
    """A reply saying something else, a long one, a reply to a later message, or one whose
    user message was quoted nowhere confirms no line (it stays a line of its own, or none)."""
    decision = DECIDED[0]
    other = "Agreed. The Android build also needs signing key 4471 from the Vault store."
    long = "Agreed, Jenkins it is for the mobile app, " + "and the pipelines follow " * 8
    for reply in (other, long):
        facts = fact_lines([decision, {"role": "assistant", "content": reply}])
        assert not any(fact.confirmed for fact in facts)
        assert [fact.role for fact in facts] == ["user", "assistant"]
    unquoted = fact_lines([{"role": "user", "content": "ok"}, DECIDED[1]])
    assert not any(fact.confirmed for fact in unquoted)
    later = fact_lines([decision, {"role": "user", "content": "Thanks."}, DECIDED[1]])
    assert not any(fact.confirmed for fact in later)
    assert not confirms(decision["content"], "Noted.")
    assert confirms(decision["content"], "Agreed: Jenkins for the mobile app.")


def test_a_corrected_line_goes_with_its_confirmation() -> None:
    """When a later statement replaces the user's line, the reply that confirmed the old
    value is not quoted either."""
    messages: list[Message] = [
        {"role": "user", "content": "The release is on March 3."},
        {"role": "assistant", "content": "Noted, the release is on March 3."},
        {"role": "user", "content": "Correction: the release is on March 10."},
        {"role": "assistant", "content": "Noted, the release is on March 10."},
    ]
    text = fit("", fact_lines(messages), 200).text
    assert "March 3" not in text
    assert "- assistant: Noted, the release is on March 10." in text


CI_QUESTION = "Which CI system did we decide to use for the mobile app? Answer with just the value."


def test_words_saying_how_to_answer_make_no_line_about_the_question() -> None:
    """A question's words on how to answer ("Answer with just the value.") rank no line as
    about it; its words on what is asked do."""
    assert focus_words_of(CI_QUESTION) == {"system", "decide", "mobile"}
    assert focus_words_of(None) == focus_words_of("") == frozenset()
    said: list[Message] = [
        {"role": "user", "content": "Just give the value with units: the budget is 4,000 EUR."}
    ]
    (plain,) = fact_lines(said)
    (asked,) = fact_lines(said, "What is the answer? Answer with just the value.")
    assert asked == plain
    assert not asked.focused
    (about,) = fact_lines(said, "Which budget did we set?")
    assert about.focused
    assert about.score == plain.score + FOCUS_BONUS


def test_the_confirmation_of_a_line_about_the_question_outranks_explanations() -> None:
    """Asked about a line taking no decision, its confirmation ranks above the assistant's
    explanations, still below its line, also when carried_on back; unasked, it goes first."""
    question = "Which tag did we agree on for the session? Answer with just the value."
    (rule,) = fact_lines(RULE, question)
    (unasked,) = fact_lines(RULE)
    assert rule.focused
    assert not unasked.focused
    assert confirmation_score(rule) == CONFIRMATION_SCORE + FOCUS_BONUS < rule.score
    brief = Fact("assistant", "It builds in 9 min.", CONFIRMATION_SCORE)
    assert kept_short_of_one_line([rule, brief]) == [rule]
    assert kept_short_of_one_line([unasked, brief]) == [replace(unasked, confirmed=""), brief]
    carried_on = carried(fit("", [rule], 200).facts, question)
    assert carried_on == [rule]
    decision, _ = fact_lines(DECIDED, CI_QUESTION)
    assert confirmation_score(decision) == decision.score
