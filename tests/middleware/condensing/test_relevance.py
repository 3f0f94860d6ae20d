"""Relevance: the condensed turns that bear on the latest user message, ranked by BM25."""

from __future__ import annotations

import pytest

from kernel.tokens import count_text
from kernel.types import Message
from middleware.condensing import relevance
from middleware.condensing.ledger import Ledger
from middleware.condensing.ledger.terms import fold
from middleware.condensing.relevance import (
    END,
    GAP,
    LABEL,
    PASSAGE_CHARS,
    Passage,
    in_force,
    passages,
    pick,
    quoted,
    ranked,
    with_preface,
    word_index,
)

TURNS: list[Message] = [
    {"role": "system", "content": "Be helpful."},
    {"role": "user", "content": "I went kayaking on the lake with my sister last weekend."},
    {"role": "assistant", "content": "That sounds lovely. Was the water cold?"},
    {"role": "user", "content": "Freezing! We rented the kayak from a shop called Paddle Hut."},
    {"role": "assistant", "content": "Good to know. I'll remember Paddle Hut."},
    {"role": "user", "content": "My sister is a nurse at the children's hospital."},
    {"role": "tool", "name": "search", "content": "kayak rentals: Paddle Hut, Lake Shop"},
]


def test_system_messages_are_not_passages_and_tool_results_name_their_tool() -> None:
    """Only the turns are candidates; a tool result is labelled with its tool's name."""
    found = passages(TURNS, range(len(TURNS)))
    assert [p.index for p in found] == [1, 2, 3, 4, 5, 6]
    assert found[-1].render() == "- tool(search): kayak rentals: Paddle Hut, Lake Shop"


def test_a_long_turn_is_quoted_in_parts_cut_at_sentence_ends() -> None:
    """A turn longer than a passage is split at sentence ends, none longer than the limit,
    and nothing of it is lost."""
    sentence = "The migration moved the billing tables to the new cluster. "
    long = {"role": "assistant", "content": sentence * 40}
    found = passages([long], [0])
    assert len(found) > 1
    assert all(len(p.text) <= PASSAGE_CHARS for p in found)
    assert " ".join(p.text for p in found).split() == (sentence * 40).split()


def test_a_run_with_no_sentence_end_is_still_cut_to_size() -> None:
    """A base64 blob or a minified line is cut where it reaches the size."""
    found = passages([{"role": "tool", "content": "x" * (3 * PASSAGE_CHARS)}], [0])
    assert [len(p.text) for p in found] == [PASSAGE_CHARS] * 3


def test_the_passage_sharing_the_rarest_words_ranks_first() -> None:
    """A word found in few passages outweighs a word found in many."""
    found = passages(TURNS, range(len(TURNS)))
    best = ranked("Where did we rent the kayak?", found)[0]
    assert found[best[1]].index == 3  # "rented the kayak" beats "kayaking" and "kayak rentals"


def test_a_plural_in_the_question_finds_the_singular_said_in_a_turn() -> None:
    """A question's "dogs' names" ranks the turn that says "dog" and "name's" ("-ies" reads
    as "-y"), and a word ending in "-ss" or "-us", or of three letters, keeps its "s"."""
    turns: list[Message] = [
        {"role": "user", "content": "I adopted a second dog! Her name's Shadow."},
        {"role": "assistant", "content": "Lovely. What are your hobbies these days?"},
        {"role": "user", "content": "Mostly pottery; it calms me."},
        {"role": "user", "content": "The build status is green and the glass is full."},
    ]
    found = passages(turns, range(len(turns)))
    assert [p for _, p in ranked("Their dogs' names?", found)] == [0]
    assert [p for _, p in ranked("Which hobby?", found)] == [1]
    assert ranked("statu glas", found) == []
    assert (fold("has"), fold("its")) == ("has", "its")


