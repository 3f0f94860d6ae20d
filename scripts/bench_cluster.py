"""How overspill scales out on a shared Redis Cluster: 1, 2 and 4 `overspill serve` processes
(configurable) in front of a scripted upstream, sharing one 3-primary, 3-replica cluster, under
long conversations that splice and grow. Prints requests/s, p99 and store operations per
request for each count, and each as a ratio to the first count, all measured in one run.

    .venv/bin/python scripts/bench_cluster.py                  # 1,2,4 processes; 20 s each
    .venv/bin/python scripts/bench_cluster.py --quick          # 8 s each: a smoke run
    .venv/bin/python scripts/bench_cluster.py --processes 1,2,4,8 --seconds 60 --rounds 3

The load: `--conversations` clients, each a closed loop that sends one conversation's turns
(system prompt, then user turns carrying facts and the scripted assistant replies; the whole
history resent every turn, as a chat client does) to the processes in turn, and starts a new
conversation after `--turns` turns. The window is 2048 tokens, so past turn ~15 each request is
spliced from the stored extraction and the extraction grows in the background every few turns
(a model of the same upstream, whose window holds the whole history, extracts in one call
after `--extraction-ms`). Each count runs on fresh keys (a new key prefix) after `--warmup`
seconds of the same load; requests/s counts the requests completed in the measured window,
p99 is their latency, and store operations per request is the growth of every process's
`overspill_store_operations_total` (all ops) over the window divided by those requests.

Everything runs on this machine (nothing is pinned): the client, the upstream, the cluster's
six redis-servers and the overspill processes share its cores, so on a 2-core box more
processes mostly share the same CPU. The ratios say what a process more costs or buys here;
on hosts of their own, run the processes there and compare the same ratios.

Needs Debian's redis-server and redis-cli (`make redis`).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import secrets
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path


def _root() -> Path:
    """The repository (found upward from this file, wherever the bench lives)."""
    for parent in Path(__file__).resolve().parents:
        if (parent / "pyproject.toml").is_file() and (parent / "kernel").is_dir():
            return parent
    raise SystemExit("run this from a checkout of overspill")


ROOT = _root()
sys.path.insert(0, str(ROOT))

import aiohttp  # noqa: E402

from tests.e2e.conftest import MASTER_KEY, start_overspill, stop  # noqa: E402
from tests.redis_ha import cluster  # noqa: E402
from tests.scripted_chats import history, model_list  # noqa: E402


@dataclass(frozen=True)
class Result:
    """One count's figures."""

    processes: int
    requests: int
    seconds: float
    p50_ms: float
    p99_ms: float
    store_ops: float
    failed: int

    @property
    def rps(self) -> float:
        """Requests completed per second."""
        return self.requests / self.seconds

    @property
    def ops_per_request(self) -> float:
        """Store operations per request."""
        return self.store_ops / max(1, self.requests)


def config(upstream: str, url: str, prefix: str) -> str:
    """A process's config: the scripted model (window 2048), its extractor, the cluster."""
    return f"""{model_list(upstream)}general_settings:
  master_key: {MASTER_KEY}
  keep_alive_timeout: 600
  log_levels: {{overspill.request: warning}}
  store: {{backend: redis, url: "{url}", key_prefix: "{prefix}"}}
"""


@contextlib.contextmanager
def scripted_upstream(extraction_ms: float, workdir: Path) -> Iterator[str]:
    """tests/scripted_chats.py in a process of its own: its /v1 URL."""
    log = workdir / "upstream.log"
    with log.open("wb") as sink:
        process = subprocess.Popen(
            [sys.executable, "-m", "tests.scripted_chats", "--port", "0",
             "--extraction-seconds", str(extraction_ms / 1000)],
            stdout=subprocess.PIPE, stderr=sink, cwd=ROOT,
        )  # fmt: skip
    assert process.stdout is not None
    try:
        line = process.stdout.readline().decode()
        if not line.startswith("listening"):
            raise SystemExit(f"the scripted upstream did not start: {log.read_text()}")
        yield f"http://127.0.0.1:{line.split()[1]}/v1"
    finally:
        process.terminate()
        process.wait(timeout=10)
        process.stdout.close()


async def store_operations(session: aiohttp.ClientSession, urls: list[str]) -> float:
    """The sum of overspill_store_operations_total over every process."""
    total = 0.0
    for url in urls:
        async with session.get(f"{url}/metrics") as response:
            text = await response.text()
        for line in text.splitlines():
            if line.startswith("overspill_store_operations_total{"):
                total += float(line.rsplit(" ", 1)[1])
    return total


