"""What overspill's own calls cost each tenant over a period: the operator's usage summary.

    GET /overspill/usage?tenant=T&from=YYYY-MM-DD&to=YYYY-MM-DD     (master key)
    overspill usage [--tenant T] [--from D] [--to D] (--url URL | --config FILE)

Both read the per-day counts the store keeps (kernel/usage.py) and answer the same JSON: one
row per tenant and model over the days asked (calls, failed calls, input and output tokens),
and per tenant its total with, for the current budget period, its budget and what is left.
Without `from`/`to` the period is the budget's current one (`general_settings.usage.period`:
today, or this month), in UTC; a range is at most `usage.keep_days` days long.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import os
import sys
import time
from collections.abc import Sequence
from typing import Any

import orjson
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from kernel import redaction
from kernel.config import Settings
from kernel.config_loading import ConfigError, load_config
from kernel.errors import InvalidChatRequest
from kernel.spending import Tally, UsageRow
from kernel.store import StoreError
from kernel.usage import UsageLedger, days_between, period_days
from proxy.admin_client import AdminCallError, call
from proxy.keys import Keyring
from proxy.stores import open_store

PATH = "/overspill/usage"


def days_asked(first: str | None, last: str | None, settings: Settings, now: float) -> list[str]:
    """The days a summary covers: `first`..`last` (YYYY-MM-DD, UTC), else the budget's
    current period; InvalidChatRequest naming the parameter when they cannot be used."""
    if first is None and last is None:
        return period_days(now, settings.general_settings.usage.period)
    today = dt.datetime.fromtimestamp(now, dt.UTC).date()
    start = _day(first, "from") if first is not None else None
    end = _day(last, "to") if last is not None else today
    start = start or end
    if start > end:
        raise InvalidChatRequest(f"from ({start}) is after to ({end})", param="from")
    keep = settings.general_settings.usage.keep_days
    if (end - start).days >= keep:
        raise InvalidChatRequest(
            f"the range {start}..{end} is longer than the {keep} days usage is kept "
            "(general_settings.usage.keep_days)",
            param="from",
        )
    return days_between(start, end)


def _day(text: str, param: str) -> dt.date:
    try:
        return dt.date.fromisoformat(text)
    except ValueError:
        raise InvalidChatRequest(
            f"{param} must be a day as YYYY-MM-DD (UTC), got {text[:40]!r}", param=param
        ) from None


async def summary(ledger: UsageLedger, tenant: str | None, days: Sequence[str]) -> dict[str, Any]:
    """The usage report over `days` (see the module docstring)."""
    rows = await ledger.summary(tenant, days)
    by_model: dict[tuple[str, str], Tally] = {}
    for row in rows:
        by_model.setdefault((row.tenant, row.model), Tally()).add(row.tally)
    data = [_row(owner, model, tally) for (owner, model), tally in sorted(by_model.items())]
    tenants = sorted({owner for owner, _ in by_model} | ({tenant} if tenant else set()))
    return {
        "object": "usage",
        "from": days[0] if days else None,
        "to": days[-1] if days else None,
        "data": data,
        "tenants": [await _tenant(ledger, owner, rows) for owner in tenants],
    }


def _row(tenant: str, model: str, tally: Tally) -> dict[str, Any]:
    return {
        "tenant": tenant,
        "model": model,
        "calls": tally.calls,
        "failed": tally.failed,
        "prompt_tokens": tally.prompt_tokens,
        "completion_tokens": tally.completion_tokens,
        "tokens": tally.prompt_tokens + tally.completion_tokens,
    }


async def _tenant(ledger: UsageLedger, tenant: str, rows: Sequence[UsageRow]) -> dict[str, Any]:
    """A tenant's total over the days asked, and its budget and what is left of it now."""
    mine = [row.tally for row in rows if row.tenant == tenant]
    found: dict[str, Any] = {
        "tenant": tenant,
        "tokens": sum(t.prompt_tokens + t.completion_tokens for t in mine),
        "calls": sum(t.calls for t in mine),
        "budget": ledger.budget_of(tenant),
        "period": ledger.period,
    }
    if found["budget"] is not None:
        found["left_this_period"] = await ledger.left(tenant)
    return found


