"""Needle-recall benchmark of the extraction engine against a real local model (llama-server).

Builds synthetic conversations with planted facts (codes, names, dates, numbers) between
filler turns, then measures recall in four conditions:

    full      the whole history is sent (the upper bound)
    one       one extraction of the whole history
    nested    five nested incremental extractions (each over the turns since the last)
    drop      the oldest turns dropped until the rest fits the extraction's budget

Recall is measured two ways: (a) the fact's answer appears in the context text, and (b) the
model, given only a system prompt + that context + a question, answers with it. An occasional
evaluation, not a test: it starts its own llama-server (``scripts/local-model.sh --qwen``
gives the binary and the weights) on a free loopback port and stops it at the end.

    .venv/bin/python scripts/bench_recall.py                 # Qwen 0.5B, 1 conversation
    .venv/bin/python scripts/bench_recall.py --smollm2       # the weak 135M model
    .venv/bin/python scripts/bench_recall.py --extractor-window 1536   # force map-reduce
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import random
import re
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from kernel.errors import ContextWindowExceeded, UpstreamError
from kernel.tokens import count_messages, count_text
from kernel.types import Completion, Message
from middleware.condensing.extraction import extract_history

ROOT = Path(__file__).resolve().parent.parent
SYSTEM = "You are a helpful assistant. Answer briefly, using the conversation's context."
CONTEXT_LABEL = "Context from earlier in this conversation (condensed):\n"


@dataclass(frozen=True, slots=True)
class Fact:
    """A planted fact: what the user says, the question about it, the accepted answers."""

    statement: str
    ack: str
    question: str
    answers: tuple[str, ...]


FACTS = (
    Fact(
        "For the record, our internal project code is ZX-4471.",
        "Noted, I'll use that project code.",
        "What is our internal project code?",
        ("zx-4471", "zx4471"),
    ),
    Fact(
        "The public release is scheduled for 14 March 2025.",
        "Got it, the release date is noted.",
        "On what date is the public release scheduled?",
        ("14 march", "march 14"),
    ),
    Fact(
        "My manager is Ingrid Halvorsen, please cc her on status mails.",
        "Understood, I will keep her in copy.",
        "What is the name of my manager?",
        ("halvorsen",),
    ),
    Fact(
        "The staging server listens on port 8443.",
        "Thanks, staging on that port.",
        "Which port does the staging server listen on?",
        ("8443",),
    ),
    Fact(
        "Our budget for this quarter is 37,500 euros.",
        "OK, I'll keep the budget in mind.",
        "What is our budget for this quarter, in euros?",
        ("37,500", "37500", "37 500"),
    ),
    Fact(
        "The main database is named orca_ledger.",
        "Noted, orca_ledger it is.",
        "What is the name of the main database?",
        ("orca_ledger",),
    ),
    Fact(
        "Our customer number with the hosting vendor is CUST-90215.",
        "Thanks, I have the customer number.",
        "What is our customer number with the hosting vendor?",
        ("90215",),
    ),
    Fact(
        "The on-call engineer this week is Tomasz Wierzbicki.",
        "Understood.",
        "Who is the on-call engineer this week?",
        ("wierzbicki",),
    ),
    Fact(
        "We decided to use PostgreSQL instead of MySQL for the new service.",
        "Good choice, noted.",
        "Which database did we decide to use for the new service?",
        ("postgres",),
    ),
    Fact(
        "The team offsite will take place in Tallinn.",
        "Sounds nice, noted.",
        "In which city will the team offsite take place?",
        ("tallinn",),
    ),
)

FILLER = (
    (
        "Can you explain what a Python list comprehension is?",
        "A list comprehension builds a list from an iterable in one expression, for example "
        "squares = [x * x for x in range(10)]. You can add a condition at the end to filter "
        "items, such as [x for x in items if x > 0]. They are usually faster and easier to read "
        "than an explicit loop that appends to a list, but very long ones with several nested "
        "loops are better written as ordinary for loops.",
    ),
    (
        "What's the difference between a process and a thread?",
        "A process has its own memory space, while threads inside one process share memory. "
        "Creating a process is heavier, but a crash in one process does not take down the "
        "others. Threads are cheaper to start and communicate through shared data, which is "
        "why they need locks or queues to avoid race conditions. In CPython the global "
        "interpreter lock means threads help mostly with I/O-bound work.",
    ),
    (
        "How do I write a good commit message?",
        "Start with a short summary line of about 50 characters in the imperative mood, like "
        "'Fix crash when the config file is empty'. Leave a blank line, then explain what "
        "changed and why, wrapping the body at around 72 characters. Mention the issue it "
        "closes if your tracker links them. Keep each commit focused on one logical change so "
        "the history stays easy to review and to revert.",
    ),
    (
        "Any tips for staying focused while working from home?",
        "Keep a regular start time and a dedicated place to work, even a small desk. Plan "
        "the day's two or three most important tasks in the morning and block time for them. "
        "Turn off chat notifications during focus blocks and batch your replies instead. "
        "Short breaks every hour or so help, and a walk at lunch makes the afternoon much "
        "more productive.",
    ),
    (
        "What does HTTP status 404 mean?",
        "It means Not Found: the server understood the request but has no resource at that "
        "URL. It is different from 403 Forbidden, where the resource exists but you may not "
        "access it, and from 410 Gone, which says the resource was removed on purpose. For "
        "APIs, returning 404 for an unknown id is the usual convention.",
    ),
    (
        "Should I use tabs or spaces?",
        "Most style guides, including PEP 8 for Python, recommend four spaces per level. The "
        "important thing is consistency within a project, ideally enforced by a formatter so "
        "nobody has to think about it. Configure your editor to insert spaces when you press "
        "Tab and let the formatter fix the rest on save or in a pre-commit hook.",
    ),
    (
        "How can I make my unit tests run faster?",
        "Avoid real network calls and sleeps by using fakes and injected clocks. Share "
        "expensive setup through fixtures with a wider scope when it is safe. Run tests in "
        "parallel with a plugin such as pytest-xdist, and profile the slowest ones with "
        "--durations to find the worst offenders. Often a handful of tests account for most "
        "of the time.",
    ),
    (
        "What is a race condition?",
        "A race condition happens when the result depends on the timing of events that run "
        "concurrently, such as two threads updating the same counter. Each reads the old "
        "value, adds one and writes it back, so one update is lost. The fix is to make the "
        "operation atomic, with a lock, an atomic primitive, or by giving each piece of data "
        "a single owner.",
    ),
    (
        "Can you recommend a way to learn SQL?",
        "Start with SELECT, WHERE, ORDER BY and GROUP BY on a small sample database, then learn "
        "joins by drawing the two tables and the matching rows. Practice by answering real "
        "questions about data you care about. Once that feels natural, look at indexes and "
        "EXPLAIN output to understand why some queries are slow.",
    ),
    (
        "What is the point of code review?",
        "Code review catches bugs early, spreads knowledge of the codebase across the team, "
        "and keeps the style consistent. It works best with small changes, a clear "
        "description of intent, and reviewers who ask questions rather than issue orders. "
        "Automate the mechanical checks so humans can focus on design and correctness.",
    ),
    (
        "How do I deal with a flaky test?",
        "First reproduce it by running the test many times in a loop, ideally in isolation "
        "and with the same random seed. Common causes are shared state between tests, "
        "timing assumptions, and dependence on test order. Quarantine it if it blocks others, "
        "but track it and fix the root cause rather than adding retries.",
    ),
    (
        "What's a good way to name variables?",
        "Name things for what they mean in the problem, not for their type: 'unpaid_invoices' "
        "says more than 'list2'. Short names are fine for tiny scopes like loop indices. Use "
        "verbs for functions and nouns for values, and stay consistent with the names the "
        "rest of the codebase already uses.",
    ),
)


def build_conversation(seed: int, pairs: int = 20) -> tuple[list[Message], list[Fact]]:
    """A conversation of `pairs` user/assistant exchanges; facts spread over the first 90%."""
    rng = random.Random(seed)
    facts = list(FACTS)
    rng.shuffle(facts)
    slots = sorted(rng.sample(range(int(pairs * 0.9)), len(facts)))
    fillers = [FILLER[i % len(FILLER)] for i in rng.sample(range(len(FILLER)), len(FILLER))]
    messages: list[Message] = []
    fact_iter, filler_iter = iter(facts), iter(fillers * 2)
    for pair in range(pairs):
        if pair in slots:
            fact = next(fact_iter)
            user, assistant = fact.statement, fact.ack
        else:
            user, assistant = next(filler_iter)
        messages += [{"role": "user", "content": user}, {"role": "assistant", "content": assistant}]
    return messages, facts


def free_port() -> int:
    """A free loopback TCP port."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def model_paths(qwen: bool) -> tuple[str, str]:
    """The llama-server binary and the weights, from scripts/local-model.sh."""
    args = [str(ROOT / "scripts" / "local-model.sh")] + (["--qwen"] if qwen else [])
    out = subprocess.run(args, check=True, capture_output=True, text=True).stdout
    values = dict(line.split("=", 1) for line in out.splitlines() if "=" in line)
    return values["LLAMA_SERVER"], values["QWEN_MODEL" if qwen else "LLAMA_MODEL"]


