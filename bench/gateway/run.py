"""One run of the gateway bench: every target in front of the same mock, measured alike.

The load generator (wrk, hey), the mock upstream and this script run on the load CPUs (0);
each target in turn on the proxy CPUs (1). Per target: readiness (the first 200 on a real
request, reported as startup time), one request per scenario whose answer is checked
(`validation`), idle RSS, a short warm-up, then for each repeat and scenario a wrk run per
concurrency (CPU per request, requests/s, p50/p99 under saturation) and a hey run at the
scenario's moderate rate (p50/p99 without queueing). Before each run the target is let go
idle (a slow one still works through what the last run left queued). Results are written as
they come.
"""

from __future__ import annotations

import datetime
import json
import os
import platform
import secrets
import time
from pathlib import Path
from typing import Any

import psutil

from bench.gateway import bodies, load, tools, wire
from bench.gateway.processes import Monitor, Server, post, settle, tree_usage
from bench.gateway.scenarios import Scenario
from bench.gateway.targets import Setting, Target
from tests.ports import free_port


class Run:
    """The options of one run (`python -m bench.gateway --help` lists them)."""

    def __init__(self, options: Any, targets: list[Target], scenarios: list[Scenario]) -> None:
        self.options = options
        self.targets = targets
        self.scenarios = scenarios
        stamp = f"{datetime.datetime.now():%Y%m%d-%H%M%S}"
        self.out = Path(options.out or f"var/bench/{stamp}").resolve()
        self.out.mkdir(parents=True, exist_ok=True)
        key = os.environ.get("LITELLM_MASTER_KEY") or "sk-bench-" + secrets.token_hex(16)
        self.auth = "Bearer " + key
        self.headers = {"Content-Type": "application/json", "Authorization": self.auth}
        self.headers["x-api-key"] = key
        self.env = {
            **os.environ,
            "LITELLM_MASTER_KEY": key,
            "LITELLM_LOCAL_MODEL_COST_MAP": "True",
            "LITELLM_LOG": os.environ.get("LITELLM_LOG", "ERROR"),
            "NO_PROXY": "127.0.0.1,localhost",
            "no_proxy": "127.0.0.1,localhost",
            "PYTHONUNBUFFERED": "1",
        }
        self.results: dict[str, Any] = {"targets": [], "throughput": [], "latency": []}

    def body(self, scenario: Scenario) -> Path:
        return self.out / "bodies" / scenario.body_file

    def save(self) -> None:
        (self.out / "results.json").write_text(json.dumps(self.results, indent=1))

    def prepare(self, mock: Path, litellm_venv: Path | None) -> Setting:
        """The bodies, the mock's manifest, and the run's description."""
        (self.out / "bodies").mkdir(exist_ok=True)
        for scenario in self.scenarios:
            data = bodies.body(scenario.shape, scenario.size, scenario.model, scenario.stream)
            self.body(scenario).write_bytes(data)
        manifest = self.out / "mock-routes.json"
        manifest.write_bytes(wire.manifest(self.options.chunks))
        port = self.options.upstream_port or free_port()
        setting = Setting(self.out, mock, manifest, f"http://127.0.0.1:{port}", litellm_venv)
        names = [ln for ln in Path("/proc/cpuinfo").read_text().splitlines() if "model name" in ln]
        cpu = names[0].split(":", 1)[1].strip() if names else "?"
        self.results["meta"] = {
            "date": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
            "cpu_model": cpu,
            "ncpu": os.cpu_count(),
            "load_average": os.getloadavg(),
            "python": platform.python_version(),
            "litellm": tools.version_of(litellm_venv / "bin" / "python", "litellm")
            if litellm_venv
            else None,
            "gen_cpus": self.options.gen_cpus,
            "proxy_cpus": self.options.proxy_cpus,
            "repeats": self.options.repeats,
            "duration_s": self.options.duration,
            "lat_duration_s": self.options.lat_duration,
            "conc": self.options.conc,
            "chunks": self.options.chunks,
            "scenarios": [scenario.name for scenario in self.scenarios],
            "body_bytes": {s.name: self.body(s).stat().st_size for s in self.scenarios},
        }
        return setting

    def upstream(self, setting: Setting) -> Server:
        """The mock upstream on the load CPUs, ready."""
        port = setting.upstream_root.rsplit(":", 1)[1]
        argv = [str(setting.mock), "-addr", f"127.0.0.1:{port}", "-routes", str(setting.manifest)]
        server = Server("upstream-mock", argv, self.options.gen_cpus, self.env, self.out)
        probe = self.scenarios[0]
        url = setting.upstream_root + probe.route
        server.wait_ready(url, self.body(probe).read_bytes(), self.headers, 30)
        return server

    def measure(self, target: Target, setting: Setting, upstream: Server) -> None:
        """Start one target, check it, load it, stop it."""
        port = free_port()
        env = {**self.env, "UPSTREAM_ROOT": setting.upstream_root}
        argv = target.command(setting, port)
        tools.log(f"[{target.name}] on CPUs {self.options.proxy_cpus}: {' '.join(argv)}")
        server = Server(target.name, argv, self.options.proxy_cpus, env, self.out, target.cwd)
        info: dict[str, Any] = {"name": target.name}
        self.results["targets"].append(info)
        base = f"http://127.0.0.1:{port}"
        served = [scenario for scenario in self.scenarios if target.serves(scenario)]
        try:
            if not served:
                info["error"] = "serves none of the scenarios"
                return
            first = served[0]
            ready = server.wait_ready(
                base + first.route, self.body(first).read_bytes(), self.headers,
                self.options.startup_timeout,
            )  # fmt: skip
            info["startup_s"] = round(ready, 2)
            info["validation"] = {}
            for scenario in served:
                status, data = post(
                    base + scenario.route, self.body(scenario).read_bytes(), self.headers
                )
                ok = scenario.answered(status, data, self.options.chunks)
                info["validation"][scenario.name] = ok if ok else f"HTTP {status}: {data[:200]!r}"
            valid = [s for s in served if info["validation"][s.name] is True]
            time.sleep(1)
            info["idle_rss_mb"] = round(tree_usage(server.process)[1] / 2**20, 1)
            tools.log(f"[{target.name}] ready in {ready:.1f} s, idle RSS {info['idle_rss_mb']} MB")
            self._load(target, server, upstream, base, valid)
            info["final_rss_mb"] = round(tree_usage(server.process)[1] / 2**20, 1)
        except RuntimeError as error:
            tools.log(f"[{target.name}] FAILED: {error}")
            info["error"] = str(error)
        finally:
            server.stop()
            self.save()

    def _load(
        self, target: Target, server: Server, upstream: Server, base: str, scenarios: list[Scenario]
    ) -> None:
        options = self.options
        watched = {"proxy": server.process, "upstream": upstream.process}
        if options.warmup:
            for scenario in scenarios:
                url = base + scenario.route
                load.wrk(
                    url,
                    self.body(scenario),
                    options.conc[0],
                    options.warmup,
                    self.auth,
                    options.gen_cpus,
                )
        for repeat in range(options.repeats):
            for scenario in scenarios:
                url, body = base + scenario.route, self.body(scenario)
                for connections in options.conc:
                    waited = settle(server.process)
                    with Monitor(watched) as monitor:
                        row = load.wrk(
                            url, body, connections, options.duration, self.auth, options.gen_cpus
                        )
                    row.update(monitor.result)
                    row.update(
                        target=target.name, scenario=scenario.name, conc=connections, rep=repeat
                    )
                    row["settled_s"] = waited
                    self.results["throughput"].append(row)
                    cpu = (
                        f"{1000 * row['proxy_cpu_s'] / row['requests']:.3f}"
                        if row["requests"]
                        else "no request finished: no"
                    )
                    tools.log(
                        f"[{target.name}] {scenario.name} c{connections}: {row['rps']} rps, "
                        f"{cpu} CPU ms/req, p50 {row['p50_us'] / 1000:.2f} ms, "
                        f"errors {row['errors']}, cores {row['core_util_pct']}"
                    )
                if options.lat_duration > 0:
                    waited = settle(server.process)
                    with Monitor({"proxy": server.process}) as monitor:
                        row = load.hey(
                            url,
                            body,
                            scenario.rate,
                            options.lat_duration,
                            self.auth,
                            options.gen_cpus,
                        )
                    row.update(monitor.result)
                    row.update(target=target.name, scenario=scenario.name, rep=repeat)
                    row["settled_s"] = waited
                    self.results["latency"].append(row)
                    tools.log(
                        f"[{target.name}] {scenario.name} @{scenario.rate:g} rps: "
                        f"p50 {row['p50_ms']} ms, p99 {row['p99_ms']} ms, non-200 {row['non200']}"
                    )
            self.save()


def run(options: Any, targets: list[Target], scenarios: list[Scenario]) -> Path:
    """Set up, measure every target, write results.json; the output folder."""
    tools.ensure_commands()
    mock = tools.mock_binary()
    litellm_venv = tools.litellm_venv() if any(t.name == "litellm" for t in targets) else None
    bench = Run(options, targets, scenarios)
    setting = bench.prepare(mock, litellm_venv)
    os.sched_setaffinity(0, _cpus(options.gen_cpus))
    tools.log("results ->", bench.out)
    upstream = bench.upstream(setting)
    try:
        for target in targets:
            bench.measure(target, setting, upstream)
    finally:
        upstream.stop()
    bench.save()
    return bench.out


def _cpus(spec: str) -> set[int]:
    """`0`, `0-3`, `0,2`: the CPU numbers (all of them when empty)."""
    if not spec:
        return set(range(psutil.cpu_count() or 1))
    found: set[int] = set()
    for part in spec.split(","):
        low, _, high = part.partition("-")
        found.update(range(int(low), int(high or low) + 1))
    return found
