"""Template sets: each probe kind planted in tune, held-out and blind phrasings."""

from __future__ import annotations

import configparser
import hashlib
import itertools
import json
import re
import sys
from pathlib import Path
from xml.etree import ElementTree

import orjson
import pytest
import respx
import yaml

from cli.main import main
from evaluation import ledger
from evaluation.conditions import text_of
from evaluation.conversations import Conversation, generate
from evaluation.phrasings import (
    BY_KIND,
    IDENTIFIER,
    TEMPLATE_SETS,
    TOOL_FACT,
    Edit,
    Template,
    TemplateSet,
    ToolRead,
    template_label,
    template_sets,
)
from evaluation.probes import PROBE_KINDS, Probe
from evaluation.report import read_jsonl, table, write_jsonl
from evaluation.runner import Row
from tests.evaluation.test_eval import CONFIG, _upstream

SEEDS = [*range(1, 61), *range(1000, 1060)]
"""Enough seeds that each subject's every template is drawn (fillers 0: a few turns each)."""


def _short(templates: TemplateSet) -> list[Conversation[Probe]]:
    return [generate(seed, fillers=0, templates=templates) for seed in SEEDS]


def test_every_kind_has_a_tune_phrasing_and_at_least_three_in_each_other_set() -> None:
    """Each kind (each of its subjects) has a tune template and at least three held-out
    and three blind ones."""
    assert set(BY_KIND) == set(PROBE_KINDS)
    for kind, subjects in BY_KIND.items():
        for subject, phrasings in subjects.items():
            assert len(phrasings.tune) >= 1, (kind, subject)
            assert len(phrasings.held_out) >= 3, (kind, subject)
            assert len(phrasings.blind) >= 3, (kind, subject)


@pytest.mark.parametrize("templates", TEMPLATE_SETS)
def test_each_template_set_renders_every_kind_with_each_of_its_templates(
    templates: TemplateSet,
) -> None:
    """Every conversation of a set plants each kind once, and over the seeds each template
    of the set (per subject) is drawn, and only those."""
    drawn: dict[str, set[str]] = {kind: set() for kind in PROBE_KINDS}
    for conversation in _short(templates):
        assert conversation.templates == templates
        assert tuple(p.kind for p in conversation.probes) == PROBE_KINDS
        for probe in conversation.probes:
            drawn[probe.kind].add(probe.template)
    for kind, subjects in BY_KIND.items():
        expected = {
            template_label(subject, templates, index)
            for subject, phrasings in subjects.items()
            for index in range(len(phrasings.of(templates)))
        }
        assert drawn[kind] == expected, kind


@pytest.mark.parametrize(("one", "other"), list(itertools.combinations(TEMPLATE_SETS, 2)))
def test_no_two_template_sets_share_anything_that_carries_a_value(
    one: TemplateSet, other: TemplateSet
) -> None:
    """No template is in two sets, nor any sentence of one that holds a value (a short
    reply such as "Noted." may be in both); a tool fact's file layout and an edit's tool
    differ too."""
    for kind, subjects in BY_KIND.items():
        for subject, phrasings in subjects.items():
            assert not set(phrasings.of(one)) & set(phrasings.of(other)), (kind, subject)
            mine = {said for t in phrasings.of(one) for said in _sentences(t) if "{" in said}
            theirs = {said for t in phrasings.of(other) for said in _sentences(t) if "{" in said}
            assert not mine & theirs, (kind, subject)
    assert not {r.layout for r in TOOL_FACT.of(one)} & {r.layout for r in TOOL_FACT.of(other)}
    assert not {e.tool for e in IDENTIFIER.of(one)} & {e.tool for e in IDENTIFIER.of(other)}


@pytest.mark.parametrize("templates", TEMPLATE_SETS)
def test_no_template_holds_a_number_above_a_hundred_of_its_own(templates: TemplateSet) -> None:
    """Outside its fields a template's numbers stay below 101 (like the fillers'), so a
    number a probe accepts can only come from the value planted."""
    for kind, subjects in BY_KIND.items():
        for subject, phrasings in subjects.items():
            for template in phrasings.of(templates):
                said = re.sub(r"\{\w+\}", " ", repr(template))
                assert all(int(n) <= 100 for n in re.findall(r"\d+", said)), (kind, subject)


