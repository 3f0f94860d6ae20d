"""What the redactor costs a log line and an error body.

Usage: ``python scripts/bench_redaction.py [--secrets 10] [--runs 20000]``

Formats a chat request's log line (`overspill.request`, with notes) with the JSON formatter,
and redacts a 300-byte upstream error body, once with no secrets configured and once with
``--secrets`` OpenAI-sized keys (plus a URL password). Figures are microseconds per call (best
of 5 rounds of ``--runs``) and the ratio with secrets to without.
"""

from __future__ import annotations

import argparse
import logging
import secrets
import time
from collections.abc import Callable

import orjson

from kernel import redaction
from proxy.logs import JsonFormatter


def best_of(call: Callable[[], object], runs: int) -> float:
    """Microseconds per call, best of five rounds."""
    rounds = []
    for _ in range(5):
        started = time.perf_counter()
        for _ in range(runs):
            call()
        rounds.append((time.perf_counter() - started) / runs * 1e6)
    return min(rounds)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--secrets", type=int, default=10)
    parser.add_argument("--runs", type=int, default=20000)
    args = parser.parse_args()
    keys = ["sk-proj-" + secrets.token_urlsafe(48) for _ in range(args.secrets)]
    fields = {
        "request_id": secrets.token_hex(16), "tenant": secrets.token_hex(8), "model": "gpt-4o",
        "stream": False, "status": 200, "ms": 812.4,
        "notes": {"action": "spliced", "tokens-before": "91234", "tokens-after": "20211"},
    }  # fmt: skip
    record = logging.makeLogRecord(
        {"name": "overspill.request", "msg": "request", "levelname": "INFO", **fields}
    )
    body = orjson.dumps(
        {"error": {"message": "Rate limit reached for gpt-4o in organization org-abc on "
                   "tokens per min (TPM): Limit 30000, Used 29000, Requested 2000. Please "
                   "try again in 2s. Visit https://platform.openai.com/account/rate-limits "
                   "to learn more.", "type": "tokens", "param": None, "code": "rate_limit"}}
    )  # fmt: skip
    formatter = JsonFormatter()
    figures: dict[str, tuple[float, float]] = {}
    for label, found in (
        ("none", redaction.Redactor()),
        ("with", redaction.Redactor([*keys, "pa55-w0rd-123"])),
    ):
        redaction.redactor = found
        figures[label] = (
            best_of(lambda: formatter.format(record), args.runs),
            best_of(lambda: found.redact_bytes(body), args.runs),  # noqa: B023 - used at once
        )
    (line_none, body_none), (line_with, body_with) = figures["none"], figures["with"]
    print(f"{args.secrets} secrets, best of 5 x {args.runs} runs, µs per call")
    for label, (none, with_secrets) in (
        ("log line", (line_none, line_with)),
        ("error body", (body_none, body_with)),
    ):
        ratio = with_secrets / none
        print(f"{label:<11} no secrets {none:7.2f}   with {with_secrets:7.2f}   x{ratio:.2f}")


if __name__ == "__main__":
    main()
