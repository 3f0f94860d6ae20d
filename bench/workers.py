"""How `overspill serve --workers N` scales: requests/s at saturation, CPU per request and p50
for N = 1, 2, 4, with ratios to the first N, all measured in one run.

The gateway bench's mock upstream answers every request (bench/gateway: built and cached on
first use, with wrk); wrk drives overspill at a fixed concurrency for each scenario: `json` (the
small chat body, 10 messages) and `sse` (the same streamed: 20 chunks). CPU per request is
the user+system time of overspill's whole process tree (supervisor and workers) over the run,
divided by the requests; p50 is wrk's, under that saturating load. Rounds interleave the worker
counts; the table shows the median over rounds.

    .venv/bin/python -m bench.workers                   # N = 1,2,4; c64; 10 s; 2 rounds
    .venv/bin/python -m bench.workers --quick           # 5 s, 1 round: a smoke run

On a 2-core machine the load generator, the mock and overspill share the cores (nothing is
pinned), and 4 workers oversubscribe them. On a bigger box, pin them apart, e.g. with 8 cores:

    .venv/bin/python -m bench.workers --gen-cpus 0-3 --proxy-cpus 4-7 --conc 256
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

from bench.gateway import bodies, load, tools, wire
from bench.gateway.processes import Monitor, Server
from tests.ports import free_port

MASTER_KEY = "sk-bench-workers"


def config(upstream: str, store: Path) -> str:
    """Every layer configured with nothing to do: the plain passthrough cost."""
    return f"""
model_list:
  - model_name: mock-model
    litellm_params: {{model: openai/mock-model, api_base: "{upstream}/v1", api_key: sk-mock}}
general_settings: {{master_key: {MASTER_KEY}, store: {{path: "{store}"}}}}
middleware: [documents, history_splice, overflow_recovery, ollama_window]
"""


def measure(args: argparse.Namespace, folder: Path) -> list[dict[str, Any]]:
    headers = {"Content-Type": "application/json", "Authorization": "Bearer " + MASTER_KEY}
    auth = headers["Authorization"]
    files = {}
    for mode in args.scenarios:
        files[mode] = folder / f"{mode}.json"
        files[mode].write_bytes(bodies.body("chat", "small", "mock-model", mode == "sse"))
    (folder / "routes.json").write_bytes(wire.manifest())
    port = free_port()
    mock = [
        str(tools.mock_binary()),
        "-addr",
        f"127.0.0.1:{port}",
        "-routes",
        str(folder / "routes.json"),
    ]
    upstream = Server("mock", mock, args.gen_cpus, dict(os.environ), folder)
    root = f"http://127.0.0.1:{port}"
    upstream.wait_ready(
        root + "/v1/chat/completions", files[args.scenarios[0]].read_bytes(), headers, 30
    )
    (folder / "config.yaml").write_text(config(root, folder / "store"))
    rows: list[dict[str, Any]] = []
    try:
        for round_number in range(args.rounds):
            for count in args.workers:
                port = free_port()
                argv = [sys.executable, "-m", "proxy", "serve",
                        "--config", folder / "config.yaml", "--host", "127.0.0.1",
                        "--port", port, "--workers", count]  # fmt: skip
                env = {**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
                server = Server(
                    f"overspill-{count}",
                    [str(a) for a in argv],
                    args.proxy_cpus,
                    env,
                    folder,
                    tools.ROOT,
                )
                url = f"http://127.0.0.1:{port}/v1/chat/completions"
                try:
                    server.wait_ready(url, files[args.scenarios[0]].read_bytes(), headers, 120)
                    for _ in range(count * 5):  # every worker answers at least once
                        server.wait_ready(url, files[args.scenarios[0]].read_bytes(), headers, 30)
                    for mode in args.scenarios:
                        load.wrk(url, files[mode], args.conc, args.warmup, auth, args.gen_cpus)
                        with Monitor({"proxy": server.process}) as monitor:
                            row = load.wrk(
                                url, files[mode], args.conc, args.duration, auth, args.gen_cpus
                            )
                        row.update(monitor.result, workers=count, scenario=mode)
                        rows.append(row)
                        tools.log(
                            f"round {round_number + 1} workers {count} {mode}: {row['rps']:,.0f} "
                            f"req/s, {1000 * row['proxy_cpu_s'] / max(row['requests'], 1):.3f} "
                            f"CPU ms/req, p50 {row['p50_us'] / 1000:.1f} ms, errors {row['errors']}"
                        )
                finally:
                    server.stop()
    finally:
        upstream.stop()
    return rows


def report(rows: list[dict[str, Any]], args: argparse.Namespace) -> str:
    """The median over rounds for each (scenario, N), with ratios to the first N."""
    first = f"x N={args.workers[0]}"
    lines = [
        f"c{args.conc}, {args.duration} s per run, {args.rounds} round(s) interleaved; proxy "
        f"CPUs {args.proxy_cpus or 'any'}, load generator and mock CPUs "
        f"{args.gen_cpus or 'any'}\n",
        f"| scenario | workers | req/s | {first} | CPU ms/req | {first} | p50 ms | {first} "
        "| errors |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for mode in args.scenarios:
        base: tuple[float, float, float] | None = None
        for count in args.workers:
            runs = [r for r in rows if r["scenario"] == mode and r["workers"] == count]
            rps = statistics.median(r["rps"] for r in runs)
            cpu = statistics.median(1000 * r["proxy_cpu_s"] / max(r["requests"], 1) for r in runs)
            p50 = statistics.median(r["p50_us"] / 1000 for r in runs)
            base = base or (rps, cpu, p50)
            lines.append(
                f"| {mode} small c{args.conc} | {count} | {rps:,.0f} | {rps / base[0]:.2f} | "
                f"{cpu:.3f} | {cpu / base[1]:.2f} | {p50:.1f} | {p50 / base[2]:.2f} | "
                f"{sum(r['errors'] for r in runs)} |"
            )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument(
        "--workers", type=lambda t: [int(n) for n in t.split(",")], default=[1, 2, 4]
    )
    parser.add_argument("--scenarios", type=lambda t: t.split(","), default=["json", "sse"])
    parser.add_argument("--conc", type=int, default=64, help="wrk connections")
    parser.add_argument("--duration", type=int, default=10, help="seconds per measured run")
    parser.add_argument("--warmup", type=int, default=2, help="seconds of load before each run")
    parser.add_argument("--rounds", type=int, default=2, help="interleaved rounds; median shown")
    parser.add_argument(
        "--proxy-cpus", default="", help="taskset CPU list for overspill (default: any)"
    )
    parser.add_argument(
        "--gen-cpus", default="", help="taskset CPU list for wrk and the mock (default: any)"
    )
    parser.add_argument("--quick", action="store_true", help="5 s runs, 1 round")
    args = parser.parse_args()
    if args.quick:
        args.duration, args.rounds, args.warmup = 5, 1, 1
    tools.ensure_commands()
    with tempfile.TemporaryDirectory(prefix="bench-workers-") as folder:
        rows = measure(args, Path(folder))
    print(report(rows, args))


if __name__ == "__main__":
    main()