def test_words_found_in_half_the_passages_or_more_pick_nothing() -> None:
    """A question sharing only words that half the turns or more hold ("the", "is", "der")
    picks no turn: their frequency says so, with no stop-word list, in any language."""
    german: Message = {"role": "user", "content": "Der Hund ist im Garten, und der Ball ist rot."}
    turns: list[Message] = [
        {"role": "user", "content": f"The build {n} is green and the cache is warm."}
        for n in range(6)
    ]
    turns += [german, german]
    found = passages(turns, range(len(turns)))
    assert {found[p].index for _, p in ranked("Wo ist der Hund?", found)} == {6, 7}
    assert ranked("What is the state of the build?", found) == []  # "build": 6 of 8
    assert ranked("the is and", found) == []
    assert pick("Is the cache the problem?", found, 500, count_text) == []  # "cache": 6 of 8


def test_picking_keeps_to_its_room_and_the_conversations_order() -> None:
    """The best passages that fit the room; a run of them said one after the other is quoted
    in that order."""
    found = passages(TURNS, range(len(TURNS)))
    room = count_text(f"{LABEL}\n{END}") + count_text(found[2].render()) + 3
    picked = pick("What does my sister do? Which hospital?", found, room, count_text)
    assert [p.index for p in picked] == [5]
    wide = pick("my sister and the kayak shop", found, 10_000, count_text)
    assert [p.index for p in wide] == sorted(p.index for p in wide)
    assert {1, 3, 5} <= {p.index for p in wide}


def test_a_picked_turn_brings_the_reply_after_it_when_that_fits() -> None:
    """The turn that raised a subject comes with the turn after it, where its answer is; the
    reply is left out when the room holds only the turn."""
    turns: list[Message] = [
        {"role": "user", "content": "We finally adopted a puppy last week."},
        {"role": "assistant", "content": "Congratulations! What did you name the puppy?"},
        {"role": "user", "content": "Max, after my grandfather."},
        {"role": "assistant", "content": "That's a lovely way to remember him."},
        {"role": "user", "content": "Rainy all weekend here."},
        {"role": "assistant", "content": "Hope it clears up soon."},
    ]
    found = passages(turns, range(len(turns)))
    asked = "What did you name the puppy?"
    assert [p.index for p in pick(asked, found, 10_000, count_text)] == [1, 2]
    tight = count_text(f"{LABEL}\n{END}") + count_text(found[1].render()) + 1
    assert [p.index for p in pick(asked, found, tight, count_text)] == [1]


def test_a_passage_scoring_far_below_the_best_is_not_quoted() -> None:
    """However much room is left, a passage scoring below half the best one's (it shares a
    word or two by chance) is not quoted; the best counts even when a later turn replaced it."""
    turns: list[Message] = [
        {"role": "user", "content": "The API gateway listens on port 6765."},
        {"role": "assistant", "content": "Noted."},
        {"role": "user", "content": "Pick a free port for the mock payment server."},
        {"role": "assistant", "content": "I'll use port 26883 for the mock payment server."},
        {"role": "user", "content": "What is a race condition?"},
        {"role": "assistant", "content": "Two threads updating one counter at once."},
        {"role": "user", "content": "Correction: the gateway moved to port 9412."},
        {"role": "assistant", "content": "Thanks, updated."},
        {"role": "user", "content": "How should I name variables?"},
        {"role": "assistant", "content": "For what they mean in the problem."},
    ]
    found = passages(turns, range(len(turns)))
    asked = "Which port does the API gateway listen on?"
    assert [p.index for p in pick(asked, found, 10_000, count_text)] == [0, 1]
    replaced = ["The API gateway listens on port 6765."]
    kept = pick(asked, found, 10_000, count_text, replaced=replaced)
    assert [p.index for p in kept] == []


