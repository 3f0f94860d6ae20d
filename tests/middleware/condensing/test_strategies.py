"""Condensing strategies: observation masking, tool-result masking, a middle cut, the order."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kernel.config_loading import ConfigError, parse_config
from kernel.store import DiskHistoryStore
from kernel.tokens import count_text
from kernel.types import ChatRequest, Completion, Message, RequestContext
from middleware.condensing.condenser import Condenser, bounded, report
from middleware.condensing.ledger import Previous
from middleware.condensing.split import split_history
from middleware.condensing.strategies import (
    MARKER_TOKENS,
    STRATEGIES,
    mask_messages,
    masked_history,
    middle_cut,
    middle_cut_history,
    strategy_order,
)
from tests.conftest import make_services, settings_from
from tests.reliability import examples

BIG = "line of a file with some code in it\n" * 120


def call(call_id: str, name: str = "read_file", path: str = "src/a.py") -> dict[str, Any]:
    """One tool call of an assistant message."""
    arguments = orjson.dumps({"path": path}).decode()
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


def agent_turns(n: int, result: str = BIG) -> list[Message]:
    """`n` agent steps: a user ask, an assistant tool call, its (long) result, a short reply."""
    messages: list[Message] = []
    for i in range(n):
        messages += [
            {"role": "user", "content": f"Step {i}: look at src/m{i}.py please."},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [call(f"c{i}", path=f"src/m{i}.py")],
            },
            {"role": "tool", "tool_call_id": f"c{i}", "content": result},
            {"role": "assistant", "content": f"Read src/m{i}.py; it defines handler_{i}."},
        ]
    return messages


def orphan_tools(messages: Sequence[Message]) -> list[int]:
    """Indices of tool messages without an assistant tool_calls message of theirs before."""
    seen: set[str] = set()
    bad = []
    for index, message in enumerate(messages):
        for tool_call in message.get("tool_calls") or ():
            seen.add(str(tool_call.get("id")))
        if message.get("role") == "tool" and str(message.get("tool_call_id")) not in seen:
            bad.append(index)
    return bad


# ---------------------------------------------------------------- the order


def test_the_order_is_the_configured_one_then_the_fallbacks() -> None:
    """Configured strategies come first, in order; masking then a middle cut always follow."""
    assert strategy_order(["extract"]) == ["extract", "mask_observations", "middle_cut"]
    assert strategy_order(["mask_tool_results", "extract"]) == [
        "mask_tool_results",
        "extract",
        "mask_observations",
        "middle_cut",
    ]
    assert strategy_order(["middle_cut", "mask_observations"]) == [
        "middle_cut",
        "mask_observations",
    ]


def test_strategies_are_validated_with_their_yaml_path() -> None:
    """An unknown or repeated strategy is a config error naming where it is."""
    template = """
model_list:
  - model_name: m
    litellm_params: {{model: openai/m, api_base: "http://x.test/v1"}}
    context: {{strategies: {0}}}
"""
    for bad in ("[summarise]", "[extract, extract]", "[]"):
        with pytest.raises(ConfigError, match="strategies"):
            parse_config(template.format(bad), "config.yaml", {})
    good = parse_config(template.format("[mask_tool_results, extract]"), "config.yaml", {})
    assert good.settings.model_list[0].context.strategies == ("mask_tool_results", "extract")


# ---------------------------------------------------------------- masking


def test_a_long_tool_result_becomes_a_placeholder_naming_the_call() -> None:
    """The placeholder names the tool, its arguments and the tokens that were there."""
    masked = mask_messages(agent_turns(1), replies=False)
    tokens = count_text(BIG)
    assert masked[2]["content"] == (
        f"[tool result of read_file(path=src/m0.py) masked: {tokens:,} tokens]"
    )
    assert masked[1] == agent_turns(1)[1]
    assert masked[2]["tool_call_id"] == "c0"


def test_short_tool_results_and_replies_stay() -> None:
    """Results and replies under the thresholds are left as they were."""
    messages = agent_turns(2, result="3 lines")
    assert mask_messages(messages, replies=True) == messages


def test_long_replies_are_masked_only_by_observation_masking() -> None:
    """A long assistant reply is masked by mask_observations, kept by mask_tool_results."""
    reply: Message = {"role": "assistant", "content": "The design in detail. " + "word " * 400}
    assert mask_messages([reply], replies=False) == [reply]
    (masked,) = mask_messages([reply], replies=True)
    assert str(masked["content"]).startswith("[assistant reply masked: ")
    assert 'it began: "The design in detail.' in str(masked["content"])


def test_masking_is_byte_stable_as_the_conversation_grows() -> None:
    """What masking made of a turn is the same when later turns are added (prefix caches hit)."""
    early, later = agent_turns(3), agent_turns(6)
    assert mask_messages(later, replies=True)[: len(early)] == mask_messages(early, replies=True)


def test_masked_history_carries_the_earlier_text_and_facts_forward() -> None:
    """A second masking keeps the first one's text byte for byte, then the new turns."""
    first = masked_history(agent_turns(2), previous=None, target_tokens=2000, replies=False)
    assert first is not None
    earlier = Previous(first.text, first.notes, first.facts)
    second = masked_history(agent_turns(4)[8:], previous=earlier, target_tokens=2000, replies=False)
    assert second is not None
    assert second.text.startswith(first.text)
    assert "src/m3.py" in second.text
    assert second.facts == first.facts


