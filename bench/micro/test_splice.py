"""The splice decision's CPU cost per turn, and overflow_recovery's planning.

A conversation of N messages (~500 characters each) whose first N-10 are cached, sent through
the history_splice layer to a no-op upstream: conversation id, store read, hash-chain check,
token estimate, assembly, the calibration sample. Each measured turn follows the same
conversation's previous turn (two messages fewer, untimed) through the same layer, as in a
real process, with freshly parsed messages. Cases:

- `unknown`: the window is unknown (splice only);
- `known`: a known window with the spliced request between `compact_at` and `grow_at`: the
  per-turn planning path (budget, split, a growth scheduled for after the response);
- `known, quoting`: the same with turns that name topics and sessions dated by a stamp
  opening their first turn, so the newest user message shares a rare word with a few
  condensed turns and they are quoted before it (`relevance.py`: the passages, their stamps,
  the BM25 ranking, the pick);
- `recovery`: overflow_recovery's planning for the same conversation (token counts, the plan
  and the plan sized for `compact_to`) against a window a tenth of its size;
- `recovery, cold counts`: the same with a fresh token cache (a process's first look).

Targets: 200 messages under 0.5 ms CPU, 2,000 under 5 ms. Before/after a change: save a run
on one revision and compare on the other (docs/benchmarks.md).
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import orjson
import pytest

from bench.micro.conftest import Timed
from kernel.config import ModelEntry, Settings
from kernel.config_loading import parse_config
from kernel.conversation import chain
from kernel.store import DiskHistoryStore, HistoryEntry
from kernel.types import ChatRequest, ChatResponse, Complete, RequestContext
from middleware.condensing.extraction import PROMPT_VERSION
from middleware.layers.history_splice import HistorySplice
from middleware.layers.hysteresis import tail_share
from middleware.layers.overflow_recovery import OverflowRecovery
from providers.fake import completion
from tests.conftest import make_services

CONFIG = """
model_list:
  - model_name: local
    litellm_params: {model: openai/smollm2, api_base: "http://upstream.test/v1"}