@contextlib.contextmanager
def llama_server(binary: str, weights: str, ctx: int, threads: int) -> Iterator[str]:
    """Run llama-server on a free port for the duration; yields its base URL."""
    port = free_port()
    cmd = [binary, "-m", weights, "-a", "bench", "-c", str(ctx), "-np", "1", "-t", str(threads)]
    cmd += ["--host", "127.0.0.1", "--port", str(port), "--no-webui"]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_ready(url, proc)
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def wait_ready(url: str, proc: subprocess.Popen[bytes], timeout: float = 120.0) -> None:
    """Poll /health until the server answers 200 (or fail if it exited)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"llama-server exited with {proc.returncode}")
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                return
        time.sleep(0.2)  # a script polling a real server, not a test
    raise RuntimeError("llama-server did not become ready")


class LlamaComplete:
    """The engine's `Complete`, straight to llama-server at temperature 0."""

    def __init__(self, client: httpx.AsyncClient) -> None:
        """Wrap a client whose base_url is the server."""
        self.client = client
        self.calls = 0

    async def __call__(self, messages: Sequence[Message], *, max_tokens: int) -> Completion:
        """One chat completion; an overflow becomes ContextWindowExceeded."""
        self.calls += 1
        body = {"messages": list(messages), "max_tokens": max_tokens, "temperature": 0}
        response = await self.client.post("/v1/chat/completions", json=body)
        if response.status_code == 400 and "exceed" in response.text:
            raise ContextWindowExceeded(response.text, provider="llama-server")
        if response.status_code != 200:
            raise UpstreamError(response.text, upstream_status=response.status_code)
        data = response.json()
        usage = data.get("usage") or {}
        return Completion(
            data["choices"][0]["message"]["content"] or "",
            usage.get("prompt_tokens"),
            usage.get("completion_tokens"),
            data["choices"][0].get("finish_reason"),
        )


