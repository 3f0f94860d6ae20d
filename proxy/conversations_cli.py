"""`overspill conversations ls|show|rm`: the admin endpoints from the command line.

Against a running server (`--url`, with the master key from `--key` or $OVERSPILL_MASTER_KEY)
or directly against the store a config file names (`--config`).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time
from typing import Any

import orjson

from kernel.config_loading import ConfigError, load_config
from kernel.store import HistoryStore, StoreError
from proxy.admin import PREFIX, detail, summary, tenants_of
from proxy.admin_client import AdminCallError, call
from proxy.stores import open_store


def add_parser(commands: Any) -> None:
    """Register the `conversations` subcommand."""
    parser = commands.add_parser("conversations", help="list, show or forget cached conversations")
    parser.add_argument("action", choices=["ls", "show", "rm"])
    parser.add_argument("conversation_id", nargs="?", help="for show and rm")
    parser.add_argument("--all", action="store_true", help="rm: forget every conversation")
    parser.add_argument("--tenant", help="only this tenant's conversations")
    where = parser.add_mutually_exclusive_group()
    where.add_argument("--url", help="a running overspill, e.g. http://127.0.0.1:4000")
    where.add_argument("--config", help="read the store named in this config file directly")
    parser.add_argument("--key", default=os.environ.get("OVERSPILL_MASTER_KEY"))


def run(args: argparse.Namespace) -> int:
    """Carry out the action; prints JSON (show) or a table (ls); returns the exit status."""
    if args.action in ("show", "rm") and not args.conversation_id and not args.all:
        print(f"conversations {args.action}: give a conversation id", file=sys.stderr)
        return 2
    try:
        payload = _remote(args) if args.url else asyncio.run(_local(args, _open(args)))
    except (ConfigError, StoreError, AdminCallError, LookupError) as exc:
        print(f"conversations {args.action}: {exc}", file=sys.stderr)
        return 1
    if args.action == "ls":
        _print_table(payload["data"])
    else:
        sys.stdout.write(orjson.dumps(payload, option=orjson.OPT_INDENT_2).decode() + "\n")
    return 0


def _remote(args: argparse.Namespace) -> dict[str, Any]:
    path = PREFIX if args.action == "ls" or args.all else f"{PREFIX}/{args.conversation_id}"
    method = "DELETE" if args.action == "rm" else "GET"
    params = {"tenant": args.tenant} if args.tenant else {}
    return call(method, args.url, path, args.key, params)


def _open(args: argparse.Namespace) -> HistoryStore:
    path = args.config or os.environ.get("OVERSPILL_CONFIG", "config.yaml")
    settings = load_config(path).settings
    base = os.path.dirname(os.path.abspath(path))
    return open_store(settings.general_settings.store, base_dir=base)


async def _local(args: argparse.Namespace, store: HistoryStore) -> dict[str, Any]:
    try:
        if args.action == "rm" and args.all:
            return {"deleted": await store.clear(args.tenant)}
        if args.action == "ls":
            now = time.time()
            entries = sorted(await store.entries(args.tenant), key=lambda e: -e.created_at)
            return {"data": [summary(e, now) for e in entries]}
        conversation = args.conversation_id
        tenants = await tenants_of(store, conversation, args.tenant)
        if args.action == "rm":
            deleted = sum([await store.delete(t, conversation) for t in tenants])
            if not deleted:
                raise LookupError(f"no cached conversation {conversation!r}")
            return {"deleted": deleted}
        found = [d for t in tenants if (d := await detail(store, t, conversation)) is not None]
        if not found:
            raise LookupError(f"no cached conversation {conversation!r}")
        return {"data": found}
    finally:
        await store.aclose()


def _print_table(rows: list[dict[str, Any]]) -> None:
    columns = ["conversation_id", "tenant", "model", "messages", "summarised_messages",
               "tokens_before", "tokens_after", "age_seconds"]  # fmt: skip
    widths = {c: max([len(c), *(len(str(r[c])) for r in rows)]) for c in columns}
    print("  ".join(c.ljust(widths[c]) for c in columns))
    for row in rows:
        print("  ".join(str(row[c]).ljust(widths[c]) for c in columns))
