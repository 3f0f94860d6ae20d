"""τ-bench's trajectory files read as agent runs, each tool call a probe of the values it
carried from earlier turns, and the ledger bench measuring them without a model."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from evaluation import ledger, taubench
from kernel.tokens import count_messages

POLICY = "You are an airline agent. Follow the policy."


def call(n: int, name: str, **arguments: Any) -> dict[str, Any]:
    """An assistant's message making one tool call."""
    return {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": f"call_{n}",
                "type": "function",
                "function": {"name": name, "arguments": json.dumps(arguments)},
            }
        ],
    }


def answer(n: int, name: str, value: Any) -> dict[str, Any]:
    """The tool's JSON answer to call `n`."""
    return {"role": "tool", "tool_call_id": f"call_{n}", "name": name, "content": json.dumps(value)}


def run(task: int, chatter: int = 0) -> dict[str, Any]:
    """A τ-bench-shaped run (not τ-bench's text): a customer gives an id, the agent looks up
    the profile, then, after `chatter` turns of small talk, books with a card from it."""
    profile = {
        "name": "Ruth Okafor",
        "cards": {"card_5521": {"last_four": "5521"}, "voucher_903": {"amount": 250}},
        "reservations": ["K2LQ9Z"],
    }
    traj: list[dict[str, Any]] = [
        {"role": "system", "content": POLICY},
        {"role": "user", "content": "Hi, I'm ruth_ok_41 and I want to fly to Lagos."},
        call(1, "get_user_details", user_id="ruth_ok_41"),
        answer(1, "get_user_details", profile),
    ]
    for i in range(chatter):
        traj += [
            {"role": "user", "content": f"Tell me about the lounges, question {i}, in detail."},
            {"role": "assistant", "content": "The lounges are open from six to midnight. " * 8},
        ]
    traj += [
        {"role": "user", "content": "Book it with the card ending 5521, one bag, no insurance."},
        call(2, "book_reservation", user_id="ruth_ok_41", payment_id="card_5521", bags=1,
             insurance="no", note="new"),
    ]  # fmt: skip
    return {"task_id": task, "reward": 1.0, "trial": 0, "traj": traj}


def test_a_call_carries_the_argument_values_an_earlier_turn_said() -> None:
    """A call's probe holds its scalar arguments found in earlier non-system turns, as
    written; short values, booleans and values said nowhere before are not carried."""
    (trajectory,) = taubench.load_runs([run(3)], "t.json")
    calls = list(trajectory.calls())
    assert [(c.tool, c.values) for c in calls] == [
        ("get_user_details", ("ruth_ok_41",)),
        ("book_reservation", ("ruth_ok_41", "card_5521")),
    ]
    assert calls[1].present("paid with CARD_5521 for ruth_ok_41x") == ("card_5521",)
    assert trajectory.kept_apart
    assert not taubench.load_runs([run(4)], "t.json")[0].kept_apart


def test_only_calls_made_after_the_request_outgrew_the_budget_are_probes() -> None:
    """A call whose request still fits the budget is no probe: nothing was condensed."""
    short, long = taubench.load_runs([run(2), run(2, chatter=30)], "t.json")
    budget = count_messages(list(short.messages)) + 10
    probes = taubench.probes([short, long], budget, count_messages)
    assert [(r is long, c.tool) for r, c in probes] == [(True, "book_reservation")]


def test_a_file_that_is_no_trajectories_file_says_what_is_wrong(tmp_path: Path) -> None:
    """Unreadable JSON, an object, a run without `traj` and an unknown role are named."""
    cases = {
        "broken.json": "[{",
        "object.json": json.dumps({"traj": []}),
        "no-traj.json": json.dumps([{"task_id": 1}]),
        "role.json": json.dumps([{"traj": [{"role": "robot", "content": "x"}]}]),
    }
    for name, text in cases.items():
        (tmp_path / name).write_text(text)
        with pytest.raises(ValueError, match=name):
            taubench.load(tmp_path / name)


def test_the_ledger_bench_reports_both_halves_of_a_trajectories_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """`python -m evaluation.ledger --taubench FILE` prints, for the tasks developed on and
    those kept apart, how many probes there were and the carried values each condition
    still shows; the id and the profile's card are kept where drop-oldest lost both."""
    path = tmp_path / "runs.json"
    path.write_text(json.dumps([run(2, chatter=40), run(5, chatter=40)]))
    monkeypatch.setattr(sys, "argv", ["ledger", "--taubench", str(path), "--window", "2048"])
    ledger.main()
    out = capsys.readouterr().out
    assert "tasks developed on (even ids): 1 runs" in out
    assert "tasks kept apart (odd ids): 1 runs" in out
    rows = [line.split()[:2] for line in out.splitlines() if "/" in line]
    assert ["ledger+tail+relevant", "2/2"] in rows
    assert ["drop-oldest", "0/2"] in rows
    assert len(rows) == 6  # three conditions, each half