def found(answer: str, fact: Fact) -> bool:
    """Whether a text contains one of the fact's accepted answers."""
    text = re.sub(r"\s+", " ", answer.lower())
    return any(a in text for a in fact.answers)


async def ask_all(complete: LlamaComplete, context: list[Message], facts: list[Fact]) -> int:
    """How many facts the model answers right given only the context (question last)."""
    right = 0
    for fact in facts:
        question = f"{fact.question} Answer with just the value."
        prompt = [*context, {"role": "user", "content": question}]
        result = await complete(prompt, max_tokens=24)
        right += found(result.text, fact)
    return right


def with_extraction(text: str) -> list[Message]:
    """System + the extraction in one labelled message, as the recovery layer sends it."""
    return [{"role": "system", "content": f"{SYSTEM}\n\n{CONTEXT_LABEL}{text}"}]


def drop_oldest(messages: list[Message], budget: int) -> list[Message]:
    """The newest messages whose count fits the budget."""
    kept: list[Message] = []
    for message in reversed(messages):
        if count_messages([*kept, message]) > budget:
            break
        kept.insert(0, message)
    return kept


@dataclass(slots=True)
class Row:
    """One condition's result for one conversation."""

    condition: str
    present: int
    answered: int
    total: int
    tokens: int
    seconds: float


