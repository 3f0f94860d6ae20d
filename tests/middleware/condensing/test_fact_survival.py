"""Planted facts survive long conversations through repeated compaction (growths ahead of the window, many times over).

A scripted upstream overflows past its window by token count; a scripted perfect summariser
keeps every fact it sees (as short note lines, within its output budget). Whatever is lost
is then lost by the engine, not by the model.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

import orjson

from kernel.errors import ContextWindowExceeded
from kernel.store import DiskHistoryStore
from kernel.tokens import count_messages, count_text
from kernel.types import ChatRequest, ChatResponse, Completion, Message, RequestContext
from middleware.condensing.extraction import extract_history
from middleware.condensing.ledger import Previous
from middleware.layers.history_splice import HistorySplice
from middleware.layers.overflow_recovery import OverflowRecovery
from middleware.pipeline import compose
from providers.fake import json_response
from tests.conftest import make_services, settings_from

CODE = re.compile(r"\b[A-Z]{2}-\d{4}\b")
REPEAT = 3
FACT = re.compile(r"item (\d+) is ([A-Z]{2}-\d{4})")
FILLER = (
    "Could you walk me through how the caching layer behaves when a request arrives while "
    "another one for the same key is still running, and what the trade-offs are?"
)
REPLY = (
    "When two requests for the same key overlap, the second waits for the first and reuses "
    "its result, so the expensive work runs once; the cost is a little latency for the "
    "waiter and a lock per key that must be cleaned up when nobody holds it any more."
)


def code_of(index: int) -> str:
    """The planted code for fact `index` (distinct, deterministic)."""
    letters = "ABCDEFGHJKLMNPQRSTUVWXYZ"
    return f"{letters[index % 24]}{letters[(index * 7) % 24]}-{4100 + index * 37}"


def planted_conversation(turns: int, codes: int) -> list[Message]:
    """`turns` user/assistant turns; `codes` of the user turns plant one code each."""
    every = max(1, turns // codes)
    messages: list[Message] = [{"role": "system", "content": "You are a helpful assistant."}]
    planted = 0
    for turn in range(turns):
        if turn % every == 0 and planted < codes:
            user = f"Please remember: the code for item {planted} is {code_of(planted)}."
            planted += 1
        else:
            user = f"Question {turn}: {FILLER}"
        messages += [
            {"role": "user", "content": user},
            {"role": "assistant", "content": f"Answer {turn}: {REPLY * REPEAT}"},
        ]
    return messages


class PerfectSummariser:
    """A scripted extractor that keeps every fact it sees, one short line per fact."""

    def __init__(self) -> None:
        self.calls = 0
        self.merges: list[str] = []

    async def __call__(self, messages: Sequence[Message], *, max_tokens: int) -> Completion:
        """Every `item N is CODE` (or `item N code CODE` note line) in the prompt, as notes."""
        self.calls += 1
        text = "\n".join(str(m.get("content", "")) for m in messages)
        if "[Part 1]" in text:
            self.merges.append(text.split("[Part 2]")[0])
        seen = dict.fromkeys(FACT.findall(text) + _noted(text))
        lines = [f"- the code for item {n} is {code}" for n, code in seen] or [
            "- small talk about caching"
        ]
        out: list[str] = []
        finish = "stop"
        for line in lines:
            if count_text("\n".join([*out, line])) > max_tokens:
                finish = "length"
                break
            out.append(line)
        return Completion("\n".join(out), count_messages(messages), max_tokens, finish)


def _noted(text: str) -> list[tuple[str, str]]:
    """Facts as a merged ledger line may write them (`item 3 … XY-1234` nearby)."""
    return re.findall(r"item (\d+)\W{1,3}([A-Z]{2}-\d{4})", text)


class WindowedUpstream:
    """The user's model: overflows when the prompt's tokens pass its window, else answers."""

    def __init__(self, window: int) -> None:
        self.window = window
        self.sent: list[ChatRequest] = []

    async def __call__(self, request: ChatRequest, ctx: RequestContext) -> ChatResponse:
        """Record the request; a prompt over the window is an overflow with the real count."""
        self.sent.append(request)
        tokens = count_messages(request.messages)
        if tokens > self.window:
            raise ContextWindowExceeded(
                f"maximum context length is {self.window} tokens, requested {tokens}",
                requested=tokens,
                limit=self.window,
            )
        return json_response("ok", prompt_tokens=tokens)


def config(window: int) -> str:
    """One model with a known window."""
    return f"""
model_list:
  - model_name: local
    litellm_params: {{model: openai/smollm2, api_base: "http://upstream.test/v1"}}
    context: {{window: {window}, max_output_tokens: 128}}
"""


def chat(messages: Sequence[Message]) -> ChatRequest:
    """A chat request for the messages."""
    body: dict[str, Any] = {"model": "local", "messages": list(messages), "max_tokens": 128}
    return ChatRequest("local", tuple(messages), False, body, raw=orjson.dumps(body))


async def lost_codes(store: DiskHistoryStore, turns: int, codes: int, window: int) -> list[str]:
    """Drive a conversation turn by turn through splice and recovery; the planted codes
    missing from the last request the model saw."""
    settings = settings_from(config(window))
    shared = make_services(settings, store, lambda _name: PerfectSummariser(), {"local": window})
    upstream = WindowedUpstream(window)
    pipeline = compose([HistorySplice(shared), OverflowRecovery(shared)], upstream)
    whole = planted_conversation(turns, codes)
    for end in range(3, len(whole) + 1, 2):  # each request ends with a user message
        ctx = RequestContext("rid", "tenant-a", conversation_hint="conv-1")
        ctx.model = settings.model_list[0]
        await pipeline(chat(whole[:end]), ctx)
    seen = "\n".join(str(m.get("content", "")) for m in upstream.sent[-1].messages)
    return [code_of(i) for i in range(codes) if code_of(i) not in seen]


async def test_80_turns_at_2500_tokens_lose_no_planted_code(store: DiskHistoryStore) -> None:
    """80 turns, a 2,500-token window, 20 planted codes: the model still sees all 20."""
    lost = await lost_codes(store, turns=80, codes=20, window=2500)
    assert lost == []


async def test_100_growths_with_a_perfect_summariser_lose_no_fact() -> None:
    """100 incremental extractions at a 2,500-token window's sizes keep all 25 planted codes."""
    whole = planted_conversation(200, 25)[1:]
    summariser = PerfectSummariser()
    previous: Previous | None = None
    for growth in range(100):
        result = await extract_history(
            whole[growth * 4 : (growth + 1) * 4],
            complete=summariser,
            target_tokens=575,
            extractor_window=2250,
            previous=previous,
        )
        assert count_text(result.text) <= 575
        previous = Previous(result.text, result.notes, result.facts)
    assert previous is not None
    assert [code_of(i) for i in range(25) if code_of(i) not in previous.text] == []


async def test_earlier_notes_enter_the_merge_when_one_call_cannot_hold_them() -> None:
    """Earlier notes plus new turns past one call: the merge's first part is the earlier notes."""
    summariser = PerfectSummariser()
    notes = "\n".join(f"- the code for item {i} is {code_of(i)}" for i in range(40))
    earlier = Previous(f"Notes:\n{notes}", notes)
    new = planted_conversation(30, 3)[1:]
    result = await extract_history(
        new,
        complete=summariser,
        target_tokens=900,
        extractor_window=700,
        previous=earlier,
    )
    assert summariser.merges
    assert code_of(0) in summariser.merges[0]
    assert [code_of(i) for i in range(40) if code_of(i) not in result.text] == []
