"""τ-bench: agent transcripts with tool calls nobody here wrote, as probes of what an agent needs.

τ-bench (Yao et al., "τ-bench: A Benchmark for Tool-Agent-User Interaction in Real-World
Domains", 2024; github.com/sierra-research/tau-bench, MIT licence) publishes the trajectories
of real agents (GPT-4o, Claude 3.5 Sonnet) serving simulated customers of an airline and a
retail shop: `historical_trajectories/*.json`, each a list of runs, each run's `traj` an
OpenAI chat with a long policy as its system prompt, the customer's turns, the agent's tool
calls (`get_user_details`, `search_direct_flight`, `book_reservation`, ...) and the tools'
JSON results. The files are read from a path, never committed.

A trajectory holds no annotated questions, but each tool call the agent made is one: the
values in its arguments that the conversation said before (a user id the customer typed, a
flight number a search returned, a payment id from the profile) are what the agent had to
carry to make that call. A *probe* is one call made after the conversation outgrew the
budget, with those carried values (scalar arguments of at least `MIN_VALUE_CHARS`
characters found in an earlier non-system message; a value only the system prompt holds is
not carried, a system prompt is never condensed). Its values are *present* in what the agent
was shown when each occurs there as a whole word, case aside. Pure: no model, no network.
"""

from __future__ import annotations

import argparse
import json
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from evaluation.datasets import json_files
from kernel.json_values import is_int
from kernel.types import Message

MIN_VALUE_CHARS = 3
"""Shorter argument values ("no", "0", "1") are in almost any text: not carried values."""


@dataclass(frozen=True, slots=True)
class Call:
    """One tool call of an agent, as a probe: the request before it and what it carried."""

    position: int
    """The index of the assistant's message making the call (the request is everything
    before it)."""
    tool: str
    values: tuple[str, ...]
    """The call's scalar argument values an earlier non-system message holds."""

    def present(self, text: str) -> tuple[str, ...]:
        """The carried values `text` holds, each as a whole word, case aside."""
        return tuple(value for value in self.values if _holds(text, value))


@dataclass(frozen=True, slots=True)
class Trajectory:
    """One agent run: its name (``gpt-4o-airline.json#12``), the chat and the task it served."""

    name: str
    messages: tuple[Message, ...]
    task: int

    @property
    def kept_apart(self) -> bool:
        """Whether the run serves a task kept apart (an odd task id): the ledger's rules are
        developed on the even ones, and these are only measured."""
        return self.task % 2 == 1

    def calls(self) -> Iterator[Call]:
        """Each tool call with at least one carried value, in order."""
        earlier = ""  # the non-system messages before `position`, as a reader sees them
        for position, message in enumerate(self.messages):
            for call in message.get("tool_calls") or ():
                function = call.get("function") or {}
                values = _scalars(_arguments(function.get("arguments")))
                carried = tuple(dict.fromkeys(v for v in values if _holds(earlier, v)))
                if carried:
                    yield Call(position, str(function.get("name") or "?"), carried)
            if position > 0:
                earlier += "\n" + _text(message)


def _holds(text: str, value: str) -> bool:
    return re.search(rf"(?<!\w){re.escape(value)}(?!\w)", text, re.IGNORECASE) is not None


def _text(message: Message) -> str:
    """A message's text and its tool calls' arguments (what a reader of it sees)."""
    parts = [str(message.get("content") or "")]
    for call in message.get("tool_calls") or ():
        function = call.get("function") or {}
        parts.append(f"{function.get('name')} {function.get('arguments')}")
    return "\n".join(parts)


def _arguments(raw: Any) -> Any:
    if isinstance(raw, str):
        try:
            return json.loads(raw)
        except ValueError:
            return {}
    return raw if isinstance(raw, dict) else {}


def _scalars(value: Any) -> list[str]:
    """The scalar leaves of a JSON value as written (numbers as JSON writes them), at least
    `MIN_VALUE_CHARS` long; booleans and nulls are none."""
    if isinstance(value, Mapping):
        return [leaf for item in value.values() for leaf in _scalars(item)]
    if isinstance(value, list):
        return [leaf for item in value for leaf in _scalars(item)]
    if isinstance(value, bool) or value is None:
        return []
    text = json.dumps(value) if isinstance(value, int | float) else str(value).strip()
    return [text] if len(text) >= MIN_VALUE_CHARS else []


def load(path: Path) -> list[Trajectory]:
    """Every run in a τ-bench trajectories file, or in each ``.json`` of a folder. Raises
    ValueError naming the file and what is wrong with it."""
    runs: list[Trajectory] = []
    for file, data in json_files(path, "τ-bench"):
        if not isinstance(data, list):
            raise ValueError(f"{file}: not a τ-bench trajectories file (a list of runs)")
        runs += load_runs(data, file.name)
    return runs


def load_runs(items: Sequence[Any], file: str) -> list[Trajectory]:
    """The runs of a trajectories file's list, named ``FILE#INDEX``."""
    return [_run(item, f"{file}#{i}") for i, item in enumerate(items)]


def _run(item: Any, name: str) -> Trajectory:
    traj = item.get("traj") if isinstance(item, dict) else None
    if not isinstance(traj, list) or not traj:
        raise ValueError(f"{name}: a run needs a non-empty `traj` list of chat messages")
    for index, message in enumerate(traj):
        if not isinstance(message, dict) or message.get("role") not in _ROLES:
            raise ValueError(f"{name}: traj[{index}] is not a chat message with a known role")
    task = item.get("task_id")
    return Trajectory(name, tuple(traj), task if is_int(task) else 0)


_ROLES = frozenset({"system", "user", "assistant", "tool"})


def probes(
    runs: Sequence[Trajectory], budget: int, count: Callable[[list[Message]], int]
) -> list[tuple[Trajectory, Call]]:
    """The calls made once the request before them no longer fit `budget` tokens (as `count`
    counts messages): those an agent behind a compacting proxy makes from a condensed history."""
    return [
        (run, call)
        for run in runs
        for call in run.calls()
        if count(list(run.messages[: call.position])) > budget
    ]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """`--taubench PATH`, as the ledger bench reads it."""
    parser.add_argument(
        "--taubench", metavar="PATH",
        help="use τ-bench's agent trajectories: one of its historical_trajectories/*.json, or "
        "a folder of them (evaluation/taubench.py)",
    )  # fmt: skip