async def run_conversation(
    complete: LlamaComplete, seed: int, args: argparse.Namespace
) -> list[Row]:
    """All four conditions on one conversation."""
    messages, facts = build_conversation(seed)
    n = len(facts)
    rows: list[Row] = []

    started = time.monotonic()
    full = [{"role": "system", "content": SYSTEM}, *messages]
    rows.append(
        Row("full", n, await ask_all(complete, full, facts), n, count_messages(messages), 0)
    )
    rows[-1].seconds = time.monotonic() - started

    async def extracted(name: str, text: str, t0: float) -> None:
        present = sum(found(text, f) for f in facts)
        answered = await ask_all(complete, with_extraction(text), facts)
        rows.append(Row(name, present, answered, n, count_text(text), time.monotonic() - t0))
        if args.show:
            print(f"--- {name} extraction ---\n{text}\n", flush=True)

    kwargs = {"complete": complete, "target_tokens": args.target, "focus": None}
    started = time.monotonic()
    one = await extract_history(messages, extractor_window=args.extractor_window, **kwargs)
    await extracted("one", one.text, started)

    started = time.monotonic()
    previous: str | None = None
    step = len(messages) // args.passes
    for i in range(args.passes):
        part = messages[i * step : (i + 1) * step if i < args.passes - 1 else len(messages)]
        nested = await extract_history(
            part, extractor_window=args.extractor_window, previous=previous, **kwargs
        )
        previous = nested.text
    assert previous is not None
    await extracted(f"nested x{args.passes}", previous, started)

    started = time.monotonic()
    kept = drop_oldest(messages, args.target)
    text = "\n".join(f"{m['role']}: {m['content']}" for m in kept)
    present = sum(found(text, f) for f in facts)
    answered = await ask_all(complete, [{"role": "system", "content": SYSTEM}, *kept], facts)
    rows.append(Row("drop oldest", present, answered, n, count_messages(kept), 0))
    rows[-1].seconds = time.monotonic() - started
    return rows


def report(rows: list[Row], history_tokens: int, target: int) -> None:
    """Print recall per condition, summed over conversations."""
    print(f"\nhistory ~{history_tokens} tokens/conversation, extraction target {target} tokens")
    print(f"{'condition':<12} {'present':>9} {'answered':>9} {'tokens':>7} {'seconds':>8}")
    for name in dict.fromkeys(r.condition for r in rows):
        group = [r for r in rows if r.condition == name]
        total = sum(r.total for r in group)
        present = 100 * sum(r.present for r in group) / total
        answered = 100 * sum(r.answered for r in group) / total
        tokens = sum(r.tokens for r in group) // len(group)
        seconds = sum(r.seconds for r in group)
        print(f"{name:<12} {present:>8.0f}% {answered:>8.0f}% {tokens:>7} {seconds:>8.1f}")


async def main_async(args: argparse.Namespace, url: str) -> None:
    """Run every conversation against the server and print the report."""
    rows: list[Row] = []
    async with httpx.AsyncClient(base_url=url, timeout=600) as client:
        complete = LlamaComplete(client)
        for seed in range(args.seed, args.seed + args.conversations):
            rows += await run_conversation(complete, seed, args)
            print(f"conversation {seed}: done ({complete.calls} calls so far)", flush=True)
    history = count_messages(build_conversation(args.seed)[0])
    report(rows, history, args.target)


def main() -> None:
    """Parse arguments, start llama-server, run the benchmark."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smollm2", action="store_true", help="use SmolLM2-135M, not Qwen")
    parser.add_argument("--conversations", type=int, default=1)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--target", type=int, default=300, help="extraction target tokens")
    parser.add_argument("--ctx", type=int, default=4096, help="llama-server -c")
    parser.add_argument("--extractor-window", type=int, default=0, help="default: --ctx")
    parser.add_argument("--passes", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--show", action="store_true", help="print the extractions")
    args = parser.parse_args()
    args.extractor_window = args.extractor_window or args.ctx
    binary, weights = model_paths(qwen=not args.smollm2)
    print(f"model {Path(weights).name}, -c {args.ctx}, -t {args.threads}", flush=True)
    started = time.monotonic()
    with llama_server(binary, weights, args.ctx, args.threads) as url:
        asyncio.run(main_async(args, url))
    print(f"total {time.monotonic() - started:.0f} s (pid {os.getpid()})")


if __name__ == "__main__":
    main()