def test_a_statement_the_verbatim_turns_replace_is_not_quoted() -> None:
    """A condensed statement that a user's turn after the condensed ones corrects is left out
    with its acknowledgement, read by the ledger's rule; one they do not correct is quoted."""
    turns: list[Message] = [
        {"role": "user", "content": "The upload limit is 550 MB."},
        {"role": "assistant", "content": "Noted."},
        {"role": "user", "content": "Rainy all weekend here."},
    ]
    later: list[Message] = [
        {"role": "user", "content": "Correction: the upload limit is 380 MB, not 550 MB."},
        {"role": "assistant", "content": "Updated."},
    ]
    found = passages(turns, range(len(turns)))
    asked = "What is the upload limit?"
    assert [p.index for p in pick(asked, found, 10_000, count_text)] == [0, 1]
    assert [p.index for p in pick(asked, found, 10_000, count_text, later=later)] == []
    unrelated: list[Message] = [{"role": "user", "content": "The timeout is 30 s."}]
    assert [p.index for p in pick(asked, found, 10_000, count_text, later=unrelated)] == [0, 1]


def test_a_turn_holding_a_replaced_statement_is_not_quoted_nor_its_acknowledgement() -> None:
    """A passage holding a statement a later turn replaced (whitespace aside) is skipped, and
    so is the short reply right after it, which only says it again; the correcting turn is
    still quoted."""
    turns: list[Message] = [
        {"role": "user", "content": "Our staging   database port is 5432."},
        {"role": "assistant", "content": "Noted: the staging database is on port 5432."},
        {"role": "user", "content": "Update: the staging database port is 6543 now."},
        {"role": "assistant", "content": "Thanks."},
        *({"role": "user", "content": f"Lunch plan {n}: tacos."} for n in range(4)),
    ]
    found = passages(turns, range(len(turns)))
    asked = "Which port is the staging database on?"
    assert [p.index for p in pick(asked, found, 10_000, count_text)] == [0, 1, 2, 3]
    replaced = ["Our staging database port is 5432."]
    picked = pick(asked, found, 10_000, count_text, replaced=replaced)
    assert [p.index for p in picked] == [2, 3]


def test_a_replaced_statement_said_as_a_list_item_is_matched_as_the_ledger_records_it() -> None:
    """The ledger records a list item's statement without its marker; the turn holding it is
    still known as replaced and not quoted."""
    turns: list[Message] = [
        {
            "role": "user",
            "content": "Before we deploy, one setting:\n- the staging database port is 5432",
        },
        {"role": "assistant", "content": "Noted."},
        {"role": "user", "content": "Update: the staging database port is 6543 now."},
        {"role": "assistant", "content": "Thanks."},
        *({"role": "user", "content": f"Lunch plan {n}: tacos."} for n in range(4)),
    ]
    facts = Ledger.grow(None, (), turns).render("", 500).facts
    replaced = [fact.supersedes for fact in facts if fact.supersedes]
    assert replaced == ["Before we deploy, one setting: the staging database port is 5432"]
    found = passages(turns, range(len(turns)))
    asked = "Which port is the staging database on?"
    picked = pick(asked, found, 10_000, count_text, replaced=replaced)
    assert [p.index for p in picked] == [2, 3]


def test_an_excerpt_ends_on_the_decision_taken_after_the_options() -> None:
    """The passages are quoted in their order, whatever the extraction also quotes: the
    options weighed, then the decision taken after them."""
    turns: list[Message] = [
        {"role": "user", "content": "For the mobile app, should we use Jenkins or CircleCI?"},
        {"role": "assistant", "content": "Both would work; Jenkins is simpler to run."},
        {"role": "user", "content": "Decision: we go with CircleCI for the mobile app."},
        {"role": "assistant", "content": "Agreed, CircleCI it is for the mobile app."},
        *({"role": "user", "content": f"Lunch plan {n}: tacos."} for n in range(6)),
    ]
    found = passages(turns, range(len(turns)))
    asked = "Which CI system did we decide on for the mobile app?"
    assert [p.index for p in pick(asked, found, 10_000, count_text)][:4] == [0, 1, 2, 3]