async def drive(urls: list[str], args: argparse.Namespace) -> Result:
    """Run the load on `urls` for warmup + seconds; the measured window's figures."""
    latencies: list[float] = []
    failed = 0
    state = {"measuring": False, "stop": False}
    run = secrets.token_hex(3)

    async def client(session: aiohttp.ClientSession, number: int) -> None:
        nonlocal failed
        conversation, turn, sent = f"{run}-{number}-0", 0, number
        while not state["stop"]:
            url = urls[sent % len(urls)]
            sent += 1
            body = {"model": "local", "messages": history(conversation, turn), "max_tokens": 16}
            headers = {"authorization": f"Bearer {MASTER_KEY}", "x-conversation-id": conversation}
            started = time.perf_counter()
            try:
                async with session.post(
                    f"{url}/v1/chat/completions", json=body, headers=headers
                ) as response:
                    await response.read()
                    ok = response.status == 200
            except aiohttp.ClientConnectionError:
                ok = False  # (counted as failed: overspill closed or reset the connection)
            if state["measuring"]:
                latencies.append(time.perf_counter() - started)
                failed += not ok
            turn += 1
            if turn == args.turns:
                conversation, turn = f"{run}-{number}-{sent}", 0

    connector = aiohttp.TCPConnector(limit=0)
    timeout = aiohttp.ClientTimeout(total=300)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
        tasks = [asyncio.create_task(client(session, n)) for n in range(args.conversations)]
        await asyncio.sleep(args.warmup)
        before = await store_operations(session, urls)
        state["measuring"], started = True, time.perf_counter()
        await asyncio.sleep(args.seconds)
        state["measuring"], seconds = False, time.perf_counter() - started
        after = await store_operations(session, urls)
        state["stop"] = True
        await asyncio.gather(*tasks)
    ordered = sorted(latencies)
    return Result(
        len(urls), len(ordered), seconds, 1000 * statistics.median(ordered),
        1000 * ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))], after - before, failed,
    )  # fmt: skip


def measure(count: int, upstream: str, url: str, args: argparse.Namespace, work: Path) -> Result:
    """Start `count` overspill processes on fresh keys, drive them, stop them."""
    prefix = f"bench-{secrets.token_hex(3)}:"
    started = []
    try:
        for index in range(count):
            home = work / f"n{count}-{prefix.strip(':')}-{index}"
            home.mkdir()
            started.append(start_overspill(config(upstream, url, prefix), home))
        return asyncio.run(drive([served for _, served, _ in started], args))
    finally:
        for process, _, _ in started:
            stop(process)


def report(results: list[Result]) -> None:
    """The table: each count's figures and their ratios to the first count."""
    base = results[0]
    print(f"\n{'processes':>9}  {'req/s':>7}  {'p50 ms':>7}  {'p99 ms':>7}  {'store ops/req':>13}"
          f"  {'failed':>6}   ratio: {'req/s':>6}  {'p99':>5}  {'ops/req':>7}")  # fmt: skip
    for r in results:
        print(
            f"{r.processes:>9}  {r.rps:>7.1f}  {r.p50_ms:>7.1f}  {r.p99_ms:>7.1f}  "
            f"{r.ops_per_request:>13.2f}  {r.failed:>6}          {r.rps / base.rps:>6.2f}  "
            f"{r.p99_ms / base.p99_ms:>5.2f}  {r.ops_per_request / base.ops_per_request:>7.2f}"
        )


def median_of(runs: list[Result]) -> Result:
    """The run of median requests/s among rounds of one count."""
    return sorted(runs, key=lambda r: r.rps)[len(runs) // 2]


def main() -> int:
    """Run the bench; prints the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--processes", default="1,2,4", help="overspill process counts")
    parser.add_argument("--seconds", type=float, default=20.0, help="measured window per count")
    parser.add_argument("--warmup", type=float, default=5.0, help="load before measuring")
    parser.add_argument("--conversations", type=int, default=16, help="concurrent clients")
    parser.add_argument("--turns", type=int, default=60, help="turns before a new conversation")
    parser.add_argument("--extraction-ms", type=float, default=50.0)
    parser.add_argument("--rounds", type=int, default=1, help="interleaved rounds; median")
    parser.add_argument("--quick", action="store_true", help="8 s per count, 3 s warm-up")
    args = parser.parse_args()
    if args.quick:
        args.seconds, args.warmup = 8.0, 3.0
    counts = [int(n) for n in args.processes.split(",")]
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    runs: dict[int, list[Result]] = {count: [] for count in counts}
    with tempfile.TemporaryDirectory(prefix="bench-cluster-") as tmp:
        work = Path(tmp)
        (work / "cluster").mkdir()
        with (
            cluster(work / "cluster", node_timeout_ms=5000) as found,
            scripted_upstream(args.extraction_ms, work) as upstream,
        ):
            print(f"cluster {found.url}; upstream {upstream}; cores {os.cpu_count()}")
            for round_number in range(args.rounds):
                for count in counts:
                    result = measure(count, upstream, found.url, args, work)
                    runs[count].append(result)
                    print(
                        f"round {round_number + 1}, {count} process(es): {result.rps:.1f} "
                        f"req/s, p99 {result.p99_ms:.1f} ms, {result.ops_per_request:.2f} store "
                        f"ops/req, {result.failed} failed",
                        flush=True,
                    )
    report([median_of(runs[count]) for count in counts])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