def test_masked_history_that_does_not_fit_says_so() -> None:
    """Masking that leaves the history over its target returns None (the next strategy runs)."""
    assert masked_history(agent_turns(30), previous=None, target_tokens=300, replies=True) is None


# ---------------------------------------------------------------- the middle cut


def test_the_middle_cut_keeps_the_opening_and_the_newest_with_a_marker() -> None:
    """Whole units go from the middle; the marker counts the messages and tokens removed."""
    messages = agent_turns(6, result="short result")
    counts = [50] * len(messages)
    kept = middle_cut(messages, counts, 400)
    assert kept is not None
    assert kept[0] == messages[0]
    assert kept[-1] == messages[-1]
    marker = next(m for m in kept if m["role"] == "system")
    removed = len(messages) - (len(kept) - 1)
    assert (
        marker["content"]
        == f"[… overspill removed {removed} messages ({removed * 50:,} tokens) here …]"
    )
    assert sum(counts[: len(kept) - 1]) <= 400
    assert orphan_tools(kept) == []


def test_the_middle_cut_is_none_when_not_even_both_ends_fit() -> None:
    """A budget under the first and last unit with the marker cannot be met by whole units."""
    messages = agent_turns(3)
    assert middle_cut(messages, [500] * len(messages), 600) is None


def test_middle_cut_history_keeps_facts_and_fits() -> None:
    """The text form fits its target, marks the cut and quotes the turns' facts."""
    text = middle_cut_history(agent_turns(20, result="ok"), previous=None, target_tokens=500).text
    assert count_text(text) <= 500
    assert "overspill removed" in text or "tokens omitted" in text
    assert "handler_19" in text


def test_middle_cut_history_quotes_the_condensed_messages_anew() -> None:
    """Given the messages the earlier stand-in stands in for, the cut's ledger quotes them
    anew: a fact the earlier stand-in no longer held is back."""
    stated: list[Message] = [
        {"role": "user", "content": "For the record, our internal project code is ZX-4471."},
        {"role": "assistant", "content": "Noted."},
    ]
    notes = "- the user is refactoring the handlers"
    previous = Previous(f"Notes:\n{notes}", notes)
    for condensed, held in (((), False), (stated, True)):
        text = middle_cut_history(
            agent_turns(4, result="ok"), previous=previous, target_tokens=500, condensed=condensed
        ).text
        assert ("ZX-4471" in text) is held
        assert "refactoring the handlers" in text


# ---------------------------------------------------------------- through the condenser


CONFIG = """
model_list:
  - model_name: local
    litellm_params: {{model: openai/smollm2, api_base: "http://upstream.test/v1"}}
    context: {{window: 4096, max_output_tokens: 128, strategies: {0}}}
"""


class Refusing:
    """An extraction model that only refuses; counts its calls."""

    def __init__(self) -> None:
        self.calls = 0

    async def __call__(self, messages: Sequence[Message], *, max_tokens: int) -> Completion:
        """A refusal."""
        self.calls += 1
        return Completion("I'm sorry, I cannot help with that.", 10, 10, "stop")


async def condense(
    store: DiskHistoryStore, strategies: str, messages: list[Message]
) -> tuple[RequestContext, Refusing, Condenser]:
    """One stand-in through the condenser for the messages (a final user question added)."""
    settings = settings_from(CONFIG.format(strategies))
    extractor = Refusing()
    condenser = Condenser(make_services(settings, store, lambda _n: extractor, {"local": 4096}))
    entry = settings.model_list[0]
    whole = [*messages, {"role": "user", "content": "What did we find?"}]
    body = {"model": "local", "messages": whole}
    request = ChatRequest("local", tuple(whole), False, body, raw=orjson.dumps(body))
    ctx = RequestContext("rid", "tenant-a", model=entry, conversation_hint="conv-1")
    plan = condenser.plan(request, entry, window=4096, scale=1.0)
    made = await condenser.stand_in(request, ctx, entry, plan)
    report(ctx, made, len(plan.split.historical))
    return ctx, extractor, condenser


async def test_mask_tool_results_keeps_an_agent_lean_without_a_model(
    store: DiskHistoryStore,
) -> None:
    """`[mask_tool_results, extract]` condenses an agent's history with no call, cached by name."""
    ctx, extractor, _ = await condense(store, "[mask_tool_results, extract]", agent_turns(12))
    assert extractor.calls == 0
    assert ctx.notes["strategy"] == "mask_tool_results"
    assert ctx.notes["action"] == "masked"
    cached = await store.get("tenant-a", "conv-1")
    assert cached is not None
    assert cached.strategy == "mask_tool_results"
    assert "[tool result of read_file(path=src/m0.py) masked:" in cached.extraction