def test_the_excerpt_holding_the_best_ranked_passage_is_quoted_last() -> None:
    """Excerpts keep the conversation's order but for the one holding the best-ranked
    passage, which comes last, right before the question; the gap lines stay as counted."""
    turns: list[Message] = [
        {"role": "user", "content": "My sister works as a nurse at Mercy Hospital."},
        {"role": "assistant", "content": "That sounds like demanding work."},
        *({"role": "user", "content": f"Rainy weekend number {n} here."} for n in range(6)),
        {"role": "user", "content": "My sister says work at the hospital is busy."},
        {"role": "assistant", "content": "I hope she gets some rest."},
    ]
    found = passages(turns, range(len(turns)))
    asked = "Which hospital does my sister work at as a nurse?"
    picked = pick(asked, found, 10_000, count_text)
    assert [p.index for p in picked] == [8, 9, 0, 1]
    assert quoted(picked).splitlines().count(GAP) == 1


def test_the_quoted_block_is_labelled_and_goes_before_the_users_text() -> None:
    """The block says what it is; a string message keeps its text after it, a parts list
    gets a text part first."""
    block = quoted([Passage(3, "user", "We rented the kayak from Paddle Hut.")])
    assert block.splitlines() == [LABEL, "- user: We rented the kayak from Paddle Hut.", END]
    text = with_preface({"role": "user", "content": "Where?"}, block)
    assert text["content"] == f"{block}\n\nWhere?"
    parts = with_preface({"role": "user", "content": [{"type": "text", "text": "Where?"}]}, block)
    assert parts["content"] == [{"type": "text", "text": block}, {"type": "text", "text": "Where?"}]


def test_turns_left_out_between_two_quoted_passages_are_marked_and_counted() -> None:
    """A gap line stands where turns between two passages are left out, never between the
    parts of one turn or two turns said one after the other, and the room counts it."""
    weather = ["Rainy all weekend here.", "Hope it clears up.", "Sunny by Monday, they say."]
    turns: list[Message] = [
        {"role": "user", "content": "We booked the cabin by the lake. " * 30},
        {"role": "assistant", "content": "Which lake was the cabin on?"},
        *({"role": "user", "content": text} for text in weather * 2),
        {"role": "assistant", "content": "The cabin was on Lake Tahoe."},
        {"role": "user", "content": "Yes, Tahoe."},
    ]
    found = passages(turns, range(len(turns)))
    assert [p.index for p in found[:3]] == [0, 0, 1]
    assert GAP not in quoted(found[:4]).splitlines()
    lines = quoted(pick("Where was the cabin?", found, 10_000, count_text)).splitlines()
    assert lines[-6:] == [
        "- assistant: Which lake was the cabin on?",
        "- user: Rainy all weekend here.",
        GAP,
        "- assistant: The cabin was on Lake Tahoe.",
        "- user: Yes, Tahoe.",
        END,
    ]
    assert lines.count(GAP) == 1
    gaps = 0
    for room in range(40, 600, 5):
        block = quoted(pick("Where was the cabin?", found, room, count_text))
        assert count_text(block) <= room
        gaps += GAP in block.splitlines()
    assert gaps


CONDENSED: list[Message] = [
    {"role": "user", "content": "We booked a cabin near the lake for our trip."},
    {"role": "assistant", "content": "Lovely, enjoy June there!"},
    *({"role": "user", "content": f"Lunch plan {n}: tacos."} for n in range(6)),
]


def after_condensed(newest: list[Message]) -> tuple[list[Passage], list[Passage]]:
    """The passages of `CONDENSED` and of `newest` sent verbatim after them."""
    turns = [*CONDENSED, *newest]
    return passages(turns, range(len(CONDENSED))), passages(
        turns, range(len(CONDENSED), len(turns))
    )


def test_a_newest_turn_outranking_every_condensed_one_is_quoted_last() -> None:
    """A turn sent verbatim that matches the question better than any condensed turn is
    quoted again, with the reply after it, after the condensed excerpts, right before the
    question."""
    newest: list[Message] = [
        {"role": "user", "content": "Which ferry goes to the cabin on the lake island?"},
        {"role": "assistant", "content": "The 9:40 ferry from Pier 3."},
        {"role": "user", "content": "Thanks, see you there."},
    ]
    found, recent = after_condensed(newest)
    asked = "Which ferry goes to the cabin on the lake?"
    picked = pick(asked, found, 10_000, count_text, newest=recent)
    assert [p.index for p in picked] == [0, 1, 8, 9]
    assert [p.index for p in pick(asked, found, 10_000, count_text)] == [0, 1]


