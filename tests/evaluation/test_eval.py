"""`overspill eval`: seeded conversations, scoring, the conditions, the runner and the CLI."""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

import httpx
import orjson
import pytest
import respx

from cli.main import main
from evaluation.cli import (
    QUESTION_ROOM,
    _setup,
    default_seeds,
    parse_conditions,
    parse_kinds,
    parse_seeds,
    with_window,
)
from evaluation.conditions import (
    CONDITIONS,
    cut_middle,
    drop_oldest,
    masking,
    oracle,
    summary_prompt,
    text_of,
)
from evaluation.conversations import HELD_OUT_FROM, generate, seed_set
from evaluation.probes import PROBE_KINDS, Probe
from evaluation.report import chart, seed_ranges, table
from evaluation.runner import Row, Sent, Setup, condensed, run_conversation
from evaluation.targets import InProcess, Remote
from kernel.errors import ContextWindowExceeded
from kernel.store import DiskHistoryStore
from kernel.tokens import count_messages
from kernel.types import ChatRequest, ChatResponse, Message
from providers.fake import ScriptedProvider, completion, json_response
from proxy.system import build_system
from tests.conftest import AppClient, settings_from


def _count(messages: Sequence[Message]) -> int:
    return count_messages(messages)


def _texts(messages: Sequence[Message], role: str) -> str:
    return text_of([m for m in messages if m.get("role") == role])


def test_the_same_seed_gives_the_same_conversation() -> None:
    """Generation is deterministic: a seed and a size fix every byte and every probe."""
    assert generate(7) == generate(7)
    assert generate(7).messages != generate(8).messages
    assert len(generate(7, fillers=4).messages) < len(generate(7, fillers=30).messages)


def test_every_conversation_plants_each_probe_kind_once() -> None:
    """Each of the eight probe kinds is asked once per conversation, in the report's order."""
    for seed in (1, 2, 3, 1000, 1001):
        assert tuple(p.kind for p in generate(seed).probes) == PROBE_KINDS


def test_seeds_from_the_held_out_bound_are_held_out() -> None:
    """Seeds split into a tune set and a held-out set, named on each conversation."""
    assert seed_set(HELD_OUT_FROM - 1) == "tune"
    assert generate(HELD_OUT_FROM).seed_set == "held-out"


@pytest.mark.parametrize("seed", [1, 2, 3, 4, 5, 1000, 1001, 1002])
def test_each_value_lives_only_where_its_kind_says(seed: int) -> None:
    """A tool fact is only in a tool result, an assistant fact only in the assistant's words,
    a user fact is said by the user, a corrected value comes after its stale one."""
    conversation = generate(seed)
    probes = {p.kind: p for p in conversation.probes}
    tool, assistant = probes["tool_fact"], probes["assistant_fact"]
    assert tool.present(_texts(conversation.messages, "tool"))
    assert not tool.present(_texts(conversation.messages, "user"))
    assert not tool.present(_texts(conversation.messages, "assistant"))
    assert assistant.present(_texts(conversation.messages, "assistant"))
    assert not assistant.present(_texts(conversation.messages, "user"))
    assert not assistant.present(_texts(conversation.messages, "tool"))
    assert probes["user_fact"].present(_texts(conversation.messages, "user"))
    whole = text_of(conversation.messages).lower()
    corrected = probes["corrected_fact"]
    assert whole.index(corrected.stale[0].lower()) < whole.rindex(corrected.accept[0].lower())
    step = probes["next_step"]
    assert whole.index(step.stale[0].lower()) < whole.index(step.accept[0].lower())


def test_a_stale_value_scores_wrong_even_beside_the_right_one() -> None:
    """The latest value wins; an answer holding the corrected-away value is wrong."""
    probe = Probe("corrected_fact", "Which port?", ("8843",), ("8443",))
    assert probe.score("Port 8843.")
    assert not probe.score("8443")
    assert not probe.score("It was 8443, now 8843.")
    assert not probe.score("")


def test_a_value_must_stand_as_a_whole_token() -> None:
    """A value glued inside a longer token does not count; case and spacing do not matter."""
    probe = Probe("user_fact", "Which port?", ("8443",))
    assert not probe.score("18443")
    assert Probe("decision", "Which?", ("RabbitMQ",)).score("we chose rabbitmq.")
    assert Probe("identifier", "Which file?", ("src/a/b_c.py",)).score("`src/a/b_c.py`")


def test_request_points_are_where_the_assistant_answered() -> None:
    """The replay sends each prefix whose next message is the assistant's."""
    conversation = generate(1, fillers=6)
    points = conversation.request_points()
    assert points
    assert all(conversation.messages[i]["role"] == "assistant" for i in points)
    assert all(conversation.messages[i - 1]["role"] in ("user", "tool") for i in points)


def test_drop_oldest_keeps_the_system_and_whole_units_within_the_budget() -> None:
    """The oldest units go first; the system message stays; a tool call keeps its results."""
    messages = generate(2, fillers=12).messages
    kept = drop_oldest(messages, 1200, _count)
    assert kept is not None
    assert kept[0] == messages[0]
    assert _count(kept) <= 1200 < _count(messages)
    assert kept[-1] == messages[-1]
    assert kept[1]["role"] != "tool"
    assert drop_oldest(messages, 10, _count) is None


def test_the_oracle_keeps_the_turns_that_answer_and_the_newest_that_fit() -> None:
    """The oracle keeps the system message, the old turn holding the probe's value (which
    dropping the oldest loses at the same budget) and the newest whole units that fit after
    it; None when the answering turns alone cannot fit."""
    conversation = generate(2, fillers=12)
    messages, probe = conversation.messages, conversation.probes[0]
    kept = oracle(messages, 1200, _count, probe.answers)
    dropped = drop_oldest(messages, 1200, _count)
    assert kept is not None
    assert dropped is not None
    assert probe.present(text_of(kept))
    assert not probe.present(text_of(dropped))
    assert kept[0] == messages[0]
    assert kept[-1] == messages[-1]
    assert [m for m in kept if m in messages] == kept  # in the conversation's order
    assert _count(kept) <= 1200 < _count([*kept, messages[len(messages) - len(dropped)]])
    assert kept[-len(dropped) + 1 :] == dropped[-len(dropped) + 1 :]
    answering = [messages[0], *(m for m in messages if probe.answers(text_of([m])))]
    assert oracle(messages, _count(answering), _count, probe.answers) == answering
    assert oracle(messages, _count(answering) - 1, _count, probe.answers) is None


