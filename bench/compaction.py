"""Compaction off the request path, measured: a long conversation with tool calls, turn by turn,
through overspill to the real local model, in three modes in one run.

    .venv/bin/python -m bench.compaction --turns 60        # a few minutes
    .venv/bin/python -m bench.compaction                   # 200 turns
    .venv/bin/python -m bench.compaction --qwen            # Qwen2.5-Coder-0.5B weights

Modes, each a real `overspill serve` before the same llama-server (window `--window`, known
to overspill through `context.window`):

    background  this tree: growth after the response past compact_at (0.7), a turn waits only
                past grow_at (0.85), compaction down to compact_to (0.5)
    wave1       the inline behaviour, the code at commit 2a57f59 (`git archive`, run with this
                venv's python): fail first, then grow inline past grow_at
    off         `middleware: []`: the whole conversation, while it still fits

The conversation is deterministic: user turns with planted facts, every fourth turn an
assistant `tool_calls` message and its tool result (carrying a fact too), scripted assistant
replies (the model's own answers are not fed back, so every mode sends the same history). The
model answers with at most `--max-tokens` tokens. Between turns the bench waits for the
background jobs overspill reports running (the user reading and typing; at most `--think`
seconds) and reports how long that was.

Printed per mode: failed upstream calls, turns that waited for an extraction, added latency
per turn (p50/p95/max) against the same turn with compaction off where it still fits, the
share of prompt tokens served from llama-server's prefix cache on turns that did not grow
(`usage.prompt_tokens_details.cached_tokens`, else `timings.cache_n`), extraction calls and
tokens per 100 turns, and needle recall at the end: (a) the planted answers present in what
the next request would carry (the stored extraction + the intact tail), (b) the model's own
answer to a question about each fact, asked through overspill.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from io import BytesIO
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[1]

from kernel.store import DiskHistoryStore  # noqa: E402
from tests.ports import free_port  # noqa: E402

WAVE1 = "2a57f59"
KEY = "sk-bench"
SYSTEM = "You are a helpful assistant for a shipping company. Answer briefly."
FILLER = (
    "Let us also go over the weekly schedule, the crew rota and the paperwork for the port "
    "authority once more, so nothing is forgotten before departure."
)
NAMES = ["Marta", "Ines", "Tomas", "Aiko", "Ravi", "Lena", "Omar", "Sofia", "Karl", "Yusuf"]
PORTS = ["Lisbon", "Oslo", "Genoa", "Tallinn", "Valencia", "Gdansk", "Porto", "Bergen"]


@dataclass(frozen=True, slots=True)
class Fact:
    """A planted fact: the question about it and its answer."""

    question: str
    answer: str


@dataclass(slots=True)
class Turn:
    """One measured request."""

    seconds: float
    status: int
    action: str = ""
    waited: bool = False
    prompt_tokens: int = 0
    cached_tokens: int = 0
    scheduled: bool = False
    replaced: str = ""
    grown: bool = False
    """The first turn spliced from a new extraction (its prefix changed: a cache miss)."""


@dataclass(slots=True)
class Mode:
    """One mode's run."""

    name: str
    turns: list[Turn] = field(default_factory=list)
    think_seconds: float = 0.0
    metrics: dict[str, float] = field(default_factory=dict)
    present: int = 0
    answered: int = 0


def conversation(turns: int) -> tuple[list[list[dict[str, Any]]], list[Fact]]:
    """Per turn, the messages that turn adds (user, maybe tool call + result, reply)."""
    facts: list[Fact] = []
    added: list[list[dict[str, Any]]] = []
    for t in range(turns):
        name, port = NAMES[t % len(NAMES)], PORTS[t % len(PORTS)]
        code = f"ZX-{4000 + t * 37 % 997}"
        step: list[dict[str, Any]] = []
        if t % 4 == 3:
            call_id = f"call_{t}"
            step.append({"role": "user", "content": f"Turn {t}: look up shipment {code}."})
            step.append(
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {
                            "id": call_id,
                            "type": "function",
                            "function": {
                                "name": "lookup_shipment",
                                "arguments": f'{{"code": "{code}"}}',
                            },
                        }
                    ],
                }
            )
            berth = f"berth {t % 40 + 1}"
            step.append(
                {
                    "role": "tool",
                    "tool_call_id": call_id,
                    "content": f'{{"code": "{code}", "status": "loaded", "location": "{berth}", '
                    f'"port": "{port}", "note": "{FILLER}"}}',
                }
            )
            step.append({"role": "assistant", "content": f"Shipment {code} is at {berth}."})
            facts.append(Fact(f"Where is shipment {code}?", berth))
        else:
            step.append(
                {
                    "role": "user",
                    "content": f"Turn {t}: {name} will sail from {port} on pier {t + 100}. "
                    + FILLER,
                }
            )
            step.append({"role": "assistant", "content": f"Noted: {name}, {port}, pier {t + 100}."})
            if t % 4 == 1:
                facts.append(Fact(f"Which pier does {name} sail from in turn {t}?", str(t + 100)))
        added.append(step)
    return added, facts