def test_newest_turns_are_quoted_only_beside_a_condensed_one_that_ranks_first() -> None:
    """Where no condensed turn shares a distinctive word with the question, nothing is
    quoted, however well a newest turn matches; a newest turn ranked below the best condensed
    one is not quoted again."""
    found, recent = after_condensed([{"role": "user", "content": "Ferries leave from Pier 3."}])
    assert pick("When do ferries leave?", found, 10_000, count_text, newest=recent) == []
    _, weak = after_condensed([{"role": "user", "content": "The lake froze."}])
    asked = "Where was the cabin near the lake?"
    picked = pick(asked, found, 10_000, count_text, newest=weak)
    assert [p.index for p in picked] == [0, 1]


def test_a_newest_turn_a_later_one_replaces_is_not_quoted_again() -> None:
    """Of the turns sent verbatim, one holding a statement a later one of them corrects is
    not quoted again, by the ledger's rule; the correction is."""
    newest: list[Message] = [
        {"role": "user", "content": "The cabin's door code is 4417."},
        {"role": "assistant", "content": "Noted."},
        {"role": "user", "content": "Correction: the cabin's door code is 5521, not 4417."},
        {"role": "assistant", "content": "Updated."},
    ]
    found, recent = after_condensed(newest)
    picked = pick("What is the cabin's door code?", found, 10_000, count_text, newest=recent)
    assert [p.index for p in picked] == [0, 1, 10, 11]


def test_one_newest_turn_is_quoted_again_however_many_outrank_the_condensed_ones() -> None:
    """The best of the newest turns is quoted again with the reply after it; the others are
    in the request already, read before the block."""
    found, recent = after_condensed(
        [
            {"role": "user", "content": "Which ferry goes to the lake cabin?"},
            {"role": "assistant", "content": "Ask at the dock."},
            {"role": "user", "content": "Ok."},
            {"role": "assistant", "content": "A ferry to the cabin leaves at 9:40."},
        ]
    )
    asked = "Which ferry goes to the cabin?"
    order = ranked(asked, found, recent)
    top = max(score for score, p in order if p < len(found))
    assert len([p for score, p in order if p >= len(found) and score > top]) == 2
    picked = pick(asked, found, 10_000, count_text, newest=recent)
    assert [p.index for p in picked] == [0, 1, 8, 9]


def test_the_newest_turns_change_nothing_of_how_the_condensed_ones_rank() -> None:
    """Which words are distinctive, and how much each weighs, is read from the condensed
    turns alone: many short newest turns do not make a word every condensed turn holds look
    rare."""
    found = passages(
        [{"role": "user", "content": f"The crew fixed hull {n}."} for n in range(4)], range(4)
    )
    noted = [{"role": "assistant", "content": "Noted."} for _ in range(10)]
    also = passages([*noted, {"role": "user", "content": "The hull 2 leak is fixed."}], range(11))
    assert ranked("Summarise the crew.", found, also) == []
    asked = "Which hull did the crew fix?"
    assert [p for _, p in ranked(asked, found)] == [
        p for _, p in ranked(asked, found, also) if p < 4
    ]


SESSIONS: list[Message] = [
    {"role": "user", "content": "[9:48 am on 4 February, 2023] Jolene: Hey Deborah! How are you?"},
    {"role": "assistant", "content": "Deborah: Good! Anything new with you?"},
    {"role": "user", "content": "Jolene: I finished my favourite book again, Sapiens."},
    {"role": "assistant", "content": "[2:10 pm on 20 March, 2023] Deborah: Hi Jolene! Long week."},
    {"role": "user", "content": "Jolene: I started a new book, Dune, for my club."},
    {"role": "assistant", "content": "Deborah: Dune is a great book."},
    {"role": "user", "content": "[11:02 am on 2 April, 2023] Jolene: The garden is blooming."},
    {"role": "assistant", "content": "Deborah: Send me photos of the tulips!"},
    {"role": "user", "content": "Jolene: Sure, after my yoga class."},
    {"role": "assistant", "content": "Deborah: Enjoy the class."},
]


