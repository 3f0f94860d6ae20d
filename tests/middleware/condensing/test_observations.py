"""Observation masking an agent can undo: which old tool results are masked, how, in batches."""

from __future__ import annotations

from typing import Any

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from kernel.tokens import TokenCounter
from kernel.types import Message
from middleware.condensing.observations import (
    RECALL_TOOL,
    Policy,
    is_error,
    plan_masking,
    reads,
    recall_answer,
)
from middleware.condensing.split import units
from tests.reliability import examples

FILE = "\n".join(f"line {n}: value_{n} = compute({n})" for n in range(60))
COUNTER = TokenCounter("gpt-4o")


def turn(call_id: str, name: str = "Read", result: str = FILE, **arguments: Any) -> list[Message]:
    """An assistant tool call and its result."""
    function = {"name": name, "arguments": orjson.dumps(arguments or {"path": "a.py"}).decode()}
    call = {"id": call_id, "type": "function", "function": function}
    return [
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": call_id, "content": result},
    ]


def session(*turns: list[Message], task: str = "Fix the bug.") -> list[Message]:
    """A system prompt, the task, then the tool turns."""
    messages: list[Message] = [{"role": "system", "content": "You code."}]
    messages.append({"role": "user", "content": task})
    for made in turns:
        messages.extend(made)
    return messages


def counts(messages: list[Message]) -> list[int]:
    return [COUNTER.count_message(message) for message in messages]


def plan(messages: list[Message], policy: Policy | None = None, estimate: int = 10**6) -> Any:
    return plan_masking(
        messages, counts(messages), policy or Policy(trigger=1000, keep=2), estimate=estimate
    )


def test_nothing_is_masked_before_the_trigger() -> None:
    """Below the trigger every result stays."""
    messages = session(*(turn(f"c{n}") for n in range(6)))
    assert plan(messages, estimate=999) is None


def test_reads_are_masked_whole_and_name_the_recall_id() -> None:
    """Old reads become one placeholder naming the call and its id; the newest `keep` stay."""
    messages = session(*(turn(f"c{n}") for n in range(5)))
    done = plan(messages)
    assert done.masked == ("c0", "c1", "c2")
    placeholder = done.messages[3]["content"]
    assert placeholder.startswith("[overspill masked this result of Read(path=a.py)")
    assert RECALL_TOOL in placeholder
    assert '"c0"' in placeholder
    assert done.messages[-1]["content"] == FILE  # the newest two uses are kept
    assert done.messages[-3]["content"] == FILE
    assert done.saved > 0


def test_commands_keep_an_excerpt() -> None:
    """A side-effecting command keeps its first and last lines around the placeholder."""
    messages = session(*(turn(f"c{n}", "Bash", command="make test") for n in range(4)))
    done = plan(messages)
    content = done.messages[3]["content"]
    assert content.startswith("line 0: value_0")
    assert content.rstrip().endswith("line 59: value_59 = compute(59)")
    assert "overspill masked the middle" in content


def test_errors_and_excluded_tools_are_kept() -> None:
    """An error result and the uses of an excluded tool stay as they were."""
    error = "Error: file not found\n" + FILE
    messages = session(
        turn("c0", result=error),
        turn("c1", "Grep"),
        turn("c2"),
        turn("c3"),
        turn("c4"),
    )
    done = plan(messages, Policy(trigger=1000, keep=2, exclude=frozenset({"Grep"})))
    assert done.masked == ("c2",)
    assert done.messages[3]["content"] == error


def test_the_first_request_is_never_masked() -> None:
    """Nothing before or at the first user message is masked."""
    early = turn("c0")
    messages: list[Message] = [{"role": "system", "content": "You code."}, *early]
    messages += [{"role": "user", "content": "Now fix it."}]
    for n in range(1, 5):
        messages += turn(f"c{n}")
    done = plan(messages)
    assert "c0" not in done.masked
    assert done.messages[2]["content"] == FILE


