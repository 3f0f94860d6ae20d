"""Two runs of the same probes compared probe by probe: flips both ways, and a sign test."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from cli.main import main
from evaluation.compare import compare, render, sign_test
from evaluation.places import LAST, QUOTED
from evaluation.runner import Row


def _row(
    question: str,
    right: bool,
    *,
    present: bool = True,
    condition: str = "overspill-once",
    status: str = "ok",
    answer: str = "",
    stood: str = "",
) -> Row:
    return Row(
        41, "locomo", condition, "single_hop", question, status,
        answer or ("yes" if right else "no"), right if status == "ok" else None, present,
        stood=stood,
    )  # fmt: skip


def test_the_sign_test_is_exact_and_two_sided() -> None:
    """6 flips one way and 9 the other is noise; 12 against 2 is not; no flip says nothing."""
    assert sign_test(6, 9) == pytest.approx(0.6072, abs=1e-4)
    assert sign_test(9, 6) == sign_test(6, 9)
    assert sign_test(12, 2) == pytest.approx(0.0129, abs=1e-4)
    assert sign_test(0, 0) == 1.0
    assert sign_test(3, 3) == 1.0


def test_probes_pair_by_question_and_only_where_both_runs_answered() -> None:
    """Counts and flips cover the probes answered in both runs; an overflowed probe, or a
    condition only one run has, is left out."""
    before = [
        _row("a", True), _row("b", False, present=False), _row("c", True), _row("d", True),
        _row("e", True, status="overflow"), _row("a", True, condition="full"),
    ]  # fmt: skip
    after = [
        _row("a", True), _row("b", True), _row("c", False, answer="the old one"),
        _row("d", True, status="error"), _row("e", False), _row("f", True),
    ]  # fmt: skip
    (moved,) = compare(before, after)
    assert (moved.condition, moved.asked) == ("overspill-once", 3)
    assert (moved.in_view, moved.right) == ((2, 3), (2, 2))
    assert [f.after.question for f in moved.won] == ["b"]
    assert [f.after.question for f in moved.lost] == ["c"]
    printed = render([moved])
    assert "right 2 -> 2; won 1, lost 1 (sign test p = 1.00)" in printed
    assert "lost conv-41 single_hop: c | yes -> the old one" in printed


def test_where_both_runs_say_where_the_answer_stood_the_last_excerpt_is_counted() -> None:
    """With every row saying where its answer stood, the comparison counts the answers in
    the last excerpt in each run and says where a flipped probe's answer stood; with a row
    that does not say, neither is printed."""
    before = [_row("a", False, stood=QUOTED), _row("b", True, stood=LAST)]
    after = [_row("a", True, stood=LAST), _row("b", True, stood=LAST)]
    (moved,) = compare(before, after)
    assert moved.last == (1, 2)
    printed = render([moved])
    assert "answer in view 2 -> 2, in the last excerpt 1 -> 2, right 1 -> 2" in printed
    assert f"won  conv-41 single_hop: a | no -> yes [{QUOTED} -> {LAST}]" in printed
    (unsaid,) = compare([_row("a", False), _row("b", True, stood=LAST)], after)
    assert unsaid.last is None
    assert "last excerpt" not in render([unsaid])


def test_report_against_an_earlier_run_prints_the_comparison(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`--report NEW --against OLD` prints the table, then what moved; --against alone, or
    naming a file that cannot be read, is a usage error saying what to fix."""
    runs = {"old": [_row("a", False), _row("b", True)], "new": [_row("a", True), _row("b", True)]}
    files = {name: tmp_path / f"{name}.jsonl" for name in runs}
    for name, rows in runs.items():
        files[name].write_bytes(b"".join(orjson.dumps(r.as_dict()) + b"\n" for r in rows))
    out = str(tmp_path / "unused.jsonl")
    status = main(
        ["eval", "--report", str(files["new"]), "--against", str(files["old"]), "--out", out]
    )
    assert status == 0
    printed = capsys.readouterr().out
    assert "overspill-once: 2 probes; answer in view 2 -> 2, right 1 -> 2; won 1, lost 0" in printed
    assert "won  conv-41 single_hop: a | no -> yes" in printed
    assert main(["eval", "--against", str(files["old"]), "--out", out]) == 2
    assert "give it with --report" in capsys.readouterr().err
    missing = str(tmp_path / "none.jsonl")
    assert main(["eval", "--report", str(files["new"]), "--against", missing, "--out", out]) == 2
    assert "--against: " in capsys.readouterr().err