def wait_ready(url: str, proc: subprocess.Popen[bytes], log: Path, timeout: float = 180) -> None:
    """Poll `url` until it answers 200 while the process lives."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{url} exited: {log.read_text()[-2000:]}")
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(url, timeout=2).status_code == 200:
                return
        time.sleep(0.3)
    raise RuntimeError(f"{url} not ready after {timeout} s")


def model_paths(qwen: bool) -> tuple[str, str]:
    """The llama-server binary and the weights (scripts/local-model.sh)."""
    args = ["bash", str(ROOT / "scripts" / "local-model.sh"), *(["--qwen"] if qwen else [])]
    out = subprocess.run(args, check=True, capture_output=True, text=True).stdout
    found = dict(line.split("=", 1) for line in out.splitlines() if "=" in line)
    return found["LLAMA_SERVER"], found["QWEN_MODEL" if qwen else "LLAMA_MODEL"]


@contextlib.contextmanager
def llama_server(
    binary: str,
    weights: str,
    window: int,
    tmp: Path,
    threads: int = 1,
    flash_attention: bool = False,
) -> Iterator[str]:
    """llama-server with two slots of `window` tokens each (conversation and extraction calls
    keep their own prefix caches), `threads` threads, and flash attention off as `make run`
    has it unless asked for (`python -m bench.model_attention`); yields its /v1 URL."""
    port = free_port()
    log = tmp / "llama.log"
    with log.open("wb") as sink:
        proc = subprocess.Popen(
            [binary, "-m", weights, "-c", str(2 * window), "-np", "2", "-t", str(threads),
             "--host", "127.0.0.1", "--port", str(port), "--no-webui",
             "-fa", "on" if flash_attention else "off"],
            stdout=sink, stderr=subprocess.STDOUT,
        )  # fmt: skip
    try:
        wait_ready(f"http://127.0.0.1:{port}/health", proc, log)
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        proc.terminate()
        proc.wait(timeout=20)


def config(upstream: str, window: int, layers: bool) -> str:
    """The overspill config of one mode."""
    return f"""
model_list:
  - model_name: local
    litellm_params: {{model: openai/local, api_base: "{upstream}", timeout: 600}}
    context: {{window: {window}, max_output_tokens: 64}}
general_settings:
  master_key: {KEY}
  max_body_bytes: 2000000
  store: {{path: store}}
{"" if layers else "middleware: []"}
"""


@contextlib.contextmanager
def overspill(source: Path, text: str, tmp: Path) -> Iterator[str]:
    """`overspill serve` from `source` (a tree of the project) with `text` as its config."""
    tmp.mkdir(parents=True, exist_ok=True)
    (tmp / "config.yaml").write_text(text)
    port = free_port()
    log = tmp / "overspill.log"
    env = {**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True", "PYTHONPATH": str(source)}
    with log.open("wb") as sink:
        proc = subprocess.Popen(
            [sys.executable, "-m", "proxy", "serve", "--config", "config.yaml", "--port",
             str(port)],
            stdout=sink, stderr=subprocess.STDOUT, cwd=tmp, env=env,
        )  # fmt: skip
    try:
        wait_ready(f"http://127.0.0.1:{port}/health/readiness", proc, log)
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.terminate()
        proc.wait(timeout=60)


def wave1_tree(tmp: Path) -> Path:
    """The wave-1 code (commit 2a57f59) exported with `git archive` into `tmp`."""
    target = tmp / "wave1-src"
    archive = subprocess.run(
        ["git", "-C", str(ROOT), "archive", WAVE1], check=True, capture_output=True
    ).stdout
    target.mkdir(parents=True)
    with tarfile.open(fileobj=BytesIO(archive)) as tar:
        tar.extractall(target, filter="data")
    return target


def scrape(client: httpx.Client) -> dict[str, float]:
    """overspill's counters that the report needs, summed over labels."""
    text = client.get("/metrics").text
    wanted = {
        "failed": r"^overspill_upstream_failures_total\{",
        "extraction_calls": r"^overspill_extraction_calls_total\{",
        "extraction_tokens": r"^overspill_extraction_tokens_total\{",
        "jobs": r"^overspill_compaction_jobs_total\{",
        "warmups": r"^overspill_cache_warmups_total\{",
    }
    found = dict.fromkeys(wanted, 0.0)
    for line in text.splitlines():
        for key, pattern in wanted.items():
            if re.match(pattern, line):
                found[key] += float(line.rsplit(" ", 1)[1])
    return found