def usage_routes(ledger: UsageLedger, keys: Keyring) -> list[Route]:
    """`GET /overspill/usage`, guarded by the master key."""

    async def usage(request: Request) -> Response:
        keys.require_admin(request.headers.get("authorization"))
        query = request.query_params
        days = days_asked(query.get("from"), query.get("to"), ledger.settings, time.time())
        report = await summary(ledger, query.get("tenant") or None, days)
        body = redaction.redactor.redact_bytes(orjson.dumps(report))
        return Response(body, media_type="application/json")

    return [Route(PATH, usage, methods=["GET"])]


def add_parser(commands: Any) -> None:
    """Register the `usage` subcommand."""
    parser = commands.add_parser("usage", help="what overspill's own calls cost each tenant")
    parser.add_argument("--tenant", help="one tenant (default: every tenant)")
    parser.add_argument("--from", dest="first", help="first day, YYYY-MM-DD (UTC)")
    parser.add_argument("--to", dest="last", help="last day, YYYY-MM-DD (UTC)")
    where = parser.add_mutually_exclusive_group()
    where.add_argument("--url", help="a running overspill, e.g. http://127.0.0.1:4000")
    where.add_argument("--config", help="read the store named in this config file directly")
    parser.add_argument("--key", default=os.environ.get("OVERSPILL_MASTER_KEY"))
    parser.add_argument("--json", action="store_true", help="print the JSON report")


def run(args: argparse.Namespace) -> int:
    """Print the report (a table, or JSON with --json); returns the exit status."""
    try:
        report = _remote(args) if args.url else asyncio.run(_local(args))
    except (ConfigError, StoreError, AdminCallError, LookupError, InvalidChatRequest) as exc:
        print(f"usage: {getattr(exc, 'message', exc)}", file=sys.stderr)
        return 1
    if args.json:
        sys.stdout.write(orjson.dumps(report, option=orjson.OPT_INDENT_2).decode() + "\n")
        return 0
    print(f"overspill's own calls, {report['from']} .. {report['to']} (UTC)")
    print(f"{'tenant':24} {'model':24} {'calls':>7} {'failed':>7} {'in':>12} {'out':>10}")
    for row in report["data"]:
        print(
            f"{row['tenant'][:24]:24} {row['model'][:24]:24} {row['calls']:>7} "
            f"{row['failed']:>7} {row['prompt_tokens']:>12} {row['completion_tokens']:>10}"
        )
    for tenant in report["tenants"]:
        if tenant["budget"] is not None:
            print(
                f"{tenant['tenant']}: budget {tenant['budget']} tokens per {tenant['period']}, "
                f"{tenant.get('left_this_period')} left"
            )
    return 0


def _remote(args: argparse.Namespace) -> dict[str, Any]:
    params = {k: v for k, v in (("tenant", args.tenant), ("from", args.first),
                                ("to", args.last)) if v}  # fmt: skip
    return call("GET", args.url, PATH, args.key, params)


async def _local(args: argparse.Namespace) -> dict[str, Any]:
    path = args.config or os.environ.get("OVERSPILL_CONFIG", "config.yaml")
    settings, base = await asyncio.to_thread(_loaded, path)
    store = open_store(settings.general_settings.store, base_dir=base)
    try:
        ledger = UsageLedger(store, settings)
        days = days_asked(args.first, args.last, settings, time.time())
        return await summary(ledger, args.tenant, days)
    finally:
        await store.aclose()


def _loaded(path: str) -> tuple[Settings, str]:
    """The config's settings and its directory (the store's relative path is from there)."""
    return load_config(path).settings, os.path.dirname(os.path.abspath(path))