def _sentences(template: Template) -> tuple[str, ...]:
    """What a template says: its turns, or a read's or an edit's messages."""
    if isinstance(template, ToolRead):
        return (template.ask, template.reply)
    if isinstance(template, Edit):
        return (template.request, template.result, template.reply)
    return template


@pytest.mark.parametrize("templates", TEMPLATE_SETS)
def test_the_answer_is_in_the_planted_turns_for_every_template(templates: TemplateSet) -> None:
    """Without fillers a conversation is its planted turns: each probe's right value is in
    them, and a stale value comes before the value that replaced it."""
    for conversation in _short(templates):
        whole = text_of(conversation.messages)
        lowered = whole.lower()
        for probe in conversation.probes:
            assert probe.present(whole), (conversation.seed, probe.template)
            for stale in probe.stale:
                latest = max(lowered.rindex(value.lower()) for value in probe.accept)
                assert lowered.index(stale.lower()) < latest, (conversation.seed, probe.template)


@pytest.mark.parametrize("templates", ["held-out", "blind"])
@pytest.mark.parametrize("seed", [1, 2, 3, 1000, 1001, 1002])
def test_values_live_only_where_their_kind_says_in_other_words(
    seed: int, templates: TemplateSet
) -> None:
    """Said in held-out or blind words, a tool fact is still only in a tool result and an
    assistant fact only in the assistant's words; a user fact is the user's."""
    conversation = generate(seed, templates=templates)
    probes = {p.kind: p for p in conversation.probes}

    def said_by(role: str) -> str:
        return text_of([m for m in conversation.messages if m.get("role") == role])

    assert probes["tool_fact"].present(said_by("tool"))
    assert not probes["tool_fact"].present(said_by("user") + said_by("assistant"))
    assert probes["assistant_fact"].present(said_by("assistant"))
    assert not probes["assistant_fact"].present(said_by("user") + said_by("tool"))
    assert probes["user_fact"].present(said_by("user"))


@pytest.mark.parametrize("other", ["held-out", "blind"])
def test_a_seed_holds_the_same_values_in_every_set(other: TemplateSet) -> None:
    """The template set changes the words, not the values: the same probes' answers, the
    same fillers, other planted sentences."""
    for seed in (1, 2, 1000):
        tune, said = generate(seed), generate(seed, templates=other)
        assert [(p.kind, p.accept, p.stale) for p in tune.probes] == [
            (p.kind, p.accept, p.stale) for p in said.probes
        ]
        assert tune.messages != said.messages
        assert {m["content"] for m in tune.messages if m["role"] == "tool"} != {
            m["content"] for m in said.messages if m["role"] == "tool"
        }
        changed = [m for m in tune.messages if m not in said.messages]
        assert len(changed) < len(tune.messages) / 2, seed


def _digest(templates: TemplateSet) -> str:
    sha = hashlib.sha256()
    for seed in (1, 2, 3, 1000, 1001):
        conversation = generate(seed, templates=templates)
        probes = [[p.kind, p.question, p.accept, p.stale] for p in conversation.probes]
        sha.update(json.dumps([conversation.messages, probes], sort_keys=True).encode())
    return sha.hexdigest()


def test_the_same_seed_gives_the_same_bytes_in_every_run() -> None:
    """A seed and a template set fix every byte, from run to run: the tune conversations
    are those every figure so far was measured on (the digest is the generator's before
    held-out templates existed), the held-out and blind ones are pinned too."""
    assert generate(7, templates="blind") == generate(7, templates="blind")
    assert _digest("tune") == "886a1e015ef81737ef260cb7f1ddaf96ac8a10f2e27bdca967f10a76395f6381"
    assert _digest("held-out") == "542f1e84d0630b8958a2e028a08509f0185229f69114b122718f40e9ad20680e"
    assert _digest("blind") == "4c5bb04d24abada710c46c605b2b5ca7b766ebd133414b6f23eab4473ba8d66e"