async def test_a_failing_extraction_falls_back_to_masking_not_an_error(
    store: DiskHistoryStore,
) -> None:
    """A refusing model leaves `extract`; observation masking makes the stand-in instead."""
    ctx, extractor, _ = await condense(store, "[extract]", agent_turns(12))
    assert extractor.calls >= 1
    assert ctx.notes["strategy"] == "mask_observations"
    cached = await store.get("tenant-a", "conv-1")
    assert cached is not None
    assert "sorry" not in cached.extraction


async def test_a_middle_cut_growth_quotes_the_condensed_messages_anew(
    store: DiskHistoryStore,
) -> None:
    """A middle cut grown over an earlier stand-in quotes the messages that stand-in stands
    in for anew, from the resent history: a fact it no longer held is back."""
    stated: list[Message] = [
        {"role": "user", "content": "For the record, our internal project code is ZX-4471."},
        {"role": "assistant", "content": "Noted."},
    ]
    messages = [*stated, *agent_turns(12)]
    await condense(store, "[middle_cut]", messages)
    cached = await store.get("tenant-a", "conv-1")
    assert cached is not None
    assert "ZX-4471" in cached.extraction
    await store.put(cached.model_copy(update={"extraction": "Notes:\n- handlers refactored"}))
    ctx, _, _ = await condense(store, "[middle_cut]", [*messages, *agent_turns(24)[24:]])
    assert (ctx.notes["action"], ctx.notes["strategy"]) == ("truncated", "middle_cut")
    grown = await store.get("tenant-a", "conv-1")
    assert grown is not None
    assert grown.historical_end_index > cached.historical_end_index
    assert "ZX-4471" in grown.extraction


async def test_the_split_never_separates_a_tool_call_from_its_results(
    store: DiskHistoryStore,
) -> None:
    """The condensed part ends before an assistant tool_calls message or after its results."""
    messages = agent_turns(12)
    counts = [count_text(str(m.get("content") or "")) + 5 for m in messages]
    for budget in range(50, 3000, 37):
        split = split_history(messages, counts, tail_budget=budget)
        tail = [messages[i] for i in split.tail]
        assert orphan_tools(tail) == []


# ---------------------------------------------------------------- properties


@st.composite
def agent_conversations(draw: st.DrawFn) -> tuple[list[Message], list[int]]:
    """A random well-formed conversation with tool calls, and per-message token counts."""
    messages: list[Message] = []
    for step in range(draw(st.integers(1, 14))):
        kind = draw(st.sampled_from(["user", "reply", "tools"]))
        if kind == "user":
            messages.append({"role": "user", "content": f"ask {step}"})
        elif kind == "reply":
            size = draw(st.sampled_from([3, 300]))
            messages.append({"role": "assistant", "content": "word " * size})
        else:
            ids = [f"t{step}_{i}" for i in range(draw(st.integers(1, 3)))]
            messages.append(
                {"role": "assistant", "content": None, "tool_calls": [call(i) for i in ids]}
            )
            for tool_id in ids:
                size = draw(st.sampled_from([2, 200]))
                messages.append(
                    {"role": "tool", "tool_call_id": tool_id, "content": "data " * size}
                )
    counts = draw(st.lists(st.integers(1, 400), min_size=len(messages), max_size=len(messages)))
    return messages, counts


@given(conversation=agent_conversations(), budget=st.integers(0, 3000))
@settings(max_examples=examples(40, 400), deadline=None)
def test_no_strategy_orphans_a_tool_result_and_each_fits_or_says_it_cannot(
    conversation: tuple[list[Message], list[int]], budget: int
) -> None:
    """Masking and the middle cut never leave a tool message without its call before it; the
    cut fits its budget or returns None; the masked text fits its target or is None."""
    messages, counts = conversation
    for replies in (False, True):
        masked = mask_messages(messages, replies=replies)
        assert orphan_tools(masked) == []
        assert [m.get("role") for m in masked] == [m.get("role") for m in messages]
        made = masked_history(
            messages, previous=None, target_tokens=max(1, budget), replies=replies
        )
        assert made is None or count_text(made.text) <= max(1, budget)
    kept = middle_cut(messages, counts, budget)
    if kept is not None:
        assert orphan_tools(kept) == []
        own = sum(c for m, c in zip(messages, counts, strict=True) if any(m is k for k in kept))
        assert own + (MARKER_TOKENS if len(kept) < len(messages) else 0) <= budget
    assert set(STRATEGIES) == {"extract", "mask_tool_results", "mask_observations", "middle_cut"}


def test_the_extraction_bound_never_falls_between_a_call_and_its_results() -> None:
    """Past the extraction bound, a tool call and its results stay on one side together."""
    messages = agent_turns(4)
    counts = [10, 10, 10, 10] * 4
    for limit in range(10, 170, 10):
        older, newer = bounded(messages, counts, limit)
        assert orphan_tools(newer) == [] or len(newer) == 1
        assert older + newer == messages
