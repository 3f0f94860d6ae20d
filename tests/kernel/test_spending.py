"""A request's Spend: bounds, admission, settlement, and the notes it writes as it goes."""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Sequence
from pathlib import Path

import pytest

from kernel.errors import ContextWindowExceeded, UpstreamError
from kernel.spending import Bounds, OverBudget, Spend, Tally
from kernel.store import DiskHistoryStore
from kernel.types import Completion, Message
from kernel.usage import UsageLedger, counted, day_of, days_between, period_days
from tests.conftest import sample, settings_from

MODEL = "model_list:\n  - model_name: m\n    litellm_params: {model: openai/gpt-4o}\n"


def test_bounds_default_to_a_few_windows() -> None:
    """16 calls and four windows of input tokens unless the model's context block says."""
    entry = settings_from(MODEL).model_list[0]
    assert Bounds.of(entry, 8000) == Bounds(16, 32000)
    assert Bounds.of(entry, None) == Bounds(16, 4 * 8192)
    tight = settings_from(
        MODEL + "    context: {max_own_calls: 2, max_own_input_tokens: 500}\n"
    ).model_list[0]
    assert Bounds.of(tight, 128_000) == Bounds(2, 500)


def test_a_call_is_admitted_counted_and_noted() -> None:
    """Admission counts the call; settlement adds its tokens; the notes say it all, by model."""
    notes: dict[str, str] = {}
    spend = Spend("acme", notes)
    spend.limit(Bounds(4, 1000), "m")
    spend.admit("m", 300)
    spend.settle("m", 310, 20, ok=True)
    spend.admit("cheap", 100)
    spend.settle("cheap", 100, 0, ok=False)
    assert (spend.calls, spend.prompt_tokens, spend.completion_tokens) == (2, 410, 20)
    assert notes["spent-calls"] == "2"
    assert notes["spent-failed"] == "1"
    assert notes["spent-tokens-in"] == "410"
    assert notes["spent-tokens-out"] == "20"
    assert notes["spent-by-model"] == "m calls=1 in=310 out=20, cheap calls=1 in=100 out=0"
    assert (spend.calls_left(), spend.tokens_left()) == (2, 590)


def test_past_a_bound_a_call_is_refused_before_it_is_sent() -> None:
    """Calls, tokens, then the tenant's budget: each refuses a call that would pass it, notes
    the first bound that held work back, and counts it."""
    notes: dict[str, str] = {}
    spend = Spend("acme", notes)
    spend.limit(Bounds(1, 1000), "m")
    held = sample("overspill_bounded_requests_total", model="m", bound="tokens")
    with pytest.raises(OverBudget) as refused:
        spend.admit("m", 1001)
    assert refused.value.bound == "tokens"
    assert notes["bound"] == "tokens"
    assert sample("overspill_bounded_requests_total", model="m", bound="tokens") == held + 1
    spend.admit("m", 10)
    with pytest.raises(OverBudget) as refused:
        spend.admit("m", 1)
    assert refused.value.bound == "calls"
    assert notes["bound"] == "tokens"  # the first bound stays the one noted
    budgeted = Spend("acme", tenant_left=50)
    assert budgeted.why_not(51) == "tenant-budget"
    assert budgeted.why_not(50) is None


def test_the_cheaper_roads_are_noted_once_each() -> None:
    """A road taken is listed once, in order; the bound that caused it is noted with it."""
    notes: dict[str, str] = {}
    spend = Spend("acme", notes)
    spend.took("history:masked", "calls")
    spend.took("documents:excerpts")
    spend.took("history:masked")
    assert notes["bound-roads"] == "history:masked,documents:excerpts"
    assert notes["bound"] == "calls"


def test_an_unlimited_spend_only_counts() -> None:
    """Before any layer set bounds, every call is admitted; one upstream call writes no note,
    the second says how many the request caused."""
    notes: dict[str, str] = {}
    spend = Spend("acme", notes)
    spend.called()
    assert notes == {}
    spend.called()
    assert notes["upstream-calls"] == "2"
    spend.admit("m", 10**9)


