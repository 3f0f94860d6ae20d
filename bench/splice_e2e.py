"""The splice decision's CPU cost, and what the splice saves on a long real conversation.

    .venv/bin/python scripts/bench_splice.py                      # decision cost, diskcache
    .venv/bin/python scripts/bench_splice.py --baseline HEAD~1    # before/after, one run
    .venv/bin/python scripts/bench_splice.py --redis redis://127.0.0.1:6379/0
    .venv/bin/python scripts/bench_splice.py --e2e --turns 100    # real local model, ~15 min

Decision cost: a conversation of N messages (~500 characters each) whose first N-10 are
cached, sent through the history_splice layer to a no-op upstream: conversation id, store read,
hash-chain check, token estimate, assembly, the calibration sample. Each measured turn follows
the same conversation's previous turn (two messages fewer) through the same layer, as in a real
process, with freshly parsed messages. Cases:

- `unknown`: the window is unknown (splice only);
- `known`: a known window with the spliced request between `compact_at` and `grow_at`: the
  per-turn planning path (budget, split, a growth scheduled for after the response);
- `recovery`: overflow_recovery's planning for the same conversation (token counts, the plan
  and the plan sized for `compact_to`) against a window a tenth of its size.

Targets: 200 messages under 0.5 ms CPU, 2,000 under 5 ms. `--baseline REV` measures the
project at git revision REV (exported to a temporary directory) in a second process, the two
interleaved round by round, and prints both with their ratio: the machine's load moves both.

End to end: the same scripted conversation (canned assistant turns, `max_tokens: 1`) through
`overspill serve` in front of the real llama-server (2048-token window), once with
`[overflow_recovery]` and once with `[history_splice, overflow_recovery]`; prints upstream calls,
failed calls and prompt tokens the upstream processed.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Iterator
from io import BytesIO
from pathlib import Path
from typing import Any

import orjson

ROOT = Path(__file__).resolve().parents[1]
CASES = ("unknown", "known", "recovery")
SIZES = (20, 200, 2000)
CONFIG = """
model_list:
  - model_name: local
    litellm_params: {model: openai/smollm2, api_base: "http://upstream.test/v1"}
