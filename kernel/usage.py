"""What overspill's own calls cost each tenant, per UTC day in the store, and its budget.

    UsageLedger.record    one own call's counts added to its tenant's day (every own call)
    UsageLedger.left      the tenant's own tokens left this period (None: no budget)
    UsageLedger.summary   a tenant's (or every tenant's) usage over some days, by model

A tenant's budget is its client key's `own_token_budget`, else `general_settings.usage.
tenant_budget`; it counts input and output tokens of every own call (failed ones included)
within the period (`usage.period`: the UTC day, or the UTC month). The store holds one record
per tenant and day, so replicas sharing a Redis store share the count; `left` reads the
current day each time it is asked (once per request that would make an own call) and
remembers the period's earlier days, which no longer change.

The budget is soft: requests of one tenant running at once each read what is left before
they spend, so together they may pass it by at most their own bounds. A store that fails
never fails a request: the call is not recorded (logged), and an unreadable budget counts
as not reached.
"""

from __future__ import annotations

import datetime as dt
import logging
import time
from collections.abc import Callable, Sequence

from kernel.config import Settings
from kernel.errors import ContextWindowExceeded
from kernel.records import StoreError
from kernel.spending import Spend, Tally, UsageRow
from kernel.store import HistoryStore
from kernel.tokens import count_messages, count_text
from kernel.types import Complete, Completion, Message

log = logging.getLogger("overspill.usage")

DAY_SECONDS = 86_400
REMEMBERED_TENANTS = 4096
"""Tenants whose earlier days of the period this process remembers (an open gateway's
tenants are any keys' hashes: the oldest remembered go first)."""


def day_of(moment: float) -> str:
    """The UTC day of a POSIX time, `YYYY-MM-DD`."""
    return dt.datetime.fromtimestamp(moment, dt.UTC).date().isoformat()


def days_between(first: dt.date, last: dt.date) -> list[str]:
    """Every day from `first` to `last`, both included, `YYYY-MM-DD` (none when reversed)."""
    count = (last - first).days + 1
    return [(first + dt.timedelta(days=n)).isoformat() for n in range(max(0, count))]


def period_days(moment: float, period: str) -> list[str]:
    """The days of the budget period `moment` is in, up to its own day (`day` or `month`)."""
    today = dt.datetime.fromtimestamp(moment, dt.UTC).date()
    first = today.replace(day=1) if period == "month" else today
    return days_between(first, today)


class UsageLedger:
    """The store's usage records and the tenants' budgets (see the module docstring)."""

    def __init__(
        self, store: HistoryStore, settings: Settings, clock: Callable[[], float] = time.time
    ) -> None:
        self.store = store
        self.settings = settings
        usage = settings.general_settings.usage
        self.period = usage.period
        self.keep_seconds = usage.keep_days * DAY_SECONDS
        self.default_budget = usage.tenant_budget
        self.budgets = {
            key.name: key.own_token_budget
            for key in settings.general_settings.client_keys
            if key.own_token_budget is not None
        }
        self._clock = clock
        self._earlier: dict[tuple[str, str], int] = {}
        """(tenant, today) → the tokens of the period's days before today (they are final)."""

    def budget_of(self, tenant: str) -> int | None:
        """The tenant's own-token budget per period (None: none)."""
        return self.budgets.get(tenant, self.default_budget)

    async def left(self, tenant: str) -> int | None:
        """The tenant's own tokens left this period; None when it has no budget (or the
        store cannot say: logged)."""
        budget = self.budget_of(tenant)
        if budget is None:
            return None
        days = period_days(self._clock(), self.period)
        today = days[-1]
        try:
            earlier = self._earlier.get((tenant, today))
            if earlier is None:
                earlier = _tokens(await self.store.usage(tenant, days[:-1]))
                self._earlier = {**self._forget_old(today), (tenant, today): earlier}
            spent = earlier + _tokens(await self.store.usage(tenant, [today]))
        except StoreError as exc:
            log.error("usage unreadable; the tenant's budget is not checked",
                      extra={"tenant": tenant, "error": str(exc)})  # fmt: skip
            return None
        return budget - spent

    async def record(self, tenant: str, model: str, tally: Tally) -> None:
        """Add one own call's counts to the tenant's usage today. Never raises: it runs when
        the call ended, failed or not, and must not stand in for the call's own outcome (a
        failing store, or one already closed at shutdown, is logged)."""
        day = day_of(self._clock())
        try:
            await self.store.add_usage(tenant, day, model, tally, self.keep_seconds)
        except (StoreError, RuntimeError) as exc:  # RuntimeError: the store's thread is closed
            log.error("own call not counted in the usage store",
                      extra={"tenant": tenant, "model": model, "error": str(exc)})  # fmt: skip

    async def summary(self, tenant: str | None, days: Sequence[str]) -> list[UsageRow]:
        """The stored rows of a tenant (every tenant's when None) over `days`."""
        return await self.store.usage(tenant, days)

    def _forget_old(self, today: str) -> dict[tuple[str, str], int]:
        """The remembered sums still of today (earlier days' are dropped), at most
        `REMEMBERED_TENANTS` of them (the oldest go)."""
        kept = [(key, value) for key, value in self._earlier.items() if key[1] == today]
        return dict(kept[-(REMEMBERED_TENANTS - 1) :])


def _tokens(rows: Sequence[UsageRow]) -> int:
    """Input and output tokens of some usage rows together."""
    return sum(row.tally.prompt_tokens + row.tally.completion_tokens for row in rows)


async def read_budget(spend: Spend, ledger: UsageLedger | None) -> None:
    """Read the tenant's budget into `spend`, once per request (before it plans own work)."""
    if ledger is not None and not spend.tenant_checked:
        spend.tenant_checked = True
        spend.tenant_left = await ledger.left(spend.tenant)


def counted(
    complete: Complete,
    model: str,
    upstream_model: str,
    spend: Spend,
    ledger: UsageLedger | None = None,
) -> Complete:
    """`complete` as one of overspill's own calls for the request `spend` belongs to: the
    tenant's budget read once, the call admitted (or OverBudget), then settled with what it
    cost, as the upstream counted it where it said (usage, or an overflow's stated count
    less the completion asked for), else overspill's estimate; and added to the usage store."""

    async def call(messages: Sequence[Message], *, max_tokens: int) -> Completion:
        await read_budget(spend, ledger)
        estimate = count_messages(messages, upstream_model)
        spend.admit(model, estimate)
        tally = Tally(calls=1, prompt_tokens=estimate)
        try:
            done = await complete(messages, max_tokens=max_tokens)
        except ContextWindowExceeded as error:
            tally.failed = 1
            stated = error.requested if not error.estimated else None
            if stated is not None and stated > max_tokens:
                tally.prompt_tokens = stated - max_tokens
            raise
        except BaseException:
            tally.failed = 1
            raise
        else:
            if done.prompt_tokens is not None:
                tally.prompt_tokens = done.prompt_tokens
            tally.completion_tokens = (
                done.completion_tokens
                if done.completion_tokens is not None
                else count_text(done.text, upstream_model)
            )
            return done
        finally:
            spend.settle(model, tally.prompt_tokens, tally.completion_tokens, not tally.failed)
            if ledger is not None:
                await ledger.record(spend.tenant, model, tally)

    return call