def send(client: httpx.Client, messages: list[dict[str, Any]], max_tokens: int) -> Turn:
    """One chat turn; its time, overspill's notes, and the upstream's cache figures."""
    body = {"model": "local", "messages": messages, "max_tokens": max_tokens, "temperature": 0}
    started = time.perf_counter()
    response = client.post(
        "/v1/chat/completions", json=body, headers={"x-conversation-id": "bench"}
    )
    turn = Turn(time.perf_counter() - started, response.status_code)
    turn.action = response.headers.get("x-overspill-action", "")
    turn.waited = "x-overspill-waited" in response.headers or (
        turn.action.endswith("extracted") or response.headers.get("x-overspill-attempts") == "2"
    )
    turn.scheduled = response.headers.get("x-overspill-compaction") == "scheduled"
    turn.replaced = response.headers.get("x-overspill-messages-replaced", "")
    if response.status_code == 200:
        payload = response.json()
        usage = payload.get("usage") or {}
        turn.prompt_tokens = int(usage.get("prompt_tokens") or 0)
        details = usage.get("prompt_tokens_details") or {}
        cached = details.get("cached_tokens")
        if cached is None:
            cached = (payload.get("timings") or {}).get("cache_n", 0)
        turn.cached_tokens = int(cached or 0)
    return turn


def run_mode(
    mode: Mode, url: str, steps: list[list[dict[str, Any]]], args: argparse.Namespace
) -> list[dict[str, Any]]:
    """Send the conversation turn by turn; returns the final history."""
    history: list[dict[str, Any]] = [{"role": "system", "content": SYSTEM}]
    auth = {"authorization": f"Bearer {KEY}"}
    with httpx.Client(base_url=url, headers=auth, timeout=900) as client:
        scheduled = 0
        for index, step in enumerate(steps):
            history.extend(step[:-1])
            turn = send(client, history, args.max_tokens)
            history.append(step[-1])
            previous = mode.turns[-1].replaced if mode.turns else ""
            turn.grown = turn.waited or turn.replaced != previous
            mode.turns.append(turn)
            if mode.name == "off" and turn.status != 200:
                break  # the whole conversation no longer fits: later turns would fail too
            scheduled += turn.scheduled
            started = time.perf_counter()
            while scrape(client)["jobs"] < scheduled and time.perf_counter() - started < args.think:
                time.sleep(0.1)
            mode.think_seconds += time.perf_counter() - started
            if args.verbose:
                cached = f"{turn.cached_tokens}/{turn.prompt_tokens}"
                print(f"  {mode.name} turn {index}: {turn.status} {turn.seconds:.2f}s "
                      f"{turn.action or '-'} cached {cached}")  # fmt: skip
        mode.metrics = scrape(client)
    return history


def recall(
    mode: Mode,
    url: str,
    history: list[dict[str, Any]],
    facts: list[Fact],
    store: Path,
    args: argparse.Namespace,
) -> None:
    """(a) answers present in the stored extraction + the intact tail; (b) answered."""
    import asyncio

    async def carried() -> str:
        found = DiskHistoryStore(store)
        try:
            entry = await found.get("anonymous", "bench")
            if entry is None:
                entries = await found.entries()
                entry = entries[0] if entries else None
        finally:
            await found.aclose()
        if entry is None:
            return " ".join(str(m.get("content") or "") for m in history)
        tail = history[entry.historical_end_index :]
        return entry.extraction + " " + " ".join(str(m.get("content") or "") for m in tail)

    text = asyncio.run(carried())
    mode.present = sum(fact.answer in text for fact in facts)
    if not args.ask:
        return
    auth = {"authorization": f"Bearer {KEY}"}
    with httpx.Client(base_url=url, headers=auth, timeout=900) as client:
        for fact in facts[-args.ask :]:
            question = [*history, {"role": "user", "content": fact.question}]
            body = {"model": "local", "messages": question, "max_tokens": 24, "temperature": 0}
            response = client.post(
                "/v1/chat/completions", json=body, headers={"x-conversation-id": "bench"}
            )
            if response.status_code == 200:
                answer = response.json()["choices"][0]["message"].get("content") or ""
                mode.answered += fact.answer in answer