"""


def conversation(size: int) -> list[dict[str, Any]]:
    """A system prompt and `size - 1` alternating turns of ~500 characters."""
    messages: list[dict[str, Any]] = [{"role": "system", "content": "You are helpful."}]
    for i in range(size - 1):
        role = "user" if i % 2 == 0 else "assistant"
        text = f"turn {i}: " + " ".join(f"word{(i * 7 + j) % 97}" for j in range(70))
        messages.append({"role": role, "content": text})
    return messages


class Bench:
    """One case at one size, kept across samples like a running process (its layer, its
    store, what it remembers)."""

    def __init__(self, store: Any, case: str, size: int) -> None:
        self.store, self.case, self.size = store, case, size
        self.whole = orjson.dumps(conversation(size))
        self.window: int | None = None
        self.prompt_tokens: dict[int, int] = {}
        """The upstream's prompt_tokens by messages sent (none yet: it teaches nothing)."""

    async def setup(self) -> None:
        """The cache entry, and for `known` the window that puts the turn past compact_at."""
        from kernel.conversation import chain
        from kernel.store import HistoryEntry
        from middleware.condensing.extraction import PROMPT_VERSION

        messages = orjson.loads(self.whole)
        end = self.size - 10
        await self.store.put(
            HistoryEntry(
                tenant="t",
                conversation_id=f"bench-{self.size}",
                model_id="local",
                historical_end_index=end,
                message_count=end,
                extraction="Notes:\n- " + "fact " * 100,
                chain=chain(messages, end, PROMPT_VERSION),
                prompt_version=PROMPT_VERSION,
                tokens_before=self.size * 120,
                tokens_after=110,
                created_at=time.time(),
            )
        )
        if self.case == "recovery":
            self.window = max(2048, 2048 * self.size // 20)
        self.layer = self._layer()
        sent: list[Any] = []
        for size in (self.size - 2, self.size):  # the upstream then reports what we count
            await self._turn(size, sent)
        for messages in sent:
            self.prompt_tokens[len(messages)] = self.layer.estimator.count(self._entry(), messages)
        if self.case == "known":
            await self._find_window()

    def _entry(self) -> Any:
        return self.settings.model_list[0]

    def _layer(self) -> Any:
        from kernel.config import parse_config
        from middleware.layers.history_splice import HistorySplice
        from middleware.layers.overflow_recovery import OverflowRecovery
        from tests.conftest import make_services

        self.settings = parse_config(CONFIG, "bench.yaml", {}).settings
        windows = {"local": self.window} if self.window else {}
        services = make_services(self.settings, self.store, _no_calls, windows)
        if self.case == "recovery":
            return OverflowRecovery(services)
        return HistorySplice(services)

    async def _find_window(self) -> None:
        """The largest window (3% steps down) at which the turn schedules a growth."""
        window = max(self.prompt_tokens.values()) * 3
        while window > 256:
            self.window = window
            self.layer = self._layer()
            try:
                notes = await self._turn(self.size, [])
            except AssertionError:
                break
            if notes.get("compaction") == "scheduled":
                window = int(window * 0.97)  # a little further from compact_at
                self.window = window
                self.layer = self._layer()
                notes = await self._turn(self.size, [])
                assert notes.get("compaction") == "scheduled", notes
                assert "waited" not in notes, notes
                return
            window = int(window * 0.97)
        raise SystemExit("no window puts the turn between compact_at and grow_at")

    async def sample(self) -> float:
        """CPU µs of one turn, after the previous turn of the same conversation."""
        await self._turn(self.size - 2, [])
        spent: float = await self._turn(self.size, [], timed=True)
        return spent

    async def _turn(self, size: int, sent: list[Any], timed: bool = False) -> Any:
        from kernel.types import ChatRequest, ChatResponse, RequestContext
        from providers.fake import completion

        answers = {
            length: ChatResponse(body=orjson.dumps(completion("ok", prompt_tokens=tokens)))
            for length, tokens in self.prompt_tokens.items()
        }
        silent = ChatResponse(body=orjson.dumps(completion("ok", prompt_tokens=0)))

        async def upstream(request: ChatRequest, ctx: RequestContext) -> ChatResponse:
            sent.append(request.messages)
            return answers.get(len(request.messages), silent)

        messages = orjson.loads(self.whole)[:size]  # parsed afresh, as every request is
        request = ChatRequest(
            "local", tuple(messages), False, {"model": "local", "messages": messages}
        )
        ctx = RequestContext("r", "t", model=self._entry(), conversation_hint=f"bench-{self.size}")
        start = time.process_time()
        if self.case == "recovery":
            self._recovery_plan(request, ctx)
        else:
            await self.layer.handle(request, ctx, upstream)
        spent = (time.process_time() - start) * 1e6
        if timed:
            if self.case != "recovery":
                assert ctx.notes["action"] == "spliced", ctx.notes
            return spent
        return ctx.notes

    def _recovery_plan(self, request: Any, ctx: Any) -> None:
        """overflow_recovery's planning, as the project at hand does it."""
        from middleware.layers.hysteresis import tail_share

        condenser, entry = self.layer.condenser, self._entry()
        if hasattr(condenser, "counts"):
            counts = condenser.counts(ctx, request, entry)
        else:
            counts = condenser.estimator.counts(entry, request.messages)
        plan = condenser.plan(request, entry, window=self.window, scale=1.0, counts=counts)
        share = tail_share(entry, plan, None)
        condenser.plan(
            request, entry, window=self.window, scale=1.0, counts=counts, intact_share=share
        )


def _no_calls(name: str) -> Any:
    """Splice decisions make no model calls."""
    raise AssertionError(f"unexpected internal call to {name}")


async def serve_worker(redis_url: str | None) -> None:
    """Answer `case size repeats` lines with the median CPU µs, one JSON line each."""
    with tempfile.TemporaryDirectory() as tmp:
        from kernel.store import DiskHistoryStore, HistoryStore

        store: HistoryStore = DiskHistoryStore(tmp)
        if redis_url:
            from kernel.store_redis import RedisHistoryStore

            store = RedisHistoryStore(redis_url)
        benches: dict[tuple[str, int], Bench] = {}
        for line in sys.stdin:
            case, size, repeats = line.split()
            key = (case, int(size))
            if key not in benches:
                benches[key] = Bench(store, case, int(size))
                await benches[key].setup()
            samples = [await benches[key].sample() for _ in range(int(repeats))]
            print(json.dumps({"us": statistics.median(samples)}), flush=True)
        await store.aclose()


class Worker:
    """A measuring process over the project tree at `root`."""

    def __init__(self, root: Path, redis_url: str | None) -> None:
        self.root = root
        command = [sys.executable, str(Path(__file__).resolve()), "--worker", str(root)]
        if redis_url:
            command += ["--redis", redis_url]
        env = {**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
        self.process = subprocess.Popen(
            command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env
        )

    def measure(self, case: str, size: int, repeats: int) -> float:
        assert self.process.stdin is not None
        assert self.process.stdout is not None
        self.process.stdin.write(f"{case} {size} {repeats}\n")
        self.process.stdin.flush()
        line = self.process.stdout.readline()
        if not line:
            raise SystemExit(f"the worker over {self.root} failed")
        return float(json.loads(line)["us"])

    def close(self) -> None:
        assert self.process.stdin is not None
        self.process.stdin.close()
        self.process.wait(timeout=60)


@contextlib.contextmanager
def exported(revision: str) -> Iterator[Path]:
    """The project at a git revision, in a temporary directory."""
    archive = subprocess.run(
        ["git", "-C", str(ROOT), "archive", revision], check=True, capture_output=True
    ).stdout
    with tempfile.TemporaryDirectory() as tmp:
        with tarfile.open(fileobj=BytesIO(archive)) as tar:
            tar.extractall(tmp, filter="data")
        yield Path(tmp)


def decisions(redis_url: str | None, repeats: int, rounds: int, baseline: str | None) -> None:
    """The cases' medians (median over rounds), the baseline beside them when asked."""
    with contextlib.ExitStack() as stack:
        roots = {"now": ROOT}
        if baseline:
            roots = {baseline: stack.enter_context(exported(baseline)), "now": ROOT}
        workers = {name: Worker(root, redis_url) for name, root in roots.items()}
        for worker in workers.values():
            stack.callback(worker.close)
        backend = "redis" if redis_url else "diskcache"
        print(f"CPU µs per turn ({backend}; median of {rounds} rounds x {repeats} turns; "
              f"load average {os.getloadavg()[0]:.1f})")  # fmt: skip
        head = f"{'case':>9}{'messages':>9}" + "".join(f"{name:>12}" for name in workers)
        print(head + (f"{'ratio':>8}" if baseline else ""))
        for case in CASES:
            for size in SIZES:
                results: dict[str, list[float]] = {name: [] for name in workers}
                for _ in range(rounds):  # interleaved: load changes touch both alike
                    for name, worker in workers.items():
                        results[name].append(worker.measure(case, size, repeats))
                medians = {name: statistics.median(values) for name, values in results.items()}
                row = f"{case:>9}{size:>9}" + "".join(f"{v:>12.0f}" for v in medians.values())
                if baseline:
                    row += f"{medians[baseline] / medians['now']:>7.1f}x"
                print(row, flush=True)


def end_to_end(turns: int) -> None:
    """Upstream calls and tokens for a long conversation, without and with the splice."""
    from tests.e2e.conftest import local_config, running_llama_server, serve

    with tempfile.TemporaryDirectory() as tmp, running_llama_server(Path(tmp)) as upstream_url:
        layer_sets = ("[overflow_recovery]", "[history_splice, overflow_recovery]")
        for index, layers in enumerate(layer_sets):
            workdir = Path(tmp) / f"overspill-{index}"
            workdir.mkdir()
            config = local_config(upstream_url, layers)
            with contextlib.contextmanager(serve)(config, workdir, upstream_url) as served:
                _converse(served, turns, layers)


def _converse(served: Any, turns: int, layers: str) -> None:
    client = served.client()
    messages: list[Any] = [{"role": "system", "content": "You are a helpful assistant."}]
    calls = failed = prompt_tokens = 0
    started = time.monotonic()
    for turn in range(turns):
        messages.append(
            {
                "role": "user",
                "content": f"Turn {turn}: hull, engines, radio fine. Code K-{turn:03d}.",
            }
        )
        raw = client.chat.completions.with_raw_response.create(
            model="local", messages=messages, max_tokens=1, temperature=0,
            extra_headers={"X-Conversation-Id": "bench-" + layers.strip("[]").replace(", ", "-")},
        )  # fmt: skip
        completion_ = raw.parse()
        attempts = int(raw.headers.get("x-overspill-attempts", "1"))
        calls += attempts + int(raw.headers.get("x-overspill-extraction-calls", "0"))
        failed += attempts - 1
        prompt_tokens += completion_.usage.prompt_tokens if completion_.usage else 0
        messages.append(
            {
                "role": "assistant",
                "content": f"Noted for turn {turn}: hull, engines, radio fine; code K-{turn:03d}.",
            }
        )
    print(
        f"{layers:<38} turns={turns} upstream calls={calls} failed (overflow) calls={failed} "
        f"prompt tokens processed={prompt_tokens} wall={time.monotonic() - started:.0f}s"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--redis", help="measure the Redis backend at this URL (not diskcache)")
    parser.add_argument("--repeats", type=int, default=10, help="turns per round")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--baseline", metavar="REV", help="also measure git revision REV")
    parser.add_argument("--worker", metavar="ROOT", help=argparse.SUPPRESS)
    parser.add_argument("--e2e", action="store_true", help="run the real-model comparison")
    parser.add_argument("--turns", type=int, default=100)
    args = parser.parse_args()
    if args.worker:
        sys.path.insert(0, args.worker)
        import kernel

        assert Path(kernel.__file__).is_relative_to(args.worker), kernel.__file__
        asyncio.run(serve_worker(args.redis))
        return
    sys.path.insert(0, str(ROOT))
    decisions(args.redis, args.repeats, args.rounds, args.baseline)
    if args.e2e:
        end_to_end(args.turns)


if __name__ == "__main__":
    main()