def test_masking_replaces_long_tool_results_with_placeholders() -> None:
    """Observation masking shows what each long tool result was, not its content."""
    messages = generate(2, fillers=12).messages
    masked = masking(messages, 100_000, _count)
    assert masked is not None
    assert _count(masked) < _count(messages)
    results = [m["content"] for m in masked if m["role"] == "tool"]
    assert any(text.startswith("[tool result of run_command(") for text in results)
    assert masking(messages, 100, _count) is None


def test_middle_cut_keeps_the_opening_and_the_newest_with_a_marker() -> None:
    """The instruction at the start and the last turn survive; a marker says what went."""
    messages = generate(2, fillers=12).messages
    kept = cut_middle(messages, 1200, _count)
    assert kept is not None
    assert _count(kept) <= 1200
    assert kept[:3] == list(messages[:3])
    assert kept[-1] == messages[-1]
    assert any("overspill removed" in str(m.get("content")) for m in kept)
    assert cut_middle(messages, 50, _count) is None


def test_the_summary_prompt_keeps_the_newest_part_that_fits() -> None:
    """The naive summariser's one call holds the whole transcript, or its newest part."""
    messages = generate(2, fillers=12).messages
    whole = summary_prompt(messages, 100_000, _count)
    part = summary_prompt(messages, 800, _count)
    assert whole is not None
    assert part is not None
    assert str(messages[1]["content"]) in str(whole[0]["content"])
    assert str(messages[1]["content"]) not in str(part[0]["content"])
    assert str(messages[-1]["content"]) in str(part[0]["content"])
    assert _count(part) <= 800


