"""How `overspill serve --workers N` scales: requests/s at saturation, CPU per request and p50
for N = 1, 2, 4 (configurable), with ratios to the first N, all measured in one run.

A fast mock upstream (the gateway bench's compiled Go mock when it is built, else its Python
mock) answers every request; wrk drives overspill at a fixed concurrency (closed loop,
keep-alive) for each scenario: `json` (a small non-streaming request, ~2 KB, 10 messages) and
`sse` (the same with `"stream": true`: 20 chunks). CPU per request is the user+system time of
overspill's whole process tree (supervisor and workers) over the run, divided by the requests;
p50 is wrk's, under that saturating load. Rounds interleave the worker counts (round 1: N=1,
2, 4; round 2: ...); the table shows the median over rounds.

    .venv/bin/python scripts/bench_workers.py                   # N = 1,2,4; c64; 10 s; 2 rounds
    .venv/bin/python scripts/bench_workers.py --quick           # 5 s, 1 round: a smoke run

On a 2-core machine, the load generator, the mock and overspill share the cores (nothing is
pinned), and 4 workers oversubscribe them. On a bigger box, pin them apart, e.g. with 8 cores:

    .venv/bin/python scripts/bench_workers.py --gen-cpus 0-3 --proxy-cpus 4-7 \\
        --workers 1,2,4 --wrk-threads 4 --conc 256

Needs `wrk` on PATH (apt-get install wrk).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import orjson
import psutil

ROOT = Path(__file__).resolve().parents[1]
MASTER_KEY = "sk-bench-workers"
GO_MOCK = os.environ.get("GWBENCH_MOCK_BIN", "/tmp/gwbench-mock-upstream")
BENCH_DIR = Path(os.environ.get("BENCH_DIR", ROOT.parent / "shared" / "bench"))
SCENARIOS = ("json", "sse")

WRK_SCRIPT = """
local f = assert(io.open(os.getenv("WORKERS_BODY"), "rb"))
wrk.method = "POST"
wrk.body = f:read("*a")
f:close()
wrk.headers["Content-Type"] = "application/json"
wrk.headers["Authorization"] = "Bearer " .. os.getenv("WORKERS_KEY")

function done(summary, latency, requests)
  local e = summary.errors
  io.write(string.format("RESULT %d %d %d %d\\n", summary.requests, summary.duration,
    e.connect + e.read + e.write + e.status + e.timeout, latency:percentile(50)))
end
"""


@dataclass(frozen=True)
class Measured:
    """One wrk run against one worker count and scenario."""

    workers: int
    scenario: str
    rps: float
    cpu_ms_per_request: float
    p50_ms: float
    cpu_percent: float  # of one core, the whole process tree
    errors: int


def free_port() -> int:
    """A loopback port nobody listens on right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def pinned(cpus: str | None, argv: Sequence[str]) -> list[str]:
    """`argv` under `taskset -c cpus` when pinning was asked for."""
    return ["taskset", "-c", cpus, *argv] if cpus else list(argv)


def body(stream: bool) -> bytes:
    """A small chat request: a system prompt and nine turns, ~2 KB."""
    messages = [{"role": "system", "content": "You are a concise assistant for a ship's crew."}]
    for turn in range(9):
        role = "user" if turn % 2 == 0 else "assistant"
        text = f"Turn {turn}: the log of the day says the hull, engines and radio were checked. "
        messages.append({"role": role, "content": text * 3})
    request: dict[str, object] = {"model": "mock-model", "messages": messages, "max_tokens": 64}
    if stream:
        request["stream"] = True
    return orjson.dumps(request)


def post(url: str, data: bytes, timeout: float = 5.0) -> int:
    """POST a chat request; its status (0 when the server cannot be reached)."""
    request = urllib.request.Request(
        url, data=data, method="POST",
        headers={"content-type": "application/json", "authorization": f"Bearer {MASTER_KEY}"},
    )  # fmt: skip
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            response.read()
            return int(response.status)
    except urllib.error.HTTPError as exc:
        return exc.code
    except OSError:
        return 0