def test_a_question_naming_a_date_finds_what_was_said_that_day_not_its_greeting() -> None:
    """The turns after a stamped one are ranked as said then: the day's words tie them all,
    and what the question asks about decides among them."""
    found = passages(SESSIONS, range(len(SESSIONS)))
    assert [p.dated for p in found[:6]] == [
        "", "9:48 am on 4 February, 2023", "9:48 am on 4 February, 2023",
        "", "2:10 pm on 20 March, 2023", "2:10 pm on 20 March, 2023",
    ]  # fmt: skip
    asked = "What book did Jolene mention on 4 February, 2023?"
    assert found[ranked(asked, found)[0][1]].index == 2
    undated = [Passage(p.index, p.who, p.text, p.part) for p in found]
    assert undated[ranked(asked, undated)[0][1]].index == 0  # the greeting, by the day's words
    picked = pick(asked, found, 10_000, count_text)
    assert [p.index for p in picked][-2:] == [2, 3]


def test_turns_sent_after_the_condensed_ones_keep_the_stamp_said_before_them() -> None:
    """The newest turns, read apart from the condensed ones, are dated by the latest stamp
    before them, wherever it stands."""
    newest = passages(SESSIONS, range(4, 6))
    assert {p.dated for p in newest} == {"2:10 pm on 20 March, 2023"}
    assert passages(SESSIONS, [1])[0].dated == "9:48 am on 4 February, 2023"


def test_turns_read_after_others_are_dated_by_the_stamp_in_force_after_those() -> None:
    """Passages read in two parts, the second given the stamp in force after the first, are
    the passages read in one pass; a stamp after leading space still dates the turns."""
    whole = passages(SESSIONS, range(len(SESSIONS)))
    for end in range(len(SESSIONS) + 1):
        first = passages(SESSIONS, range(end))
        rest = passages(SESSIONS, range(end, len(SESSIONS)), in_force(first))
        assert [*first, *rest] == whole
    assert in_force([]) == ""
    spaced: list[Message] = [{"role": "user", "content": "  [10:02 am on 3 May, 2023] Hi!"}]
    assert in_force(passages(spaced, [0])) == "10:02 am on 3 May, 2023"


def test_a_bracketed_tag_is_not_a_stamp() -> None:
    """Only a time or a date makes a bracketed opening a stamp: a tag or a ticket with a
    number in it dates nothing."""
    turns: list[Message] = [
        {"role": "assistant", "content": "[OTTER-512] at the end of every answer."},
        {"role": "user", "content": "[JIRA-123] the login page is broken."},
        {"role": "assistant", "content": "[v2.1.0] released."},
        {"role": "user", "content": "Thanks."},
    ]
    assert [p.dated for p in passages(turns, range(4))] == ["", "", "", ""]
    dated = [{"role": "user", "content": f"[{stamp}] hi"} for stamp in ("2024-01-05", "May 8")]
    assert [p.dated for p in passages([*dated, turns[3]], range(3))] == ["", "", "May 8"]


def test_a_long_stamped_turn_dates_its_own_later_parts_and_quotes_no_stamp_twice() -> None:
    """The parts after a stamped turn's first are ranked with its stamp; a passage is
    quoted as it was said, its stamp only where the turn wrote it."""
    long = "[8 May, 2023] " + "We walked the coastal path near the harbour. " * 30
    found = passages([{"role": "user", "content": long}], [0])
    assert len(found) > 1
    assert [p.dated for p in found] == ["", *["8 May, 2023"] * (len(found) - 1)]
    assert found[1].render().count("8 May") == 0