def test_masking_keeps_every_call_beside_its_result() -> None:
    """The masked conversation has the same units (a call and its result stay together)."""
    messages = session(*(turn(f"c{n}") for n in range(5)))
    done = plan(messages)
    assert units(done.messages) == units(messages)
    assert [m["role"] for m in done.messages] == [m["role"] for m in messages]


def test_clearing_inputs_empties_the_masked_calls_arguments() -> None:
    """`clear_inputs` replaces the masked calls' arguments with an empty object."""
    messages = session(*(turn(f"c{n}", path="x" * 400) for n in range(4)))
    done = plan(messages, Policy(trigger=1000, keep=2, clear_inputs=True))
    assert done.cleared_inputs == ("c0", "c1")
    assert done.messages[2]["tool_calls"][0]["function"]["arguments"] == "{}"
    assert messages[2]["tool_calls"][0]["function"]["arguments"] != "{}"  # never in place


def test_a_tool_use_trigger_counts_calls() -> None:
    """A trigger by tool uses masks once the conversation holds more uses than it."""
    messages = session(*(turn(f"c{n}") for n in range(4)))
    policy = Policy(trigger=None, trigger_uses=3, keep=1)
    assert plan(messages, policy, estimate=0).masked == ("c0", "c1", "c2")
    assert plan(messages[:-2], policy, estimate=0) is None


def test_a_batch_waits_for_clear_at_least() -> None:
    """Results are masked only once a batch would save `clear_at_least` tokens."""
    one = COUNTER.count_message(turn("c")[1])
    messages = session(*(turn(f"c{n}") for n in range(4)))
    assert plan(messages, Policy(trigger=1000, keep=2, clear_at_least=one * 3)) is None
    masked = plan(messages, Policy(trigger=1000, keep=2, clear_at_least=one)).masked
    assert masked == ("c0", "c1")


@settings(max_examples=examples(30, 300), deadline=None)
@given(
    results=st.lists(st.integers(5, 80), min_size=3, max_size=14),
    step=st.integers(0, 3000),
    keep=st.integers(0, 3),
)
def test_a_growing_conversation_keeps_what_it_masked(
    results: list[int], step: int, keep: int
) -> None:
    """As turns are added, a result once masked stays masked, in the same words."""
    messages = session(
        *(turn(f"c{n}", result=FILE[: lines * 30]) for n, lines in enumerate(results))
    )
    policy = Policy(trigger=0, keep=keep, clear_at_least=step)
    before: dict[int, Any] = {}
    for end in range(4, len(messages) + 1, 2):
        done = plan(messages[:end], policy, estimate=1)
        now = (
            {}
            if done is None
            else {i: m["content"] for i, m in enumerate(done.messages) if m is not messages[i]}
        )
        assert all(now.get(i) == content for i, content in before.items())
        before = now


def test_tools_are_placed_by_their_names_words() -> None:
    """Reads by their names' words; a name that acts, or says nothing, is not a read."""
    assert all(map(reads, ["Read", "read_file", "Grep", "Glob", "WebFetch", "list_dir", "LS"]))
    assert not any(map(reads, ["Bash", "Edit", "Write", "run_tests", "read_and_update", "Foo"]))


def test_errors_are_recognised() -> None:
    """The chat form of an is_error result, a tool_use_error, an Error: line, a traceback."""
    for text in (
        "[tool error] boom",
        "<tool_use_error>x</tool_use_error>",
        "Error: no",
        "Traceback (most",
    ):
        assert is_error(text)
    assert not is_error("no errors found")


def test_the_recall_answer_is_the_original_or_says_why_not() -> None:
    """The original (cut in the middle past the limit), or a note for an unknown id."""
    originals = {"c1": "a" * 50 + "b" * 50}
    assert recall_answer("c1", originals) == originals["c1"]
    cut = recall_answer("c1", originals, limit=20)
    assert cut.startswith("a" * 10)
    assert cut.endswith("b" * 10)
    assert "left out" in cut
    assert "no masked tool result" in recall_answer("zz", originals)