@contextlib.contextmanager
def mock_upstream(cpus: str | None, workdir: Path) -> Iterator[str]:
    """The fast mock upstream; yields its /v1 URL."""
    port = free_port()
    if os.access(GO_MOCK, os.X_OK):
        argv = [GO_MOCK, "-addr", f"127.0.0.1:{port}", "-chunks", "20"]
    else:
        script = BENCH_DIR / "mock_upstream.py"
        if not script.exists():
            raise SystemExit(f"no mock upstream: build {GO_MOCK} or set BENCH_DIR ({script})")
        print(f"(no {GO_MOCK}: the Python mock, slower per core)", file=sys.stderr)
        argv = [sys.executable, str(script), "--port", str(port), "--chunks", "20"]
    log = (workdir / "mock.log").open("wb")
    process = subprocess.Popen(pinned(cpus, argv), stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}/v1"
    try:
        deadline = time.monotonic() + 30
        while post(url + "/chat/completions", body(False)) != 200:
            if process.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"the mock upstream did not start: {argv}")
            time.sleep(0.1)
        yield url
    finally:
        process.terminate()
        process.wait(timeout=10)
        log.close()


def config(upstream: str, store: Path) -> str:
    """Every layer configured with nothing to do: the plain passthrough cost."""
    return f"""
model_list:
  - model_name: mock-model
    litellm_params:
      model: openai/mock-model
      api_base: {upstream}
      api_key: sk-mock
      timeout: 60
general_settings:
  master_key: {MASTER_KEY}
  store: {{path: {store}}}
middleware: [documents, history_splice, overflow_recovery, ollama_window]
"""


def _ready_lines(log: Path) -> int:
    return sum(
        b'"msg":"ready"' in line for line in log.read_bytes().splitlines() if line[:1] == b"{"
    )


@contextlib.contextmanager
def overspill(
    workers: int, config_path: Path, cpus: str | None, workdir: Path
) -> Iterator[tuple[str, psutil.Process]]:
    """`overspill serve --workers N` until every worker is ready; yields its URL and process."""
    port = free_port()
    log_path = workdir / f"overspill-{workers}.log"
    log = log_path.open("wb")
    argv = [sys.executable, "-m", "proxy", "serve", "--config", str(config_path),
            "--host", "127.0.0.1", "--port", str(port), "--workers", str(workers)]  # fmt: skip
    env = {**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    process = subprocess.Popen(
        pinned(cpus, argv), stdout=log, stderr=subprocess.STDOUT, env=env, cwd=ROOT
    )
    url = f"http://127.0.0.1:{port}/v1/chat/completions"
    try:
        deadline = time.monotonic() + 120
        while _ready_lines(log_path) < workers or post(url, body(False)) != 200:
            if process.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"overspill --workers {workers} did not start:\n"
                                 f"{log_path.read_text()[-3000:]}")  # fmt: skip
            time.sleep(0.2)
        yield url, psutil.Process(process.pid)
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        log.close()


def tree_cpu_seconds(root: psutil.Process) -> float:
    """user+system seconds of a process and its children (those alive now)."""
    total = 0.0
    for process in [root, *root.children(recursive=True)]:
        with contextlib.suppress(psutil.NoSuchProcess):
            times = process.cpu_times()
            total += times.user + times.system
    return total


def wrk(
    url: str, body_file: Path, script: Path, args: argparse.Namespace, seconds: int
) -> tuple[int, float, int, float]:
    """One wrk run: requests, seconds, errors, p50 ms."""
    argv = ["wrk", f"-t{args.wrk_threads}", f"-c{args.conc}", f"-d{seconds}s", "--timeout", "30s",
            "-s", str(script), url]  # fmt: skip
    env = {**os.environ, "WORKERS_BODY": str(body_file), "WORKERS_KEY": MASTER_KEY}
    out = subprocess.run(
        pinned(args.gen_cpus, argv), env=env, capture_output=True, text=True, check=True
    ).stdout
    line = next(line for line in out.splitlines() if line.startswith("RESULT "))
    requests, duration_us, errors, p50_us = (int(part) for part in line.split()[1:])
    return requests, duration_us / 1e6, errors, p50_us / 1000


def measure(
    url: str, process: psutil.Process, workers: int, scenario: str,
    body_file: Path, script: Path, args: argparse.Namespace,
) -> Measured:  # fmt: skip
    """Warm up, then one measured wrk run, with the process tree's CPU time around it."""
    wrk(url, body_file, script, args, args.warmup)
    before = tree_cpu_seconds(process)
    requests, seconds, errors, p50_ms = wrk(url, body_file, script, args, args.duration)
    cpu = tree_cpu_seconds(process) - before
    return Measured(
        workers, scenario, requests / seconds, 1000 * cpu / max(requests, 1), p50_ms,
        100 * cpu / seconds, errors,
    )  # fmt: skip