def test_the_templates_choice_names_its_sets() -> None:
    """`--templates all` plays every set, tune first; an unknown name says the known ones."""
    assert template_sets("all") == ("tune", "held-out", "blind")
    assert template_sets("held-out") == ("held-out",)
    assert template_sets("blind") == ("blind",)
    with pytest.raises(ValueError, match="known: tune, held-out, blind, all"):
        template_sets("fresh")


def _row(seed: int, templates: str, kind: str, right: bool) -> Row:
    return Row(seed, "tune", "full", kind, "q", "ok", "a", right, templates=templates)


def test_the_table_prints_template_sets_apart_with_their_gaps() -> None:
    """Each template set gets a block, then held-out's and blind's points against tune
    per kind, each paired on the same seed's probe."""
    rows = [
        _row(1, "tune", "decision", True),
        _row(2, "tune", "decision", True),
        _row(1, "held-out", "decision", False),
        _row(2, "held-out", "decision", True),
        _row(3, "held-out", "decision", False),  # no tune row of seed 3: not paired
        _row(1, "tune", "user_fact", True),
        _row(1, "held-out", "user_fact", True),
        _row(1, "blind", "decision", False),
        _row(2, "blind", "decision", False),
        _row(1, "blind", "user_fact", True),
    ]
    printed = table(rows, ["full"])
    blocks = printed.split("\n\n")
    assert blocks[0].startswith("tune seeds 1-2, tune templates: recall by probe kind")
    assert blocks[1].startswith("tune seeds 1-3, held-out templates: recall by probe kind")
    assert blocks[2].startswith("tune seeds 1-2, blind templates: recall by probe kind")
    assert blocks[3].startswith("tune seeds: points of held-out templates against tune")
    gap = {line[:16].strip(): line[16:].split() for line in blocks[3].splitlines()[2:]}
    assert gap["decision"] == ["-50"]
    assert gap["user_fact"] == ["+0"]
    assert gap["all"] == ["-33"]
    assert blocks[4].startswith("tune seeds: points of blind templates against tune")
    gap = {line[:16].strip(): line[16:].split() for line in blocks[4].splitlines()[2:]}
    assert gap["decision"] == ["-100"]
    assert gap["all"] == ["-67"]
    assert "templates against" not in table(rows[:2], ["full"])
    assert "templates against" not in table(rows[2:5] + rows[7:], ["full"])


def test_a_row_written_before_template_sets_reads_as_tune(tmp_path: Path) -> None:
    """An old row has no templates field: it reads as a tune template's row, and a row
    written now keeps its set."""
    old = {k: v for k, v in _row(1, "tune", "kind", True).as_dict().items() if k != "templates"}
    path = tmp_path / "rows.jsonl"
    with path.open("wb") as sink:
        write_jsonl([_row(1, "held-out", "kind", True)], sink)
    lines = [orjson.dumps(old), *path.read_bytes().splitlines()]
    assert [row.templates for row in read_jsonl(lines, "rows")] == ["tune", "held-out"]