COUSIN: list[Message] = [
    {"role": "user", "content": "James: The weather was lovely on our hike."},
    {"role": "assistant", "content": "John: Here is my cousin's dog, by the way."},
    {"role": "user", "content": "James: So adorable! And their name?"},
    {"role": "assistant", "content": "John: Luna, after the moon."},
    {"role": "user", "content": "James: Lovely name. My week was busy."},
    {"role": "assistant", "content": "John: Mine too, lots of meetings."},
    {"role": "user", "content": "James: Same here, and the car broke down."},
    {"role": "assistant", "content": "John: Oh no, hope it gets fixed soon."},
]


def test_a_reply_that_ends_asking_a_question_is_quoted_with_its_answer() -> None:
    """The passage after a picked one comes with it, and when that reply ends asking a
    question, the turn answering it comes too."""
    found = passages(COUSIN, range(len(COUSIN)))
    picked = pick("What is John's cousin's dog called?", found, 10_000, count_text)
    assert [p.index for p in picked] == [1, 2, 3]


def test_a_reply_that_asks_in_passing_brings_nothing_more() -> None:
    """Only a reply whose last sentence asks is answered in the turn after it."""
    turns = [dict(m) for m in COUSIN]
    turns[2] = {"role": "user", "content": "James: What a pup? So fluffy."}
    found = passages(turns, range(len(turns)))
    picked = pick("What is John's cousin's dog called?", found, 10_000, count_text)
    assert [p.index for p in picked] == [1, 2]


def test_the_excerpt_read_last_says_when_it_was_said() -> None:
    """The first passage of the excerpt read last opens with the stamp in force where it was
    said; the other excerpts are quoted as said."""
    filler: list[Message] = [
        {"role": "assistant", "content": "Deborah: Nice."},
        {"role": "user", "content": "Jolene: The weather turned cold."},
        {"role": "assistant", "content": "Deborah: Stay warm."},
    ]
    turns = [*SESSIONS[:3], *filler, *SESSIONS[3:]]
    found = passages(turns, range(len(turns)))
    picked = pick(
        "Which book did Jolene finish, and which did she start?", found, 10_000, count_text
    )
    assert quoted(picked).splitlines()[1:-1] == [
        "- user: Jolene: I finished my favourite book again, Sapiens.",
        "- assistant: Deborah: Nice.",
        GAP,
        "- user: [2:10 pm on 20 March, 2023] Jolene: I started a new book, Dune, for my club.",
        "- assistant: Deborah: Dune is a great book.",
        "- user: [11:02 am on 2 April, 2023] Jolene: The garden is blooming.",
    ]


def test_a_stamp_with_no_room_left_is_not_quoted() -> None:
    """The stamp is quoted only in the room the passages left: it never pushes one out."""
    found = passages(SESSIONS, range(len(SESSIONS)))
    asked = "Which book did Jolene finish again?"
    wide = pick(asked, found, 10_000, len)
    assert [p.index for p in wide] == [2, 3]
    assert wide[0].render() == f"- user: [9:48 am on 4 February, 2023] {found[2].text}"
    room = len(f"{LABEL}\n{END}") + sum(len(found[at].render()) + 1 for at in (2, 3))
    assert pick(asked, found, room, len) == [found[2], found[3]]


def test_the_same_passages_are_indexed_once_and_the_least_used_index_goes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A conversation's condensed turns come back as the same passages at every request:
    their word index is built once, and the least recently used indexes go when the kept
    ones cover more than `INDEXED_PASSAGES` passages."""
    found = passages(TURNS, range(len(TURNS)))
    again = passages(TURNS, range(len(TURNS)))
    assert word_index(found) is word_index(again)
    others = [
        passages([{"role": "user", "content": f"Conversation {n} is about a kayak."}], [0])
        for n in range(3)
    ]
    monkeypatch.setattr(relevance._INDEXED, "bound", len(found) + 2)
    first = word_index(found)
    kept = [word_index(other) for other in others[:2]]
    word_index(others[2])  # one passage too many: the least recently used goes, found
    assert all(word_index(other) is index for other, index in zip(others, kept, strict=False))
    assert word_index(found) is not first  # the least recently used went
    assert ranked("Where did we rent the kayak?", found) == ranked(
        "Where did we rent the kayak?", list(found)
    )