def percentile(values: list[float], share: float) -> float:
    """The `share` quantile (nearest rank)."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))] if ordered else 0.0


def report(modes: list[Mode], turns: int, facts: list[Fact], args: argparse.Namespace) -> None:
    """The figures, one line per mode."""
    off = next(m for m in modes if m.name == "off")
    fits = [i for i, t in enumerate(off.turns) if t.status == 200]
    print(f"\n{turns} turns, window {args.window}, model {args.model_name}; 2 shared cores")
    refused = next((i for i, t in enumerate(off.turns) if t.status != 200), "-")
    print(f"compaction off still fits the first {len(fits)} turns (first refusal: {refused})")
    header = (
        f"{'mode':<11}{'failed':>7}{'waited':>7}{'non-200':>8}{'add p50':>9}{'add p95':>9}"
        f"{'add max':>9}{'p95 ratio':>10}{'growths':>8}{'cache':>7}{'g cache':>8}"
        f"{'extr/100':>9}{'tok/100':>9}"
        f"{'warm/100':>9}{'think s':>8}{'present':>8}{'answered':>9}"
    )
    print(header)
    for mode in modes:
        both = [i for i in fits if i < len(mode.turns) and mode.turns[i].status == 200]
        added = [mode.turns[i].seconds - off.turns[i].seconds for i in both]
        ratio = percentile([mode.turns[i].seconds for i in both], 0.95) / max(
            1e-9, percentile([off.turns[i].seconds for i in both], 0.95)
        )
        steady = [t for t in mode.turns if t.status == 200 and not t.grown and t.prompt_tokens]
        steady = steady[1:]  # the very first request has nothing cached
        grown = sum(t.grown for t in mode.turns)
        growth_turns = [t for t in mode.turns if t.status == 200 and t.grown and t.prompt_tokens]
        growth_cache = sum(t.cached_tokens for t in growth_turns) / max(
            1, sum(t.prompt_tokens for t in growth_turns)
        )
        cache = sum(t.cached_tokens for t in steady) / max(1, sum(t.prompt_tokens for t in steady))
        per100 = 100 / turns
        print(
            f"{mode.name:<11}{mode.metrics.get('failed', 0):>7.0f}"
            f"{sum(t.waited for t in mode.turns):>7}"
            f"{sum(t.status != 200 for t in mode.turns):>8}"
            f"{percentile(added, 0.5):>9.2f}{percentile(added, 0.95):>9.2f}"
            f"{max(added, default=0):>9.2f}{ratio:>10.2f}{grown:>8}{cache:>7.0%}"
            f"{growth_cache:>8.0%}"
            f"{mode.metrics.get('extraction_calls', 0) * per100:>9.1f}"
            f"{mode.metrics.get('extraction_tokens', 0) * per100:>9.0f}"
            f"{mode.metrics.get('warmups', 0) * per100:>9.1f}"
            f"{mode.think_seconds:>8.1f}{mode.present:>5}/{len(facts):<3}"
            f"{mode.answered:>5}/{min(args.ask, len(facts)) if args.ask else 0}"
        )
    print(
        "failed: upstream calls that failed (overflows); waited: turns that waited for an "
        "extraction (x-overspill-waited; for wave1 an inline growth or a recovery); add: "
        "seconds added per turn against compaction off, on the turns off still fits; growths: "
        "turns sent with a new extraction (the prefix changed); cache: prompt tokens served "
        "from the prefix cache on the other turns; g cache: the same on the growth turns; "
        "warm/100: cache warm-ups after a growth per 100 turns; think s: "
        "time the bench waited between turns for background jobs; present: planted answers "
        "in the stored extraction + intact tail; answered: the model's own answers."
    )


def main() -> None:
    """Run the three modes and print the figures."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--turns", type=int, default=200)
    parser.add_argument("--window", type=int, default=2048)
    parser.add_argument("--max-tokens", type=int, default=16)
    parser.add_argument("--think", type=float, default=60.0)
    parser.add_argument("--ask", type=int, default=0, help="ask about the last N facts")
    parser.add_argument("--qwen", action="store_true", help="Qwen2.5-Coder-0.5B weights")
    parser.add_argument("--modes", default="off,wave1,background")
    parser.add_argument("--verbose", action="store_true")
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # stop the servers on the way out
    args.model_name = "Qwen2.5-Coder-0.5B" if args.qwen else "SmolLM2-135M"
    steps, facts = conversation(args.turns)
    binary, weights = model_paths(args.qwen)
    tmp = Path(tempfile.mkdtemp(prefix="bench-compaction-"))
    try:
        sources = {"off": ROOT, "background": ROOT}
        if "wave1" in args.modes:
            sources["wave1"] = wave1_tree(tmp)
        modes: list[Mode] = []
        with llama_server(binary, weights, args.window, tmp) as upstream:
            for name in args.modes.split(","):
                mode = Mode(name)
                where = tmp / name
                text = config(upstream, args.window, layers=name != "off")
                print(f"running {name} ...", flush=True)
                with overspill(sources[name], text, where) as url:
                    history = run_mode(mode, url, steps, args)
                    if name != "off":
                        recall(mode, url, history, facts, where / "store", args)
                modes.append(mode)
        report(modes, args.turns, facts, args)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
