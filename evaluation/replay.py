"""Ask recorded probes again, with only the quoted facts' rendering changed.

`overspill eval --keep-shown` records with each row what the model was shown: the stored
extraction, then the messages after it. This rebuilds the request the model got from such a
row (the conversation's system message, the extraction as overspill's context message, the
messages after it, the question), sends it to an OpenAI-compatible server at temperature 0,
and prints the recorded answer beside the new one. With `--rerender` a decision's line and
its confirmation, recorded as two lines (``- user:`` then ``- assistant: Agreed, …``), are
rendered as this code renders them (``Fact.render``); nothing else changes, so a
difference in the answers is the rendering's, not the notes' or the growths'. The replay of
an unchanged row gives its recorded answer as long as the server runs with the settings the
run had (with llama-server's prompt cache, the same request may answer otherwise).

    .venv/bin/python -m evaluation.replay --url http://127.0.0.1:8089/v1 \\
        --kind decision --rerender var/eval/x24/overspill-turns-*.jsonl
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import httpx

from evaluation.conditions import text_of
from evaluation.conversations import generate
from evaluation.phrasings import template_sets
from evaluation.probes import Probe
from evaluation.runner import ANSWER_TOKENS
from kernel.types import Message
from middleware.condensing.ledger import Fact
from middleware.condensing.ledger.records import settles
from middleware.condensing.ledger.select import confirms
from middleware.condensing.split import context_message
from proxy.arguments import not_negative

USER, REPLY = "- user: ", "- assistant: "


def rerendered(extraction: str) -> str:
    """The extraction with each decision's two lines (the user's, then the assistant's
    confirming it) rendered as this code renders the pair."""
    lines = extraction.split("\n")
    out: list[str] = []
    i = 0
    while i < len(lines):
        after = lines[i + 1] if i + 1 < len(lines) else ""
        if lines[i].startswith(USER) and after.startswith(REPLY):
            fact = Fact("user", lines[i].removeprefix(USER), 1, confirmed=after.removeprefix(REPLY))
            if confirms(fact.text, fact.confirmed) and settles(fact):
                out.append(fact.render())
                i += 2
                continue
        out.append(lines[i])
        i += 1
    return "\n".join(out)


Found = tuple[Message, str, int, list[Message], Probe]


def request_of(row: dict[str, Any], fillers: int) -> Found | None:
    """The system message, the stored extraction, how many messages it stood in for, the
    messages after them (the question last), and the probe (None: no extraction stood in
    for any message when the row was asked)."""
    templates = template_sets(str(row.get("templates") or "tune"))[0]
    conversation = generate(int(row["seed"]), fillers=fillers, templates=templates)
    probe = next(p for p in conversation.probes if p.kind == row["kind"])
    messages = [*conversation.messages, {"role": "user", "content": probe.prompt}]
    shown = str(row["shown"])
    for start in range(1, len(messages)):
        rest = "\n\n" + text_of(messages[start:])
        if shown.endswith(rest) and len(shown) > len(rest):
            return messages[0], shown[: -len(rest)], start - 1, messages[start:], probe
    return None


def rows(paths: Sequence[Path], kind: str) -> Iterator[dict[str, Any]]:
    """The rows of `kind` that carry what the model was shown."""
    for path in paths:
        for line in path.read_text().splitlines():
            row = json.loads(line)
            if row.get("kind") == kind and row.get("shown"):
                yield row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("rows", nargs="+", type=Path, help="rows written with --keep-shown")
    parser.add_argument("--url", default="http://127.0.0.1:8089/v1")
    parser.add_argument("--model", default="qwen")
    parser.add_argument("--kind", default="decision")
    parser.add_argument("--fillers", type=not_negative, default=40, help="as the run had them")
    parser.add_argument(
        "--rerender", action="store_true", help="decisions as this code renders them"
    )
    args = parser.parse_args()
    right = {"recorded": 0, "now": 0}
    with httpx.Client(timeout=900) as client:
        for row in rows(args.rows, args.kind):
            found = request_of(row, args.fillers)
            if found is None:
                continue
            system, extraction, replaced, tail, probe = found
            if args.rerender:
                extraction = rerendered(extraction)
            body = {
                "model": args.model,
                "messages": [system, context_message(extraction, replaced), *tail],
                "max_tokens": ANSWER_TOKENS,
                "temperature": 0,
            }
            reply = client.post(f"{args.url}/chat/completions", json=body)
            reply.raise_for_status()
            answer = str(reply.json()["choices"][0]["message"]["content"])
            right["recorded"] += bool(row["correct"])
            right["now"] += probe.score(answer)
            print(f"seed {row['seed']}: {row['answer']!r} → {answer!r} ({probe.score(answer)})")
    print(f"right: recorded {right['recorded']}, now {right['now']}")


if __name__ == "__main__":
    main()