class Oracle:
    """A target that answers each probe from its last message: right, stale, or failing."""

    def __init__(self, probes: Sequence[Probe], *, stale: bool = False) -> None:
        self.answers: dict[str, str] = {}
        for p in probes:  # two probes with one prompt (an instruction's task): both answered
            said = (p.stale or p.accept)[0] if stale else p.accept[0]
            self.answers[p.prompt] = f"{self.answers.get(p.prompt, '')} {said}".strip()
        self.asked: list[Sequence[Message]] = []
        self.sent: list[tuple[int, str, bool]] = []
        self.overflow_over: int | None = None

    def _answer(self, messages: Sequence[Message]) -> str:
        if self.overflow_over is not None and _count(messages) > self.overflow_over:
            raise ContextWindowExceeded("too long")
        return self.answers.get(str(messages[-1]["content"]), "a summary")

    async def ask(self, messages: Sequence[Message], *, max_tokens: int) -> str:
        self.asked.append(messages)
        return self._answer(messages)

    async def send(
        self, messages: Sequence[Message], conversation: str, *, play: bool, max_tokens: int
    ) -> Sent:
        self.sent.append((len(messages), conversation, play))
        return Sent(self._answer(messages), replaced=len(messages) // 15 * 10, shown=None)


SETUP = Setup(budget=1500, summary_room=3000, count=_count)


async def test_every_condition_scores_every_probe() -> None:
    """Right answers score right under every condition; each condition gives one row per probe."""
    conversation = generate(3, fillers=10)
    target = Oracle([*conversation.probes, *generate(3, fillers=0).probes])
    rows = await run_conversation(target, conversation, CONDITIONS, SETUP)
    assert len(rows) == len(CONDITIONS) * len(PROBE_KINDS)
    assert {r.condition for r in rows} == set(CONDITIONS)
    assert all(r.status == "ok" and r.correct for r in rows if r.condition != "masking")


async def test_the_oracle_shows_each_probe_the_turns_that_answer_it() -> None:
    """Under the oracle each probe is asked after its own answering turns: every value is in
    what its probe was shown, though the conversation is past the budget."""
    conversation = generate(3, fillers=10)
    target = Oracle(conversation.probes)
    rows = await run_conversation(target, conversation, ["oracle"], SETUP)
    assert [r.kind for r in rows] == list(PROBE_KINDS)
    assert all(r.status == "ok" and r.present and r.correct for r in rows)
    assert _count(conversation.messages) > SETUP.budget
    assert all(_count(asked[:-1]) <= SETUP.budget for asked in target.asked)
    assert len({tuple(map(str, asked[:-1])) for asked in target.asked}) > 1


async def test_short_asks_each_kind_after_the_same_seed_without_fillers() -> None:
    """`short` asks each kind the run asks once, after the seed's few-turn conversation."""
    conversation = generate(3, fillers=10)
    short = generate(3, fillers=0)
    target = Oracle(short.probes)
    rows = await run_conversation(target, conversation, ["short"], SETUP)
    assert [r.kind for r in rows] == list(PROBE_KINDS)
    assert [r.question for r in rows] == [p.question for p in short.probes]
    assert all(r.correct for r in rows)
    assert {len(asked) for asked in target.asked} == {len(short.messages) + 1}
    assert len(short.messages) < len(conversation.messages) // 2
    fewer = replace(conversation, probes=conversation.probes[:2])
    rows = await run_conversation(target, fewer, ["short"], SETUP)
    assert [r.kind for r in rows] == [p.kind for p in conversation.probes[:2]]


async def test_stale_answers_score_wrong() -> None:
    """An answer with the stale value is wrong (corrected facts, decisions, next steps)."""
    conversation = generate(3, fillers=10)
    rows = await run_conversation(
        Oracle(conversation.probes, stale=True), conversation, ["full"], SETUP
    )
    wrong = {r.kind for r in rows if not r.correct}
    assert wrong == {"corrected_fact", "decision", "next_step"}


async def test_the_turns_condition_replays_the_conversation_then_probes() -> None:
    """overspill-turns sends every request point as a turn, then each probe as one
    conversation; growths are the distinct replaced counts it saw."""
    conversation = generate(3, fillers=10)
    target = Oracle(conversation.probes)
    rows = await run_conversation(target, conversation, ["overspill-turns"], SETUP)
    turns = [sent for sent in target.sent if sent[2]]
    assert [n for n, _, _ in turns] == conversation.request_points()
    assert len({name for _, name, _ in target.sent}) == 1
    expected = len({n // 15 * 10 for n, _, _ in target.sent} - {0})
    assert {r.growths for r in rows} == {expected}
    assert expected >= 2
    assert all(r.condensed is not None and 0 <= r.condensed <= expected for r in rows)


def test_condensed_counts_the_growths_that_covered_the_latest_mention() -> None:
    """A value's latest message is condensed by each growth whose extraction reaches it
    (system messages not counted); a later mention resets the count; no mention is None."""
    probe = Probe("user_fact", "What is the code?", ("PRJ-4242",))
    messages: list[Message] = [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": "The code is PRJ-4242."},  # position 1
        {"role": "assistant", "content": "Noted."},
        {"role": "user", "content": "Still PRJ-4242, mind you."},  # position 3
        {"role": "assistant", "content": "Yes."},
    ]
    assert condensed(messages, probe, {2, 3, 4}) == 2
    assert condensed(messages, probe, {1, 2}) == 0
    assert condensed(messages[:3], probe, {1, 2}) == 2
    assert condensed(messages, probe, set()) == 0
    assert condensed(messages[:1], probe, {1}) is None


async def test_an_overflow_is_not_asked_and_not_scored() -> None:
    """A condition the window refuses gives rows marked overflow, neither right nor wrong."""
    conversation = generate(3, fillers=10)
    target = Oracle(conversation.probes)
    target.overflow_over = 1500
    rows = await run_conversation(target, conversation, ["full", "drop-oldest"], SETUP)
    full = [r for r in rows if r.condition == "full"]
    assert {r.status for r in full} == {"overflow"}
    assert {r.correct for r in full} == {None}
    assert all(r.status == "ok" for r in rows if r.condition == "drop-oldest")


CONFIG = """
model_list:
  - model_name: local
    litellm_params: {model: openai/smollm2, api_base: "http://upstream.test/v1"}
    context: {window: 1536}
general_settings: {upstream_client: httpx}
"""


def _notes(request: ChatRequest) -> ChatResponse:
    """Extraction calls get notes, everything else a short answer."""
    return json_response(
        "- the user and the assistant talked about the services", prompt_tokens=200
    )


def _extraction_refused(request: ChatRequest) -> ChatResponse:
    """An extraction's call (notes asked on the conversation) is refused; every other
    call gets an answer."""
    if "Write notes on the conversation" in str(request.messages[-1].get("content")):
        return json_response("I'm sorry, but I can't help with that.", prompt_tokens=200)
    return json_response("8443", prompt_tokens=200)


async def test_rows_answered_beside_a_fallback_say_so_and_the_table_warns(tmp_path: Path) -> None:
    """When the extraction fails (the model refuses) and a middle cut stands in, each
    overspill row says what stood in, and the table warns that those rows measure the
    fallback, not compaction."""
    fake = ScriptedProvider([_extraction_refused])
    system = build_system(
        settings_from(CONFIG), providers={"local": [fake]}, store=DiskHistoryStore(tmp_path / "s")
    )
    try:
        conversation = generate(5, fillers=24)
        rows = await run_conversation(
            InProcess(system, "local"), conversation, ["overspill-once"], SETUP
        )
    finally:
        await system.aclose()
    assert {r.status for r in rows} == {"ok"}
    assert {r.stand_in for r in rows} == {"middle_cut"}
    printed = table(rows, ["overspill-once"])
    assert "warning: the extraction failed" in printed
    assert f"overspill-once, tune seed 5: {len(rows)} row(s) beside a middle_cut" in printed
    assert "warning" not in table(
        [replace(r, stand_in="extract") for r in rows], ["overspill-once"]
    )


async def test_in_process_the_real_layers_grow_nested_extractions(tmp_path: Path) -> None:
    """Replayed turn by turn through the real pipeline, a conversation three times the window
    grows its extraction more than once, and the probes see it spliced."""
    fake = ScriptedProvider([_notes])
    system = build_system(
        settings_from(CONFIG), providers={"local": [fake]}, store=DiskHistoryStore(tmp_path / "s")
    )
    try:
        target = InProcess(system, "local")
        conversation = generate(5, fillers=24)
        assert _count(conversation.messages) > 3 * 1536
        rows = await run_conversation(target, conversation, ["overspill-turns"], SETUP)
    finally:
        await system.aclose()
    assert {r.status for r in rows} == {"ok"}
    (growths,) = {r.growths for r in rows}
    assert growths is not None
    assert growths >= 2
    by_kind = {r.kind: r.condensed for r in rows}
    assert by_kind["instruction"] == growths  # the first turn: condensed by every growth
    assert all(c is not None and 0 <= c <= growths for c in by_kind.values())
    probes = [
        r
        for r in fake.requests
        if "Answer with just the value" in str(r.messages[-1].get("content"))
    ]
    assert probes
    assert all(len(r.messages) < len(conversation.messages) for r in probes)


def test_seed_and_condition_arguments() -> None:
    """--seeds takes ranges, --conversations splits tune and held-out, names are checked."""
    assert parse_seeds("1-3,1000,2") == [1, 2, 3, 1000]
    assert default_seeds(3) == [1, 2, HELD_OUT_FROM]
    assert parse_conditions("drop-oldest,full") == ["full", "drop-oldest"]
    with pytest.raises(ValueError, match="known: short, full"):
        parse_conditions("full,nonsense")
    with pytest.raises(ValueError, match="not a seed"):
        parse_seeds("a-b")
    assert parse_kinds("instruction, user_fact") == ["user_fact", "instruction"]
    with pytest.raises(ValueError, match="unknown facts"):
        parse_kinds("facts")


def test_the_baselines_budget_leaves_room_for_the_question_and_the_answer() -> None:
    """A baseline's prompt stays under the window less the answer, the question and the
    margin; the naive summary is at most a quarter of the window."""
    entry = settings_from(CONFIG).model_list[0]
    setup = _setup(entry, 1536, run="r", answer_tokens=48)
    assert setup.budget + 48 + QUESTION_ROOM < 1536
    assert setup.summary_tokens == 384
    assert _setup(entry, 768, run="r").summary_tokens == 192


def test_window_overrides_only_the_chosen_model() -> None:
    """--window plans the chosen model for that window and leaves the others be."""
    settings = with_window(settings_from(), "other", 999)
    windows = {e.model_name: e.context.window for e in settings.model_list}
    assert windows == {"local": 2048, "other": 999}


def _upstream(request: httpx.Request) -> httpx.Response:
    body = json.loads(request.content)
    last = str(body["messages"][-1].get("content"))
    text = "- notes about the services" if "Answer with just" not in last else "I do not know"
    return httpx.Response(200, json=completion(text, prompt_tokens=100))


@respx.mock
def test_the_cli_writes_json_lines_and_prints_a_table(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`overspill eval` writes one JSON line per probe asked and condition, and a table per
    seed set naming every condition."""
    respx.post("http://upstream.test/v1/chat/completions").mock(side_effect=_upstream)
    config = tmp_path / "config.yaml"
    config.write_text(CONFIG)
    out = tmp_path / "rows.jsonl"
    status = main(
        ["eval", "--config", str(config), "--seeds", "1,1000", "--fillers", "6",
         "--conditions", "full,overspill-once,drop-oldest", "--out", str(out),
         "--kinds", "user_fact,tool_fact,instruction"]
    )  # fmt: skip
    assert status == 0
    rows = [orjson.loads(line) for line in out.read_bytes().splitlines()]
    assert len(rows) == 2 * 3 * 3
    assert {r["status"] for r in rows} == {"ok"}
    assert {r["kind"] for r in rows} == {"user_fact", "tool_fact", "instruction"}
    assert {r["seed_set"] for r in rows} == {"tune", "held-out"}
    printed = capsys.readouterr().out
    assert "tune seeds 1, tune templates:" in printed
    assert "held-out seeds 1000, tune templates:" in printed
    assert {r["templates"] for r in rows} == {"tune"}
    assert all(name in printed for name in ("full", "overspill-once", "drop-oldest"))


@respx.mock
def test_a_run_stopped_part_way_keeps_every_answer_it_had(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each row is written as soon as its probe is answered: a run interrupted (Ctrl-C) on its
    third question leaves the first two in --out."""
    respx.post("http://upstream.test/v1/chat/completions").mock(side_effect=_upstream)
    asked = InProcess.ask

    async def interrupted(self: InProcess, messages: Sequence[Message], *, max_tokens: int) -> str:
        if sum(1 for line in out.read_bytes().splitlines()) == 2:
            raise KeyboardInterrupt
        return await asked(self, messages, max_tokens=max_tokens)

    monkeypatch.setattr(InProcess, "ask", interrupted)
    config = tmp_path / "config.yaml"
    config.write_text(CONFIG)
    out = tmp_path / "rows.jsonl"
    with pytest.raises(KeyboardInterrupt):
        main(
            ["eval", "--config", str(config), "--seeds", "1", "--fillers", "6",
             "--conditions", "full", "--out", str(out),
             "--kinds", "user_fact,tool_fact,instruction"]
        )  # fmt: skip
    rows = [orjson.loads(line) for line in out.read_bytes().splitlines()]
    assert [(r["condition"], r["status"]) for r in rows] == [("full", "ok")] * 2


@respx.mock
def test_resume_asks_only_what_a_stopped_run_lacks_and_keeps_its_answers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run stopped on its third question, then resumed: the first two rows stay as they
    were, only the third question is asked, and --out holds each probe once."""
    upstream = respx.post("http://upstream.test/v1/chat/completions").mock(side_effect=_upstream)
    asked = InProcess.ask

    async def interrupted(self: InProcess, messages: Sequence[Message], *, max_tokens: int) -> str:
        if sum(1 for line in out.read_bytes().splitlines()) == 2:
            raise KeyboardInterrupt
        return await asked(self, messages, max_tokens=max_tokens)

    config = tmp_path / "config.yaml"
    config.write_text(CONFIG)
    out = tmp_path / "rows.jsonl"
    command = ["eval", "--config", str(config), "--seeds", "1", "--fillers", "6",
               "--conditions", "full", "--out", str(out),
               "--kinds", "user_fact,tool_fact,instruction"]  # fmt: skip
    with monkeypatch.context() as patched:
        patched.setattr(InProcess, "ask", interrupted)
        with pytest.raises(KeyboardInterrupt):
            main(command)
    first = out.read_bytes().splitlines()
    before = upstream.call_count
    assert main([*command, "--resume"]) == 0
    assert upstream.call_count - before == 1
    lines = out.read_bytes().splitlines()
    assert lines[:2] == first
    rows = [orjson.loads(line) for line in lines]
    assert sorted(r["kind"] for r in rows) == ["instruction", "tool_fact", "user_fact"]
    assert {r["status"] for r in rows} == {"ok"}
    assert main([*command, "--resume"]) == 0
    assert upstream.call_count - before == 1
    assert out.read_bytes().splitlines() == lines


@respx.mock
def test_resume_asks_overspill_again_beside_the_extraction_in_store(tmp_path: Path) -> None:
    """A probe whose call failed is asked again; under overspill with --store it is asked
    alone, beside the stored extraction (no extraction call), and its row replaced."""
    upstream = respx.post("http://upstream.test/v1/chat/completions").mock(side_effect=_upstream)
    config = tmp_path / "config.yaml"
    config.write_text(CONFIG + "general_settings: {upstream_client: httpx}\n")
    out = tmp_path / "rows.jsonl"
    command = ["eval", "--config", str(config), "--seeds", "1", "--fillers", "12",
               "--conditions", "overspill-once", "--kinds", "user_fact,tool_fact",
               "--store", str(tmp_path / "kept"), "--out", str(out)]  # fmt: skip
    assert main(command) == 0
    rows = [orjson.loads(line) for line in out.read_bytes().splitlines()]
    rows[1] = {**rows[1], "status": "error", "answer": None, "correct": None, "detail": "timeout"}
    out.write_bytes(b"".join(orjson.dumps(row) + b"\n" for row in rows))
    before = upstream.call_count
    assert main([*command, "--resume"]) == 0
    assert upstream.call_count - before == 1
    again = [orjson.loads(line) for line in out.read_bytes().splitlines()]
    assert again[0] == rows[0]
    assert [(r["kind"], r["status"]) for r in again] == [
        (rows[0]["kind"], "ok"),
        (rows[1]["kind"], "ok"),
    ]


@respx.mock
def test_resume_that_cannot_write_its_kept_rows_leaves_out_as_it_was(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A disk that fills while a resumed run writes the rows it keeps: the run stops naming
    --out, which holds its rows as before, and no partial copy is left beside it."""
    respx.post("http://upstream.test/v1/chat/completions").mock(side_effect=_upstream)
    config = tmp_path / "config.yaml"
    config.write_text(CONFIG)
    out = tmp_path / "rows.jsonl"
    command = ["eval", "--config", str(config), "--seeds", "1", "--fillers", "6",
               "--conditions", "full", "--out", str(out), "--kinds", "user_fact"]  # fmt: skip
    assert main(command) == 0
    before = out.read_bytes()

    def full(rows: object, sink: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr("evaluation.cli.write_jsonl", full)
    assert main([*command, "--resume"]) == 2
    assert "--out: [Errno 28] No space left on device" in capsys.readouterr().err
    assert out.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["config.yaml", "rows.jsonl"]


def test_resume_refuses_an_out_file_that_holds_no_rows(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """--resume on a file that is not a results file says which line is wrong and leaves it."""
    config = tmp_path / "config.yaml"
    config.write_text(CONFIG)
    out = tmp_path / "notes.txt"
    out.write_bytes(b"my notes\n")
    status = main(["eval", "--config", str(config), "--seeds", "1", "--conditions", "full",
                   "--out", str(out), "--resume"])  # fmt: skip
    assert status == 2
    assert f"--resume: {out}:1: not JSON" in capsys.readouterr().err
    assert out.read_bytes() == b"my notes\n"


@respx.mock
def test_keep_shown_puts_what_the_model_was_shown_in_each_row(tmp_path: Path) -> None:
    """With --keep-shown a row holds what the model saw before the question (the stand-in
    and the tail under overspill, the kept messages under a baseline); without it, nothing."""
    respx.post("http://upstream.test/v1/chat/completions").mock(side_effect=_upstream)
    config = tmp_path / "config.yaml"
    config.write_text(CONFIG + "general_settings: {upstream_client: httpx}\n")
    runs = {}
    for flag in ([], ["--keep-shown"]):
        out = tmp_path / f"rows{len(flag)}.jsonl"
        status = main(
            ["eval", "--config", str(config), "--seeds", "1", "--fillers", "12",
             "--conditions", "overspill-once,drop-oldest", "--kinds", "user_fact",
             "--out", str(out), *flag]
        )  # fmt: skip
        assert status == 0
        runs[bool(flag)] = [orjson.loads(line) for line in out.read_bytes().splitlines()]
    assert all(row["shown"] is None for row in runs[False])
    shown = {row["condition"]: row["shown"] for row in runs[True]}
    assert "Quoted facts" in shown["overspill-once"]
    assert "Quoted facts" not in shown["drop-oldest"]
    assert shown["drop-oldest"].startswith("system: ")


@respx.mock
def test_a_second_run_on_the_same_store_reuses_the_first_runs_extraction(tmp_path: Path) -> None:
    """With --store, a second run of the same conversation makes no extraction call: it asks
    only the probes, on the extraction the first run stored."""
    upstream = respx.post("http://upstream.test/v1/chat/completions").mock(side_effect=_upstream)
    config = tmp_path / "config.yaml"
    config.write_text(CONFIG + "general_settings: {upstream_client: httpx}\n")
    calls, shown = [], []
    for run in range(2):
        out = tmp_path / f"rows{run}.jsonl"
        before = upstream.call_count
        status = main(
            ["eval", "--config", str(config), "--seeds", "1", "--fillers", "12",
             "--conditions", "overspill-once", "--kinds", "user_fact,tool_fact",
             "--store", str(tmp_path / "kept"), "--keep-shown", "--out", str(out)]
        )  # fmt: skip
        assert status == 0
        calls.append(upstream.call_count - before)
        shown.append([orjson.loads(line)["shown"] for line in out.read_bytes().splitlines()])
    assert calls[0] > 2
    assert calls[1] == 2  # the two probes
    assert shown[0] == shown[1]
    assert "Quoted facts" in shown[1][0]


def test_the_chart_is_a_png_of_recall(tmp_path: Path) -> None:
    """The chart is drawn from the rows: a PNG file, whatever conditions ran."""
    from evaluation.runner import Row

    rows = [
        Row(1, "tune", "full", "user_fact", "q", "ok", "v", True),
        Row(1, "tune", "overspill-turns", "user_fact", "q", "ok", "v", True, growths=3),
        Row(2, "tune", "overspill-turns", "tool_fact", "q", "ok", "x", False, growths=5),
        Row(2, "tune", "overspill-turns", "user_fact", "q", "ok", "v", True, condensed=4),
        Row(2, "tune", "overspill-once", "user_fact", "q", "ok", "v", False, condensed=1),
    ]
    path = tmp_path / "recall.png"
    chart(rows, ["full", "overspill-once", "overspill-turns"], path)
    assert path.read_bytes().startswith(b"\x89PNG")


def test_the_cli_says_how_to_get_the_chart(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without matplotlib, --chart stops before any work and names the extra to install."""
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    out = tmp_path / "rows.jsonl"
    chart = str(tmp_path / "c.png")
    assert main(["eval", "--config", "missing.yaml", "--chart", chart, "--out", str(out)]) == 2
    assert "pip install 'overspill[eval]'" in capsys.readouterr().err
    assert not out.exists()


def test_the_cli_refuses_bad_arguments_clearly(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """An unknown condition, an unknown model, --url without a window, a missing config, an
    --out that cannot be written, --store with --url, naming a file or under one: status 2,
    and a message saying what to fix."""
    config = tmp_path / "config.yaml"
    config.write_text(CONFIG)
    out = str(tmp_path / "rows.jsonl")
    assert main(["eval", "--config", str(config), "--conditions", "best", "--out", out]) == 2
    assert "unknown best" in capsys.readouterr().err
    assert main(["eval", "--config", str(config), "--model", "nope", "--out", out]) == 2
    assert "'nope' is not a model" in capsys.readouterr().err
    assert main(["eval", "--config", str(config), "--url", "http://x", "--out", out]) == 2
    assert "--url needs --model and --window" in capsys.readouterr().err
    assert main(["eval", "--config", str(tmp_path / "none.yaml"), "--out", out]) == 2
    assert "none.yaml" in capsys.readouterr().err
    assert main(["eval", "--config", str(config), "--out", str(tmp_path / "no" / "r")]) == 2
    assert "--out" in capsys.readouterr().err
    url = ["--url", "http://x", "--model", "m", "--window", "4096"]
    assert main(["eval", "--store", str(tmp_path), *url, "--out", out]) == 2
    assert "--store: a running server keeps its own store" in capsys.readouterr().err
    assert main(["eval", "--config", str(config), "--store", str(config), "--out", out]) == 2
    assert "is not a folder" in capsys.readouterr().err
    under_a_file = str(config / "store")
    assert main(["eval", "--config", str(config), "--store", under_a_file, "--out", out]) == 2
    assert "--store: cannot open the history store" in capsys.readouterr().err


def test_the_cli_refuses_a_count_that_is_not_above_zero(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """--window, --answer-tokens and --conversations take whole numbers above 0, --fillers 0
    or more: anything else stops at the argument, naming it (a window of -5 ran every probe)."""
    for option, value, said in (
        ("--window", "-5", "-5 is not above 0"),
        ("--fillers", "-1", "-1 is below 0"),
        ("--answer-tokens", "x", "'x' is not a whole number"),
        ("--conversations", "0", "0 is not above 0"),
    ):
        with pytest.raises(SystemExit) as stopped:
            main(["eval", "--config", "missing.yaml", option, value])
        assert stopped.value.code == 2
        assert f"argument {option}: {said}" in capsys.readouterr().err


def test_a_run_whose_every_probe_failed_says_why_and_fails(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """When no probe is answered and one failed (an upstream not running), the run ends with
    status 1 and the first failure's detail, each conversation's line counts its failures, and
    the rows are written: a table of dashes with status 0 read as a measurement."""
    config = tmp_path / "config.yaml"
    config.write_text(CONFIG.replace("http://upstream.test/v1", "http://127.0.0.1:9/v1"))
    out = tmp_path / "rows.jsonl"
    asked = ["--kinds", "user_fact", "--seeds", "1", "--conditions", "full"]
    assert main(["eval", "--config", str(config), *asked, "--out", str(out)]) == 1
    err = capsys.readouterr().err
    assert "full: 0/0 right, 1 failed" in err
    assert "eval: no probe was answered; the first failure: cannot reach upstream" in err
    assert len(out.read_text().splitlines()) == 1
    assert main(["eval", "--report", str(out)]) == 1


def test_a_run_refused_before_its_first_call_leaves_the_earlier_rows_in_out(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A missing config, an unknown model, a store that cannot be opened or a LoCoMo file that
    is not one is refused before --out is opened: an earlier run's rows are still there."""
    config = tmp_path / "config.yaml"
    config.write_text(CONFIG)
    out = tmp_path / "rows.jsonl"
    out.write_text('{"earlier": "rows"}\n')
    not_locomo = tmp_path / "locomo10.json"
    not_locomo.write_text("{}")
    refused = [
        ["--config", str(tmp_path / "none.yaml")],
        ["--config", str(config), "--model", "nope"],
        ["--config", str(config), "--store", str(config / "store")],
        ["--config", str(config), "--locomo", str(not_locomo)],
    ]
    for arguments in refused:
        assert main(["eval", *arguments, "--out", str(out)]) == 2
        assert capsys.readouterr().err
        assert out.read_text() == '{"earlier": "rows"}\n'


def test_the_table_counts_what_was_not_asked_apart() -> None:
    """Overflowed probes are neither right nor wrong: recall is over the asked ones."""
    from evaluation.runner import Row

    rows = [
        Row(1, "tune", "full", "user_fact", "q", "ok", "v", True),
        Row(1, "tune", "full", "user_fact", "q", "overflow"),
        Row(1, "tune", "full", "tool_fact", "q", "ok", "x", False),
    ]
    printed = table(rows, ["full"])
    lines = {line.split()[0]: line.split()[1:] for line in printed.splitlines()[2:]}
    assert lines["user_fact"] == ["100%"]
    assert lines["tool_fact"] == ["0%"]
    assert lines["not"] == ["asked", "1"]
    assert lines["all"] == ["50%"]


def _cells(printed: str) -> dict[str, list[str]]:
    """A printed table's lines by their label (the first 16 characters): the cells after it."""
    return {line[:16].strip(): line[16:].split() for line in printed.splitlines()}


def _probe(condition: str, seed: int, kind: str, right: bool | None) -> Row:
    """A tune seed's probe row: right or wrong, or not asked (None: it overflowed)."""
    status = "overflow" if right is None else "ok"
    return Row(seed, "tune", condition, kind, "q", status, "a", right)


def test_the_table_pairs_each_condition_with_the_full_history_probe_by_probe() -> None:
    """Lost: right under full, wrong here; won: the other way round; probes both miss or
    only one asked do not count, and full itself and short (another conversation) are
    not paired."""
    rows = [
        _probe("full", 1, "user_fact", True),
        _probe("full", 1, "tool_fact", False),
        _probe("full", 1, "decision", False),
        _probe("full", 2, "user_fact", True),
        _probe("full", 2, "decision", None),
        _probe("overspill-once", 1, "user_fact", False),  # lost
        _probe("overspill-once", 1, "tool_fact", True),  # won
        _probe("overspill-once", 1, "decision", False),  # both miss
        _probe("overspill-once", 2, "user_fact", True),  # both right
        _probe("overspill-once", 2, "decision", True),  # full did not ask it
        _probe("short", 1, "user_fact", False),
    ]
    printed = table(rows, ["short", "full", "overspill-once"])
    lines = _cells(printed)
    assert lines["lost vs full"] == ["-", "-", "1"]
    assert lines["won vs full"] == ["-", "-", "1"]
    assert lines["kept of full"] == ["-", "-", "1", "of", "2"]
    assert "vs full" not in table(rows, ["short", "overspill-once"])
    assert "read more than once" not in printed


def test_a_whole_history_read_twice_is_right_only_where_every_reading_is() -> None:
    """A probe the whole history answered right on one reading and wrong on another is not
    paired as right; the table says how many probes were read again and how many of them
    the readings disagree on."""
    rows = [
        _probe("full", 1, "user_fact", True),
        _probe("full", 1, "user_fact", True),
        _probe("full", 1, "tool_fact", True),
        _probe("full", 1, "tool_fact", False),
        _probe("overspill-once", 1, "user_fact", True),
        _probe("overspill-once", 1, "tool_fact", False),
    ]
    printed = table(rows, ["full", "overspill-once"])
    lines = _cells(printed.split("points against full")[0])
    assert lines["lost vs full"] == ["-", "0"]  # tool_fact: right on one reading only
    assert lines["kept of full"] == ["-", "1", "of", "1"]
    assert lines["user_fact"] == ["100%", "100%"]
    assert lines["tool_fact"] == ["50%", "0%"]  # each reading counts in the recall
    assert "full read more than once: 2 probes, right in some readings and wrong in others 1" in (
        printed
    )


def test_the_table_gives_points_against_full_on_the_probes_both_asked() -> None:
    """Each kind's gap to the whole history is measured on the probes both conditions asked,
    so a conversation only one condition ran does not move it; the table says how many
    conversations each condition ran."""
    rows = [
        _probe("full", 1, "user_fact", True),
        _probe("full", 2, "user_fact", True),
        _probe("full", 3, "user_fact", False),
        _probe("full", 1, "decision", True),
        _probe("overspill-once", 1, "user_fact", True),
        _probe("overspill-once", 2, "user_fact", False),
        _probe("overspill-once", 3, "user_fact", False),
        _probe("overspill-once", 4, "user_fact", True),  # full did not run seed 4
        _probe("overspill-once", 1, "decision", True),
    ]
    printed = table(rows, ["full", "overspill-once"])
    recall, gaps = printed.split("points against full on the probes both asked:\n")
    lines = _cells(recall)
    assert lines["user_fact"] == ["67%", "50%"]  # recall over each condition's own probes
    assert lines["conversations"] == ["3", "4"]
    gap = _cells(gaps)
    assert gap["user_fact"] == ["-", "-33"]  # 1 of 3 against 2 of 3; seed 4 left out
    assert gap["decision"] == ["-", "+0"]
    assert gap["tool_fact"] == ["-", "-"]
    assert gap["all"] == ["-", "-25"]


def test_the_table_groups_recall_by_how_often_the_value_was_condensed() -> None:
    """Rows that know their condensed count are grouped in bins, each cell saying how many
    answers it is of; a kind no condition answers right is left out of those lines."""
    from evaluation.runner import Row

    def turns(kind: str, right: bool, condensed: int) -> Row:
        return Row(1, "tune", "overspill-turns", kind, "q", "ok", "a", right, condensed=condensed)

    rows = [
        turns("user_fact", True, 0),
        turns("tool_fact", False, 0),
        turns("decision", True, 5),
        turns("instruction", False, 12),
        Row(1, "tune", "full", "instruction", "q", "ok", "a", False),
        Row(1, "tune", "full", "tool_fact", "q", "ok", "a", True),
    ]
    printed = table(rows, ["full", "overspill-turns"])
    lines = _cells(printed)
    assert lines["condensed 0"] == ["-", "50%", "of", "2"]
    assert lines["condensed 4-6"] == ["-", "100%", "of", "1"]
    assert lines["condensed 10+"] == ["-", "-"]  # the instruction: no condition answers it
    assert "recall by how often the value was condensed" in printed
    assert "condensed" not in table(
        [Row(1, "tune", "full", "user_fact", "q", "ok", "v", True)], ["full"]
    )


async def test_a_running_server_is_evaluated_over_http(app_client: AppClient) -> None:
    """Against a running overspill: a baseline's probe is sent as it is (the history layers
    skip it), the replayed turns are one conversation, and its growths show in the headers."""
    fake = ScriptedProvider([_notes])
    client = app_client({"local": [fake]}, settings=settings_from(CONFIG), key=None)
    target = Remote(client, "local", None)
    conversation = generate(5, fillers=24)
    rows = await run_conversation(target, conversation, ["drop-oldest", "overspill-turns"], SETUP)
    assert {r.status for r in rows} == {"ok"}
    baseline = [r for r in fake.requests if r.messages[0] == conversation.messages[0]]
    kept = drop_oldest(conversation.messages, SETUP.budget, _count)
    assert kept is not None
    assert baseline[0].messages[:-1] == tuple(kept)
    (growths,) = {r.growths for r in rows if r.condition == "overspill-turns"}
    assert growths is not None
    assert growths >= 1


async def test_a_refusal_of_a_running_server_is_an_overflow_or_an_error() -> None:
    """A context_length_exceeded answer marks the probe overflowed; another refusal, an error."""

    def refuse(request: httpx.Request) -> httpx.Response:
        code = "context_length_exceeded" if b"Answer with just" in request.content else "other"
        return httpx.Response(400, json={"error": {"message": "no", "code": code}})

    conversation = generate(1, fillers=0)
    async with httpx.AsyncClient(
        transport=httpx.MockTransport(refuse), base_url="http://overspill.test"
    ) as client:
        rows = await run_conversation(Remote(client, "local", "sk"), conversation, ["full"], SETUP)
    assert {r.kind: r.status for r in rows} == {
        kind: "error" if kind == "instruction" else "overflow" for kind in PROBE_KINDS
    }


def test_the_ledger_alone_keeps_every_probes_value_of_a_long_generated_conversation() -> None:
    """On tune seeds with 60 filler episodes (hundreds of search hits and test lines), one
    extraction's quoted facts at a 2,048-token window's size, with no notes at all, still
    hold the right value of every probe kind."""
    from middleware.condensing.ledger import Ledger

    for seed in (1, 2, 3):
        conversation = generate(seed, fillers=60)
        shown = Ledger.grow(None, (), conversation.messages[1:-12]).render("", 480).text.lower()
        tail = text_of(conversation.messages[-12:]).lower()
        for probe in conversation.probes:
            assert any(v.lower() in f"{shown}\n{tail}" for v in probe.accept), (seed, probe.kind)


def _rows_file(path: Path, rows: Sequence[object]) -> Path:
    from evaluation.report import write_jsonl
    from evaluation.runner import Row

    with path.open("wb") as sink:
        write_jsonl([row for row in rows if isinstance(row, Row)], sink)
    return path


def test_report_reads_split_runs_into_one_table_and_chart(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """--report reads the rows of several saved runs, prints the one table a single run
    would, and draws the chart from all of them; nothing is run, no --out written."""
    from evaluation.runner import Row

    full = _rows_file(
        tmp_path / "full.jsonl",
        [
            Row(1, "tune", "full", "user_fact", "q", "ok", "v", True),
            Row(1000, "held-out", "full", "user_fact", "q", "ok", "x", False),
        ],
    )
    turns = _rows_file(
        tmp_path / "turns.jsonl",
        [
            Row(
                1,
                "tune",
                "overspill-turns",
                "user_fact",
                "q",
                "ok",
                "v",
                True,
                True,
                growths=6,
                shown="s",
            )
        ],
    )
    png = tmp_path / "c.png"
    out = tmp_path / "never.jsonl"
    status = main(
        ["eval", "--report", str(turns), str(full), "--chart", str(png), "--out", str(out)]
    )
    assert status == 0
    printed = capsys.readouterr().out
    tune, held = printed.split("\n\n")[:2]
    assert tune.splitlines()[1].split() == ["full", "overspill-turns"]
    assert tune.splitlines()[2].split() == ["user_fact", "100%", "100%"]
    assert held.splitlines()[2].split() == ["user_fact", "0%", "-"]
    assert ["growths", "(mean)", "-", "6.0"] in [line.split() for line in tune.splitlines()]
    assert ["won", "vs", "full", "-", "0"] in [line.split() for line in tune.splitlines()]
    assert tune.splitlines()[-1].split() == ["all", "-", "+0"]
    assert png.read_bytes().startswith(b"\x89PNG")
    assert not out.exists()
    assert main(["eval", "--report", str(full), str(turns), "--conditions", "full"]) == 0
    assert "overspill-turns" not in capsys.readouterr().out


def test_report_refuses_what_is_not_a_row_or_counted_twice(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A missing file, a line that is not JSON or not a row, the same probe in two files (it
    would count twice) or twice in one, and an unknown kind or condition each stop --report
    with status 2 and say where or what."""
    from evaluation.runner import Row

    once = Row(1, "tune", "overspill-once", "kind", "q", "ok", "v", True)
    good = _rows_file(tmp_path / "a.jsonl", [once])
    again = _rows_file(tmp_path / "b.jsonl", [once])
    assert main(["eval", "--report", str(good), str(again)]) == 2
    assert f"also in {good}" in capsys.readouterr().err
    whole = Row(1, "tune", "full", "kind", "q", "ok", "v", True)
    twice = _rows_file(tmp_path / "twice.jsonl", [whole, whole])
    assert main(["eval", "--report", str(twice)]) == 2  # one run answered it twice
    assert "also in" in capsys.readouterr().err
    assert main(["eval", "--report", str(tmp_path / "none.jsonl")]) == 2
    assert "none.jsonl" in capsys.readouterr().err
    cases = {
        b"{not json\n": "not JSON",
        b"[1, 2]\n": "a row is a JSON object",
        b'{"seed": 1}\n': "missing seed_set",
        orjson.dumps({**Row(1, "tune", "full", "k", "q", "ok").as_dict(), "extra": 1}): "extra",
        orjson.dumps({**Row(1, "tune", "full", "k", "q", "ok").as_dict(), "growths": True}): (
            "growths is True"
        ),
    }
    for number, (line, said) in enumerate(cases.items()):
        bad = tmp_path / f"bad{number}.jsonl"
        bad.write_bytes(b"\n" + line)
        assert main(["eval", "--report", str(bad)]) == 2
        err = capsys.readouterr().err
        assert f"bad{number}.jsonl:2" in err
        assert said in err
    assert main(["eval", "--report", str(good), "--kinds", "user_fact"]) == 2
    assert "no rows" in capsys.readouterr().err
    assert main(["eval", "--report", str(good), "--kinds", "hearsay"]) == 2
    assert "--kinds: unknown hearsay" in capsys.readouterr().err
    assert main(["eval", "--report", str(good), "--conditions", "hearsay"]) == 2
    assert "--conditions: unknown hearsay" in capsys.readouterr().err


def test_report_reads_an_outside_datasets_rows_and_a_second_reading_of_the_whole_dialogue(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """--report takes LoCoMo's rows with no --kinds (every kind the rows hold) and with its
    kinds named, and the whole dialogue's rows from two files as two readings of it."""
    from evaluation.runner import Row

    def row(condition: str, question: str, right: bool) -> Row:
        return Row(41, "locomo", condition, "single_hop", question, "ok", "a", right, True)

    once = _rows_file(tmp_path / "once.jsonl", [row("overspill-once", "q1", True)])
    first = _rows_file(tmp_path / "full.jsonl", [row("full", "q1", True)])
    second = _rows_file(tmp_path / "again.jsonl", [row("full", "q1", False)])

    def recall_lines() -> tuple[str, dict[str, list[str]]]:
        printed = capsys.readouterr().out
        block = printed.split("points against")[0]  # recall; the gaps follow
        return printed, _cells(block)

    assert main(["eval", "--report", str(once), str(first)]) == 0
    _, lines = recall_lines()
    assert lines["single_hop"] == ["100%", "100%"]
    assert lines["kept of full"] == ["-", "1", "of", "1"]
    named = ["--kinds", "single_hop"]
    assert main(["eval", "--report", str(once), str(first), str(second), *named]) == 0
    printed, lines = recall_lines()
    assert lines["kept of full"] == ["-", "0", "of", "0"]
    assert "right in some readings and wrong in others 1" in printed


def test_seeds_are_named_as_ranges() -> None:
    """The chart names its seeds as ranges: consecutive seeds as `low-high`, others alone."""
    assert seed_ranges([1, 2, 3, 1000]) == "1-3, 1000"
    assert seed_ranges([1, 3, 4, 1000, 1001, 1003]) == "1, 3-4, 1000-1001, 1003"
    assert seed_ranges([]) == "none"
