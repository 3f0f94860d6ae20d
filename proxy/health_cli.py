"""`overspill health`: a running overspill's `GET /health` (every deployment asked for one
token) as a table, exiting 1 when a deployment is unhealthy, so a script or a deploy step can
stop on it."""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

import orjson

from proxy.admin_client import AdminCallError, call

WAIT_SECONDS = 180.0
"""How long the command waits for the answer: the server bounds each check at 60 seconds,
eight at a time."""


def add_parser(commands: Any) -> None:
    """Register the `health` subcommand."""
    parser = commands.add_parser(
        "health", help="ask a running overspill to call each model deployment once"
    )
    parser.add_argument("--model", help="one model's deployments (default: every model)")
    parser.add_argument("--url", default="http://127.0.0.1:4000", help="the running overspill")
    parser.add_argument(
        "--key", default=os.environ.get("OVERSPILL_MASTER_KEY"),
        help="an API key (default: $OVERSPILL_MASTER_KEY; a client key checks its models)",
    )  # fmt: skip
    parser.add_argument("--json", action="store_true", help="print the JSON answer")


def run(args: argparse.Namespace) -> int:
    """Print the deployments' health; 0 when none is unhealthy, 1 otherwise or on failure."""
    params = {"model": args.model} if args.model else None
    try:
        report = call("GET", args.url, "/health", args.key, params,
                      answers=(503,), seconds=WAIT_SECONDS)  # fmt: skip
    except AdminCallError as exc:
        print(f"health: {exc}", file=sys.stderr)
        return 1
    if args.json:
        sys.stdout.write(orjson.dumps(report, option=orjson.OPT_INDENT_2).decode() + "\n")
    else:
        for line in lines(report):
            print(line)
    return 1 if report.get("unhealthy_count") else 0


def lines(report: dict[str, Any]) -> list[str]:
    """The table: one line per deployment, its verdict, names, and time or what is wrong."""
    found = []
    for verdict, key in (("healthy", "healthy_endpoints"), ("unhealthy", "unhealthy_endpoints"),
                         ("unchecked", "unchecked_endpoints")):  # fmt: skip
        for item in report.get(key) or []:
            where = f" at {item['api_base']}" if item.get("api_base") else ""
            said = (
                f"{item['seconds']:.2f} s" if verdict == "healthy"
                else f"{item.get('status', '')} {item.get('error', '')}".strip()
                if verdict == "unhealthy" else str(item.get("reason", ""))
            )  # fmt: skip
            found.append(f"{verdict:<10} {item['model_name']} ({item['model']}{where}): {said}")
    found.append(
        f"{report.get('healthy_count', 0)} healthy, {report.get('unhealthy_count', 0)} "
        f"unhealthy, {len(report.get('unchecked_endpoints') or [])} unchecked"
    )
    return found