@respx.mock
def test_the_cli_plays_each_seed_in_every_template_set(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`overspill eval --templates all` asks each seed's probes after its tune, held-out
    and blind conversations, rows naming their set; --report reads them all without
    counting any twice."""
    respx.post("http://upstream.test/v1/chat/completions").mock(side_effect=_upstream)
    config = tmp_path / "config.yaml"
    config.write_text(CONFIG)
    out = tmp_path / "rows.jsonl"
    status = main(
        ["eval", "--config", str(config), "--seeds", "1", "--fillers", "2", "--conditions",
         "full", "--kinds", "user_fact,decision", "--templates", "all", "--out", str(out)]
    )  # fmt: skip
    assert status == 0
    rows = [orjson.loads(line) for line in out.read_bytes().splitlines()]
    assert {r["status"] for r in rows} == {"ok"}
    assert [(r["templates"], r["kind"]) for r in rows] == [
        ("tune", "user_fact"), ("tune", "decision"),
        ("held-out", "user_fact"), ("held-out", "decision"),
        ("blind", "user_fact"), ("blind", "decision"),
    ]  # fmt: skip
    printed = capsys.readouterr().out
    assert "tune seeds 1, held-out templates:" in printed
    assert "tune seeds 1, blind templates:" in printed
    assert main(["eval", "--report", str(out)]) == 0
    reported = capsys.readouterr().out
    assert "points of held-out templates against tune templates" in reported
    assert "points of blind templates against tune templates" in reported


def test_the_ledger_bench_prints_each_template_set_and_the_gap(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`python -m evaluation.ledger --templates all` counts each set apart, then the points
    each other set is from tune per kind."""
    argv = ["ledger", "--seeds", "1,1000", "--fillers", "6", "--templates", "all", "--relevant"]
    monkeypatch.setattr(sys, "argv", argv)
    ledger.main()
    printed = capsys.readouterr().out
    for templates in TEMPLATE_SETS:
        said = f"fillers 6, notes 0, with the turns each question is about, {templates} templates:"
        assert said in printed
    for other in ("held-out", "blind"):
        gap = printed.split(f"\n{other} templates against tune templates")[1].splitlines()
        assert gap[2].split()[0] == "user_fact"
        kinds = [line.split()[0] for line in gap[2:] if line.strip()]
        assert kinds[: len(PROBE_KINDS)] == list(PROBE_KINDS), other


def test_the_ledger_bench_can_show_each_probe_the_turns_its_question_is_about() -> None:
    """With room for them (`--relevant`), a probe is also shown the condensed turns its
    question shares rare words with, as the splice quotes them; with none, the ledger and
    tail alone."""
    conversation = generate(1, fillers=6)
    probe = next(p for p in conversation.probes if p.kind == "user_fact")
    condensed = len(conversation.messages) - 1
    shown = ledger.Shown("tail", (), condensed)
    assert shown.asked(conversation, 0)(probe) == "tail"
    quoted = shown.asked(conversation, 400)(probe)
    assert quoted.startswith("tail\n[overspill: turns from the condensed earlier part")
    assert probe.present(quoted)


def test_a_blind_config_file_reads_back_in_its_own_format() -> None:
    """Each blind layout is a file its format's parser reads (INI, XML, a Python module, a
    compose file's environment) or a table with a row per setting, and the probed setting
    holds the probed value there."""
    extensions = set()
    for conversation in _short("blind"):
        probe = next(p for p in conversation.probes if p.kind == "tool_fact")
        asked = re.fullmatch(r"According to (\S+), what is (\w+) set to\?", probe.question)
        assert asked is not None
        path, key = asked.groups()
        extensions.add(path.rpartition(".")[2])
        tools = [m["content"] for m in conversation.messages if m["role"] == "tool"]
        text = next(content for content in tools if path in content)
        assert (_setting(path, key, text),) == probe.accept, (conversation.seed, path)
    assert extensions == {"ini", "xml", "py", "yml", "conf"}


def _setting(path: str, key: str, text: str) -> str | None:
    """The value `key` has in a blind layout's file (by its extension), read by its parser."""
    if path.endswith(".ini"):
        parser = configparser.ConfigParser()
        parser.read_string(text)
        return parser["service"][key]
    if path.endswith(".xml"):
        settings = ElementTree.fromstring(text).iter("setting")
        return next(s.get("value") for s in settings if s.get("name") == key)
    if path.endswith(".py"):
        module: dict[str, object] = {}
        exec(compile(text, path, "exec"), module)
        return str(module[key.upper()])
    if path.endswith(".yml"):
        return str(yaml.safe_load(text)["services"]["importer"]["environment"][key.upper()])
    rows = [line.split("|") for line in text.splitlines() if line.startswith("| ")]
    return next(row[2].strip() for row in rows if row[1].strip() == key)
