"""Print overspill's cost as ratios to the minimal passthrough and the LiteLLM proxy.

Reads a gateway-bench results.json (default var/bench/results.json): CPU ms per request under
saturating load, and p50 latency at a fixed moderate rate, both from the same run.
"""

from __future__ import annotations

import json
import statistics
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any


def _median_by(
    rows: list[dict[str, Any]], key: tuple[str, ...], value: str
) -> dict[tuple[Any, ...], float]:
    groups: dict[tuple[Any, ...], list[float]] = defaultdict(list)
    for row in rows:
        if row.get(value) is not None:
            groups[tuple(row[k] for k in key)].append(float(row[value]))
    return {k: statistics.median(v) for k, v in groups.items()}


def cpu_ms_per_request(results: dict[str, Any]) -> dict[tuple[Any, ...], float]:
    """Proxy CPU milliseconds per request, by (target, mode, body, concurrency)."""
    rows = [
        {**row, "cpu_ms": 1000 * row["proxy_cpu_s"] / row["requests"]}
        for row in results["throughput"]
        if row.get("requests")
    ]
    return _median_by(rows, ("target", "mode", "body", "conc"), "cpu_ms")


REFERENCES = ("passthrough", "passthrough-aiohttp", "litellm")
"""The targets a figure of ours is divided by, when the run has them."""


def _ratio(value: float, base: float | None) -> str:
    return f"{value / base if base else float('nan'):>22.3f}"


def main(path: str = "var/bench/results.json", ours: str = "overspill") -> int:
    """Print the table; exit 1 when the file lacks our target."""
    results = json.loads(Path(path).read_text())
    cpu = cpu_ms_per_request(results)
    p50 = _median_by(results["latency"], ("target", "mode", "body"), "p50_ms")
    if not any(key[0] == ours for key in cpu):
        print(f"{path}: no target named {ours!r}", file=sys.stderr)
        return 1
    references = [r for r in REFERENCES if any(key[0] == r for key in cpu)]
    head = "".join(f"{'x ' + r:>22}" for r in references)
    print(f"{'scenario':<18}{'cpu ms/req':>11}{head}")
    for (target, mode, body, conc), value in sorted(cpu.items()):
        if target == ours:
            ratios = [_ratio(value, cpu.get((r, mode, body, conc))) for r in references]
            print(f"{mode} {body} c{conc:<8}{value:>11.3f}" + "".join(ratios))
    print(f"\n{'scenario':<18}{'p50 ms':>11}{head}")
    for (target, mode, body), value in sorted(p50.items()):
        if target == ours:
            ratios = [_ratio(value, p50.get((r, mode, body))) for r in references]
            print(f"{mode} {body:<13}{value:>11.2f}" + "".join(ratios))
    rss = {t["name"]: (t.get("idle_rss_mb"), t.get("final_rss_mb")) for t in results["targets"]}
    print("\nRSS MB (idle, after the run):", {name: rss[name] for name in sorted(rss)})
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
