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


def main(path: str = "var/bench/results.json", ours: str = "overspill") -> int:
    """Print the table; exit 1 when the file lacks our target."""
    results = json.loads(Path(path).read_text())
    cpu = cpu_ms_per_request(results)
    p50 = _median_by(results["latency"], ("target", "mode", "body"), "p50_ms")
    if not any(key[0] == ours for key in cpu):
        print(f"{path}: no target named {ours!r}", file=sys.stderr)
        return 1
    print(f"{'scenario':<18}{'cpu ms/req':>11}{'x passthrough':>15}{'x litellm':>11}")
    for (target, mode, body, conc), value in sorted(cpu.items()):
        if target != ours:
            continue
        base = cpu.get(("passthrough", mode, body, conc))
        lite = cpu.get(("litellm", mode, body, conc))
        print(
            f"{mode} {body} c{conc:<8}{value:>11.3f}{value / base if base else float('nan'):>15.2f}"
            f"{value / lite if lite else float('nan'):>11.3f}"
        )
    print(f"\n{'scenario':<18}{'p50 ms':>11}{'x passthrough':>15}{'x litellm':>11}")
    for (target, mode, body), value in sorted(p50.items()):
        if target != ours:
            continue
        base, lite = p50.get(("passthrough", mode, body)), p50.get(("litellm", mode, body))
        print(
            f"{mode} {body:<13}{value:>11.2f}{value / base if base else float('nan'):>15.2f}"
            f"{value / lite if lite else float('nan'):>11.3f}"
        )
    rss = {t["name"]: (t.get("idle_rss_mb"), t.get("final_rss_mb")) for t in results["targets"]}
    print("\nRSS MB (idle, after the run):", {name: rss[name] for name in sorted(rss)})
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