class Answer:
    """An own call's upstream: answers with usage, or raises what it is given."""

    def __init__(self, error: Exception | None = None) -> None:
        self.error = error

    async def __call__(self, messages: Sequence[Message], *, max_tokens: int) -> Completion:
        if self.error is not None:
            raise self.error
        return Completion("notes", prompt_tokens=123, completion_tokens=7)


async def test_counted_settles_what_the_upstream_said(tmp_path: Path) -> None:
    """An answered call settles the upstream's usage; an overflow settles the count it stated
    (less the completion asked for); another failure the estimate; each goes to the store."""
    store = DiskHistoryStore(tmp_path / "store")
    ledger = UsageLedger(store, settings_from(MODEL))
    spend = Spend("acme")
    prompt: list[Message] = [{"role": "user", "content": "summarise"}]
    assert (await counted(Answer(), "m", "gpt-4o", spend, ledger)(prompt, max_tokens=50)).text
    overflow = ContextWindowExceeded("too long", requested=900, limit=800)
    with pytest.raises(ContextWindowExceeded):
        await counted(Answer(overflow), "m", "gpt-4o", spend, ledger)(prompt, max_tokens=50)
    with pytest.raises(UpstreamError):
        await counted(Answer(UpstreamError("down")), "m", "gpt-4o", spend, ledger)(
            prompt, max_tokens=50
        )
    tally = spend.own["m"]
    assert (tally.calls, tally.failed, tally.completion_tokens) == (3, 2, 7)
    estimate = tally.prompt_tokens - 123 - 850
    assert 0 < estimate < 20  # the last call's estimate: a short prompt
    (row,) = await store.usage("acme", [day_of(time.time())])
    assert row.tally == Tally(3, 2, tally.prompt_tokens, 7)
    await store.aclose()


async def test_the_tenant_budget_is_read_once_and_holds(tmp_path: Path) -> None:
    """A tenant's budget per period is read before the request's first own call; past it
    the call is refused (tenant-budget), and a key's own budget overrides the default."""
    store = DiskHistoryStore(tmp_path / "store")
    settings = settings_from(
        MODEL + "general_settings:\n  usage: {tenant_budget: 200}\n  client_keys:\n"
        "    - {name: big, key: sk-big, own_token_budget: 100000}\n"
    )
    ledger = UsageLedger(store, settings)
    assert (ledger.budget_of("acme"), ledger.budget_of("big")) == (200, 100000)
    prompt: list[Message] = [{"role": "user", "content": "summarise"}]
    first = Spend("acme")
    await counted(Answer(), "m", "gpt-4o", first, ledger)(prompt, max_tokens=50)
    assert first.tenant_left == 200
    assert await ledger.left("acme") == 200 - 130
    second = Spend("acme")
    with pytest.raises(OverBudget) as refused:
        await counted(Answer(), "m", "gpt-4o", second, ledger)(
            [{"role": "user", "content": "word " * 200}], max_tokens=50
        )
    assert refused.value.bound == "tenant-budget"
    await store.aclose()


def test_periods_are_utc_days_or_months() -> None:
    """A day's period is that day; a month's runs from its first day to the day asked."""
    moment = dt.datetime(2026, 3, 4, 23, 59, tzinfo=dt.UTC).timestamp()
    assert day_of(moment) == "2026-03-04"
    assert period_days(moment, "day") == ["2026-03-04"]
    assert period_days(moment, "month") == ["2026-03-01", "2026-03-02", "2026-03-03", "2026-03-04"]
    assert days_between(dt.date(2026, 2, 27), dt.date(2026, 3, 1)) == [
        "2026-02-27",
        "2026-02-28",
        "2026-03-01",
    ]