def report(results: list[Measured], counts: list[int], args: argparse.Namespace) -> None:
    """The median over rounds for each (scenario, N), with ratios to the first N."""
    print(
        f"\n{os.cpu_count()} CPUs; c{args.conc}, {args.duration} s per run, {args.rounds} "
        f"round(s) interleaved; proxy CPUs {args.proxy_cpus or 'any'}, "
        f"load generator + mock CPUs {args.gen_cpus or 'any'}\n"
    )
    ratio = f"x N={counts[0]}"
    print(f"| scenario | workers | req/s | {ratio} | CPU ms/req | {ratio} | p50 ms | {ratio} "
          "| CPU % (one core = 100) | errors |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|---|---|")
    for scenario in args.scenarios:
        base: tuple[float, float, float] | None = None
        for count in counts:
            runs = [r for r in results if r.scenario == scenario and r.workers == count]
            rps = statistics.median(r.rps for r in runs)
            cpu = statistics.median(r.cpu_ms_per_request for r in runs)
            p50 = statistics.median(r.p50_ms for r in runs)
            busy = statistics.median(r.cpu_percent for r in runs)
            errors = sum(r.errors for r in runs)
            base = base or (rps, cpu, p50)
            print(f"| {scenario} small c{args.conc} | {count} | {rps:,.0f} | {rps / base[0]:.2f} "
                  f"| {cpu:.3f} | {cpu / base[1]:.2f} | {p50:.1f} | {p50 / base[2]:.2f} "
                  f"| {busy:.0f} | {errors} |")  # fmt: skip


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", default="1,2,4", help="worker counts, comma-separated")
    parser.add_argument("--scenarios", default="json,sse", help="json, sse (small bodies)")
    parser.add_argument("--conc", type=int, default=64, help="wrk connections")
    parser.add_argument("--duration", type=int, default=10, help="seconds per measured run")
    parser.add_argument("--warmup", type=int, default=2, help="seconds of load before each run")
    parser.add_argument("--rounds", type=int, default=2, help="interleaved rounds; median shown")
    parser.add_argument("--wrk-threads", type=int, default=1)
    parser.add_argument("--proxy-cpus", help="taskset CPU list for overspill (default: any)")
    parser.add_argument("--gen-cpus", help="taskset CPU list for wrk and the mock (default: any)")
    parser.add_argument("--quick", action="store_true", help="5 s runs, 1 round")
    args = parser.parse_args(argv)
    if args.quick:
        args.duration, args.rounds, args.warmup = 5, 1, 1
    args.scenarios = [s for s in args.scenarios.split(",") if s]
    if unknown := set(args.scenarios) - set(SCENARIOS):
        parser.error(f"unknown scenarios {sorted(unknown)}: use {', '.join(SCENARIOS)}")
    counts = [int(n) for n in args.workers.split(",") if n]
    if shutil.which("wrk") is None:
        raise SystemExit("wrk is not on PATH: apt-get install wrk")
    results: list[Measured] = []
    with tempfile.TemporaryDirectory(prefix="bench-workers-") as tmp:
        workdir = Path(tmp)
        script = workdir / "post.lua"
        script.write_text(WRK_SCRIPT)
        bodies = {}
        for scenario in args.scenarios:
            bodies[scenario] = workdir / f"{scenario}.json"
            bodies[scenario].write_bytes(body(scenario == "sse"))
        with mock_upstream(args.gen_cpus, workdir) as upstream:
            config_path = workdir / "config.yaml"
            config_path.write_text(config(upstream, workdir / "store"))
            for round_number in range(args.rounds):
                for count in counts:
                    with overspill(count, config_path, args.proxy_cpus, workdir) as (url, proc):
                        for scenario in args.scenarios:
                            result = measure(url, proc, count, scenario, bodies[scenario],
                                             script, args)  # fmt: skip
                            results.append(result)
                            print(f"round {round_number + 1} workers {count} {scenario}: "
                                  f"{result.rps:,.0f} req/s, {result.cpu_ms_per_request:.3f} "
                                  f"CPU ms/req, p50 {result.p50_ms:.1f} ms, "
                                  f"errors {result.errors}", file=sys.stderr)  # fmt: skip
    report(results, counts, args)


if __name__ == "__main__":
    main()
