"""`python -m bench.gateway`: set up, run, print the summary and the ratios (see the package)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from bench.gateway import report, scenarios
from bench.gateway.run import run
from bench.gateway.targets import DEFAULT_TARGETS, ROOT, TARGETS, Target, overspill

QUICK = {"repeats": 1, "duration": 5, "lat_duration": 8, "warmup": 2}
"""`--quick`: one repeat of short runs, a smoke run of the whole bench (~7 minutes)."""


def _names(text: str) -> tuple[str, ...]:
    return tuple(part for part in text.split(",") if part)


def parser() -> argparse.ArgumentParser:
    known = ", ".join(TARGETS)
    groups = ", ".join(dict.fromkeys(s.group for s in scenarios.SCENARIOS))
    cli = argparse.ArgumentParser(prog="python -m bench.gateway", description=__doc__)
    cli.add_argument("--quick", action="store_true", help="1 repeat, 5 s runs: a smoke run")
    cli.add_argument(
        "--target",
        action="append",
        help=f"repeatable; default {', '.join(DEFAULT_TARGETS)}; known: {known}",
    )
    cli.add_argument(
        "--overspill", action="append", default=[], metavar="NAME=DIR",
        help="also measure overspill from another checkout (e.g. `git worktree add DIR REV`)",
    )  # fmt: skip
    cli.add_argument(
        "--groups", type=_names, default=scenarios.DEFAULT_GROUPS, help=f"scenario groups: {groups}"
    )
    cli.add_argument("--sizes", type=_names, default=("small", "large"))
    cli.add_argument("--modes", type=_names, default=("json", "sse"))
    cli.add_argument("--conc", type=lambda t: [int(c) for c in _names(t)], default=[16, 64])
    cli.add_argument("--repeats", type=int, default=3)
    cli.add_argument("--duration", type=int, default=10, help="seconds per wrk run")
    cli.add_argument("--lat-duration", type=int, default=20, help="seconds per hey run (0: none)")
    cli.add_argument("--warmup", type=int, default=3, help="seconds of load per scenario first")
    cli.add_argument("--chunks", type=int, default=20, help="text events in a streamed answer")
    cli.add_argument("--gen-cpus", default="0", help="CPUs of the load generator and the mock")
    cli.add_argument("--proxy-cpus", default="1", help="CPUs of the target under test")
    cli.add_argument("--upstream-port", type=int, default=0, help="the mock's port (0: a free one)")
    cli.add_argument("--startup-timeout", type=int, default=180)
    cli.add_argument("--out", default="", help="results folder (default var/bench/<time>)")
    cli.add_argument(
        "--report", metavar="RESULTS", help="print a saved run's summary, measure nothing"
    )
    return cli


def main(argv: list[str] | None = None) -> int:
    options = parser().parse_args(argv)
    if options.report:
        print(report.summary(json.loads(Path(options.report).read_text())))
        return 0
    if options.quick:
        for name, value in QUICK.items():
            setattr(options, name, value)
    targets: list[Target] = []
    for name in options.target or DEFAULT_TARGETS:
        if name not in TARGETS:
            raise SystemExit(f"unknown target {name!r}: known {', '.join(TARGETS)}")
        targets.append(TARGETS[name])
    for spec in options.overspill:
        name, _, folder = spec.partition("=")
        if not folder or not (Path(folder) / "proxy").is_dir():
            raise SystemExit(f"--overspill {spec!r}: NAME=DIR, DIR a checkout of overspill")
        targets.append(overspill(name, Path(folder).resolve()))
    picked = scenarios.pick(options.groups, options.sizes, options.modes)
    out = run(options, targets, picked)
    results = json.loads((out / "results.json").read_text())
    text = report.summary(results)
    (out / "summary.md").write_text(text)
    latest = ROOT / "var" / "bench" / "latest"
    if out.parent == latest.parent:
        latest.unlink(missing_ok=True)
        latest.symlink_to(out.name)
    print(text)
    print(f"results: {out}/results.json, summary: {out}/summary.md", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
