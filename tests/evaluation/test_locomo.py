"""LoCoMo's layouts read as conversations, its answers scored by their words, and
`overspill eval --locomo` playing them through the real layers (a scripted upstream)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
import respx

from cli.main import main
from evaluation import locomo
from evaluation.locomo import Question, content_words
from evaluation.places import LAST, OUT
from providers.fake import completion

FILLER = "We talked about the weather and the week in general, nothing special happened."


def dialogue(sessions: int = 12) -> dict[str, Any]:
    """A LoCoMo-shaped conversation (not LoCoMo's text): Ann and Ben over `sessions`
    sessions; the first holds the facts the questions ask about."""
    conversation: dict[str, Any] = {"speaker_a": "Ann", "speaker_b": "Ben"}
    for number in range(1, sessions + 1):
        turns = [
            {"speaker": "Ann", "dia_id": f"D{number}:{i}", "text": f"{FILLER} ({number}.{i})"}
            for i in range(1, 9)
        ]
        conversation[f"session_{number}_date_time"] = f"1:00 pm on {number} May, 2023"
        conversation[f"session_{number}"] = turns
    conversation["session_1"][1] = {
        "speaker": "Ben", "dia_id": "D1:2", "text": "I adopted two greyhounds from the shelter!",
        "blip_caption": "a photo of two dogs on a sofa",
    }  # fmt: skip
    return conversation


QA = [
    {"question": "What did Ben adopt?", "answer": "two greyhounds", "evidence": ["D1:2"],
     "category": 4},
    {"question": "Where did Ben get his dogs and what did he share?",
     "answer": "shelter, photo of dogs", "category": 1, "evidence": ["D1:2"]},
    {"question": "When did Ben adopt?", "answer": "1 May 2023", "category": 2, "evidence": []},
    {"question": "Would Ben like cats?", "answer": "Likely yes", "category": 3},
    {"question": "What did Ann adopt?", "adversarial_answer": "greyhounds", "category": 5},
    {"question": "What did Ben say about the day?", "answer": "that it was a long day with the "
     "dogs at the shelter", "category": 4},
]  # fmt: skip


def write_both(tmp_path: Path) -> tuple[Path, Path]:
    """The dialogue as locomo10.json and as a per-dialogue folder."""
    whole = tmp_path / "locomo10.json"
    whole.write_text(json.dumps([{"sample_id": "conv-7", "conversation": dialogue(), "qa": QA}]))
    folder = tmp_path / "v2"
    folder.mkdir()
    (folder / "7.json").write_text(json.dumps({**dialogue(), "qa": QA}))
    return whole, folder


def test_both_layouts_read_as_the_same_chat(tmp_path: Path) -> None:
    """locomo10.json and the per-dialogue files give the same dialogue: the first speaker's
    turns are the user's, each says who spoke, a session's first turn its date, a photo its
    caption; adversarial questions (no answer) are left out."""
    whole, folder = write_both(tmp_path)
    (one,) = locomo.load(whole)
    assert locomo.load(folder) == [one] == locomo.load(folder / "7.json")
    assert one.name == "conv-7"
    assert one.number == 7
    assert one.messages[1] == {
        "role": "user", "content": f"[1:00 pm on 1 May, 2023] Ann: {FILLER} (1.1)",
    }  # fmt: skip
    assert one.messages[2] == {
        "role": "assistant",
        "content": "Ben: I adopted two greyhounds from the shelter! "
        "[and shared a photo of two dogs on a sofa]",
    }
    assert [q.kind for q in one.questions] == [
        "single_hop", "multi_hop", "temporal", "open_domain", "single_hop",
    ]  # fmt: skip
    asked = locomo.asked(one, locomo.DEFAULT_KINDS)
    assert [q.question for q in asked] == [q["question"] for q in QA[:3]]  # short answers only


def test_a_question_listed_twice_is_asked_once(tmp_path: Path) -> None:
    """An annotation listed again (LoCoMo's conv-48 lists six twice) is one question, so a run
    asks it once and its report reads it once; the same words with another answer stay two."""
    other = {**QA[0], "answer": "a greyhound"}
    path = tmp_path / "7.json"
    path.write_text(json.dumps({**dialogue(), "qa": [QA[0], QA[1], QA[0], other]}))
    (one,) = locomo.load(path)
    assert [(q.question, q.answer) for q in one.questions] == [
        (QA[0]["question"], "two greyhounds"),
        (QA[1]["question"], QA[1]["answer"]),
        (QA[0]["question"], "a greyhound"),
    ]


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("{", "cannot be read as JSON"),
        ('{"a": 1}', "neither locomo10.json"),
        ('[{"sample_id": "x"}]', "needs a conversation object"),
        ('[{"conversation": {"speaker_a": "A"}}]', "speaker_a and speaker_b"),
        ('[{"conversation": {"speaker_a": "A", "speaker_b": "B", "session_1": 3}}]',
         "session_1 is not a list"),
        ('[{"conversation": {"speaker_a": "A", "speaker_b": "B"}, "qa": [{"answer": 1}]}]',
         "needs a question and a category"),
    ],
)  # fmt: skip
def test_a_file_that_is_not_locomo_is_refused_naming_what_is_wrong(
    tmp_path: Path, text: str, problem: str
) -> None:
    """A broken or foreign file is a ValueError that names the file and the problem."""
    path = tmp_path / "bad.json"
    path.write_text(text)
    with pytest.raises(ValueError, match=problem) as raised:
        locomo.load(path)
    assert str(path) in str(raised.value)


def test_answers_are_scored_by_every_content_word() -> None:
    """Present and right need every content word of the annotated answer, ignoring case,
    function words and a plural's s; a list answer needs each of its items."""
    question = Question("multi_hop", "What martial arts has John done?", "Kickboxing, Taekwondo")
    assert content_words("The Shelters, and a dog's bowl") == {"shelter", "dog", "bowl"}
    assert question.score("He did kickboxing and some taekwondo.")
    assert not question.score("Kickboxing.")
    assert question.present("john: I started Taekwondo... kickboxing is next")
    assert not Question("single_hop", "q", "the").score("the")  # no content word: never right


@respx.mock
def test_the_cli_plays_locomo_dialogues_through_the_layers(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`overspill eval --locomo` asks each dialogue's questions under each condition and
    prints recall and, apart, how often the answer was in what the model was shown, with the
    turns that say it too; the recalled turn puts the answer in front of overspill's
    answering call."""
    asked: list[str] = []

    def upstream(request: httpx.Request) -> httpx.Response:
        last = str(json.loads(request.content)["messages"][-1].get("content"))
        asked.append(last)
        text = "two greyhounds" if "greyhounds" in last and "short phrase" in last else "- notes"
        return httpx.Response(200, json=completion(text, prompt_tokens=100))

    respx.post("http://upstream.test/v1/chat/completions").mock(side_effect=upstream)
    config = tmp_path / "config.yaml"
    config.write_text(
        "model_list:\n  - model_name: local\n    litellm_params: {model: openai/m, "
        'api_base: "http://upstream.test/v1"}\n    context: {window: 2048}\n'
        "general_settings: {upstream_client: httpx}\n"
    )
    _, folder = write_both(tmp_path)
    out = tmp_path / "rows.jsonl"
    status = main(
        ["eval", "--config", str(config), "--locomo", str(folder), "--dialogues", "conv-7",
         "--conditions", "overspill-once,drop-oldest", "--kinds", "single_hop",
         "--out", str(out)]
    )  # fmt: skip
    assert status == 0
    rows = {r["condition"]: r for r in map(orjson.loads, out.read_bytes().splitlines())}
    assert rows["overspill-once"]["seed_set"] == "locomo"
    assert rows["overspill-once"]["present"]
    assert rows["overspill-once"]["correct"]
    assert rows["overspill-once"]["stood"] == LAST
    assert rows["overspill-once"]["evidence"] is True
    assert rows["drop-oldest"]["evidence"] is False
    assert not rows["drop-oldest"]["present"]
    assert not rows["drop-oldest"]["correct"]
    assert rows["drop-oldest"]["stood"] == OUT
    printed = capsys.readouterr().out
    assert "locomo: the right answer in what the model was shown" in printed
    assert "locomo: right answers by where the right answer stood" in printed
    evidence = printed.split("the right answer with the turns that say it (answered right)")[1]
    assert evidence.splitlines()[2].split()[1:] == ["1", "of", "1", "(1)", "0", "of", "1", "(0)"]
    bad = main(["eval", "--config", str(config), "--locomo", str(folder), "--dialogues",
                "conv-99", "--out", str(out)])  # fmt: skip
    assert bad == 2
    assert "conv-99 not in the file" in capsys.readouterr().err


def test_the_ledger_bench_counts_apart_what_only_the_merged_line_holds(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """`python -m evaluation.ledger --locomo` prints, beside what the splice shows, the
    answers still there with the merged line left out; that line goes and every other stays."""
    import sys

    from evaluation import ledger
    from middleware.condensing.ledger import Ledger

    said = [f"I met {name} in Tallinn on {day} May." for day, name in enumerate(NAMES, 1)]
    rendered = Ledger.grow(None, (), [{"role": "user", "content": s} for s in said]).render("", 60)
    assert "- merged(" in rendered.text
    kept = ledger.quoted_text(rendered.text).splitlines()
    assert kept
    assert not [line for line in kept if "merged(" in line]
    assert set(kept) == set(rendered.text.splitlines()) - {
        line for line in rendered.text.splitlines() if line.startswith("- merged(")
    }
    _, folder = write_both(tmp_path)
    argv = ["ledger", "--locomo", str(folder), "--dialogues", "conv-7", "--window", "2048"]
    monkeypatch.setattr(sys, "argv", argv)
    ledger.main()
    lines = capsys.readouterr().out.splitlines()
    head = next(line for line in lines if "ledger+tail+relevant" in line).split()
    assert head[head.index("ledger+tail+relevant") + 1] == ledger.IN_A_SENTENCE
    assert head[head.index(ledger.IN_A_SENTENCE) + 1] == ledger.LAST_EXCERPT
    assert head[-1] == ledger.EVIDENCE_DROPPED
    assert ledger.WITH_EVIDENCE in head
    single = next(line for line in lines if line.startswith("single_hop")).split()
    assert len(single) == len(head) + 1  # one cell per column


def test_the_last_excerpt_is_what_follows_the_quoted_blocks_last_gap_line() -> None:
    """The bench's last excerpt: the quoted passages after the block's last gap line, the
    whole block when it has none, nothing when nothing is quoted."""
    from evaluation.places import last_excerpt
    from middleware.condensing.relevance import Passage, quoted

    cabin = Passage(1, "user", "We booked the cabin.")
    lake = Passage(2, "assistant", "Which lake?")
    tahoe = Passage(7, "user", "Lake Tahoe.")
    apart = last_excerpt(f"notes\n{quoted([tahoe, cabin, lake])}")
    assert "cabin" in apart
    assert "Which lake?" in apart
    assert "Tahoe" not in apart
    assert "Tahoe" in last_excerpt(quoted([cabin, lake, tahoe]))
    assert "cabin" in last_excerpt(quoted([cabin, lake]))
    assert last_excerpt("notes and the tail, nothing quoted") == ""


NAMES = ("Ada", "Boris", "Chen", "Dana", "Emil", "Farah", "Goran", "Hana", "Ivo", "Jana")


def test_a_question_is_shown_its_evidence_only_with_every_sentence_of_those_turns() -> None:
    """A question's evidence turns are read with it (an id written "D1:02" too); a context
    shows them when it holds each of their sentences, in parts or whole, not when it holds
    only the answer's words; a question whose turns are not in the dialogue has none."""
    conversation = dialogue()
    conversation["session_1"][1]["text"] = "I adopted two greyhounds! They came from the shelter."
    qa = [{"question": "What did Ben adopt?", "answer": "two greyhounds",
           "evidence": ["D1:02"], "category": 4},
          {"question": "When?", "answer": "1 May 2023", "evidence": ["D9:99"], "category": 2}]  # fmt: skip
    adopt, when = locomo.dialogue_of("conv-7", conversation, qa, "test").questions
    first, second = "I adopted two greyhounds!", "They came from the shelter."
    assert adopt.said == (f"Ben: {first} {second} [and shared a photo of two dogs on a sofa]",)
    assert adopt.evidence_in(f"- Ben: {first}\n[…]\n{second} [and shared a photo of two "
                             "dogs on a sofa]")  # fmt: skip
    assert adopt.evidence_in(f"Ben: {first} It was two greyhounds.") is False
    assert when.said == ()
    assert when.evidence_in("[1:00 pm on 1 May, 2023] Ann: hello") is None


def test_the_turns_that_answer_a_question_are_its_evidence_else_those_holding_its_answer() -> None:
    """A message answers a question when it is one of its evidence turns (its session's date
    before it or not), not when it only repeats the answer's words; a question with no known
    evidence is answered by the turns holding every word of its answer."""
    conversation = dialogue()
    conversation["session_1"][0]["text"] = "Did you hear? Ben adopted two greyhounds."
    qa = [{"question": "What did Ben adopt?", "answer": "two greyhounds", "evidence": ["D1:2"],
           "category": 4},
          {"question": "What?", "answer": "two greyhounds", "evidence": ["D9:99"], "category": 4}]  # fmt: skip
    known, unknown = locomo.dialogue_of("conv-7", conversation, qa, "test").questions
    _, told, adopted, *_ = locomo.dialogue_of("conv-7", conversation, qa, "test").messages
    assert known.answers(str(adopted["content"]))
    assert not known.answers(str(told["content"]))
    assert unknown.answers(str(adopted["content"]))
    assert unknown.answers(str(told["content"]))
    assert not unknown.answers(f"{FILLER} (1.3)")