"""
CASES = ("unknown", "known", "known, quoting", "recovery", "recovery, cold counts")


def conversation(size: int, topics: bool = False) -> list[dict[str, Any]]:
    """A system prompt and `size - 1` alternating turns of ~500 characters; with `topics`,
    turns of ~300 characters of words as chat has them (40 of 20 common words, 30 of 5,000
    rarer ones, none with a digit), each naming one of `size // 40` topics (at least 5),
    every third asking, every 20th opening a dated session."""
    messages: list[dict[str, Any]] = [{"role": "system", "content": "You are helpful."}]
    for i in range(size - 1):
        role = "user" if i % 2 == 0 else "assistant"
        text = f"turn {i}: " + " ".join(f"word{(i * 7 + j) % 97}" for j in range(70))
        if topics:
            common = (_word(j % 20) for j in range(40))
            rare = (_word(100 + (i * 31 + j * 17) % 5000) for j in range(30))
            stamp = f"[10:{i % 60:02} am on {i // 20 % 28 + 1} May, 2023] " if i % 20 == 0 else ""
            topic = _word(6000 + i % max(5, size // 40))
            said = " ".join((*common, *rare))
            text = f"{stamp}{said} {topic}{'?' if i % 3 == 0 else '.'}"
        messages.append({"role": role, "content": text})
    return messages


def _word(n: int) -> str:
    """A word of letters for `n` ("ba", "ca", …, "baca")."""
    letters = ""
    while True:
        letters += "bcdfghjklmnpqrstvwxz"[n % 20] + "aeiou"[n // 20 % 5]
        n //= 100
        if not n:
            return letters


def _no_calls(name: str) -> Complete:
    """Splice decisions make no model calls."""
    raise AssertionError(f"unexpected internal call to {name}")


class Turns:
    """One case at one size, kept across rounds like a running process (its layer, its store,
    what it remembers)."""

    def __init__(self, store: DiskHistoryStore, case: str, size: int) -> None:
        self.store, self.case, self.size = store, case, size
        self.whole = orjson.dumps(conversation(size, topics=case == "known, quoting"))
        self.settings: Settings = parse_config(CONFIG, "bench.yaml", {}).settings
        self.entry: ModelEntry = self.settings.model_list[0]
        self.window: int | None = None
        self.asked = 0
        self.prompt_tokens: dict[int, int] = {}
        """The upstream's prompt_tokens by messages sent (none yet: it teaches nothing)."""

    def _layer(self) -> Any:
        windows = {"local": self.window} if self.window else {}
        services = make_services(self.settings, self.store, _no_calls, windows)
        return (OverflowRecovery if self.case.startswith("recovery") else HistorySplice)(services)

    async def setup(self) -> None:
        """The cache entry, and for `known` the window that puts the turn past compact_at."""
        messages = orjson.loads(self.whole)
        end = self.size - 10
        await self.store.put(
            HistoryEntry(
                tenant="t", conversation_id=f"bench-{self.case}-{self.size}", model_id="local",
                historical_end_index=end, message_count=end,
                extraction="Notes:\n- " + "fact " * 100,
                chain=chain(messages, end, PROMPT_VERSION), prompt_version=PROMPT_VERSION,
                tokens_before=self.size * 120, tokens_after=110, created_at=time.time(),
            )
        )  # fmt: skip
        if self.case.startswith("recovery"):
            self.window = max(2048, 2048 * self.size // 20)
        self.layer = self._layer()
        sent: list[Any] = []
        for size in (self.size - 2, self.size):  # the upstream then reports what we count
            await self.turn(size, sent)
        for messages in sent:
            self.prompt_tokens[len(messages)] = self.layer.estimator.count(self.entry, messages)
        if self.case == "known":
            await self._find_window()
        elif self.case == "known, quoting":  # room below grow_at for the quote, no growth due
            self.window = max(self.prompt_tokens.values()) * 3
            self.layer = self._layer()

    async def _find_window(self) -> None:
        """The largest window (3% steps down) at which the turn schedules a growth."""
        window = max(self.prompt_tokens.values()) * 3
        while window > 256:
            self.window = window
            self.layer = self._layer()
            try:
                notes = await self.turn(self.size, [])
            except AssertionError:
                break
            if notes.get("compaction") == "scheduled":
                self.window = int(window * 0.97)  # a little further from compact_at
                self.layer = self._layer()
                notes = await self.turn(self.size, [])
                assert notes.get("compaction") == "scheduled", notes
                assert "waited" not in notes, notes
                return
            window = int(window * 0.97)
        raise AssertionError("no window puts the turn between compact_at and grow_at")

    async def previous(self) -> None:
        """The conversation's previous turn (untimed), so the measured one follows it."""
        if self.case == "recovery, cold counts":
            self.layer = self._layer()
        else:
            await self.turn(self.size - 2, [])

    async def measured(self) -> None:
        self.asked += 1  # not the last measured message again (its quote would be reused),
        notes = await self.turn(self.size, [], " " * (self.asked % 2))  # the same words
        if not self.case.startswith("recovery"):
            assert notes["action"] == "spliced", notes
        assert ("relevant-turns" in notes) == (self.case == "known, quoting"), notes

    async def turn(self, size: int, sent: list[Any], asked: str = "") -> Any:
        answers = {
            length: ChatResponse(body=orjson.dumps(completion("ok", prompt_tokens=tokens)))
            for length, tokens in self.prompt_tokens.items()
        }
        silent = ChatResponse(body=orjson.dumps(completion("ok", prompt_tokens=0)))

        async def upstream(request: ChatRequest, ctx: RequestContext) -> ChatResponse:
            sent.append(request.messages)
            return answers.get(len(request.messages), silent)

        messages = orjson.loads(self.whole)[:size]  # parsed afresh, as every request is
        messages[-1]["content"] += asked
        request = ChatRequest(
            "local", tuple(messages), False, {"model": "local", "messages": messages}
        )
        hint = f"bench-{self.case}-{self.size}"
        ctx = RequestContext("r", "t", model=self.entry, conversation_hint=hint)
        if self.case.startswith("recovery"):
            self._recovery_plan(request, ctx)
        else:
            await self.layer.handle(request, ctx, upstream)
        return ctx.notes

    def _recovery_plan(self, request: ChatRequest, ctx: RequestContext) -> None:
        """overflow_recovery's planning for this request."""
        condenser = self.layer.condenser
        counts = condenser.counts(ctx, request, self.entry)
        plan = condenser.plan(request, self.entry, window=self.window, scale=1.0, counts=counts)
        share = tail_share(self.entry, plan, None)
        condenser.plan(
            request, self.entry, window=self.window, scale=1.0, counts=counts, intact_share=share
        )


@pytest.mark.parametrize("size", [20, 200, 2000])
@pytest.mark.parametrize("case", CASES)
def test_turn(
    timed: Timed, loop: asyncio.AbstractEventLoop, store: DiskHistoryStore, case: str, size: int
) -> None:
    """One turn's decision, after the previous turn of the same conversation."""
    turns = Turns(store, case, size)
    loop.run_until_complete(turns.setup())
    timed.rounds(f"splice: {case}", turns.measured, setup=turns.previous, rounds=30)
