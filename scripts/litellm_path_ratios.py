"""Print each overspill target's cost on the litellm path as a ratio to the LiteLLM proxy's.

Reads the results.json of `scripts/bench_litellm_path.sh` (default
var/bench-litellm/results.json): CPU ms per request under saturating load and p50 latency at a
fixed moderate rate, every target measured in the same run against the same mock upstream.
The target `litellm` is the LiteLLM proxy serving the same `anthropic/...` model.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from bench_ratios import _median_by, cpu_ms_per_request

BASE = "litellm"


def main(path: str = "var/bench-litellm/results.json") -> int:
    """Print the tables; exit 1 when the run has no LiteLLM figures."""
    results = json.loads(Path(path).read_text())
    cpu = cpu_ms_per_request(results)
    p50 = _median_by(results["latency"], ("target", "mode", "body"), "p50_ms")
    targets = sorted({key[0] for key in cpu} - {BASE})
    if not any(key[0] == BASE for key in cpu):
        print(f"{path}: no target named {BASE!r}", file=sys.stderr)
        return 1
    print("CPU ms per request (x LiteLLM proxy, same model, same run)")
    print(f"{'scenario':<18}{'litellm':>10}" + "".join(f"{t:>24}" for t in targets))
    for target, mode, body, conc in sorted(k for k in cpu if k[0] == BASE):
        base = cpu[(target, mode, body, conc)]
        cells = ""
        for ours in targets:
            value = cpu.get((ours, mode, body, conc))
            cells += f"{'-':>24}" if value is None else f"{value:>12.3f} ({value / base:>6.3f}x)"
        print(f"{mode} {body} c{conc:<8}{base:>10.3f}{cells}")
    print("\np50 ms at a moderate rate (x LiteLLM proxy)")
    print(f"{'scenario':<18}{'litellm':>10}" + "".join(f"{t:>24}" for t in targets))
    for target, mode, body in sorted(k for k in p50 if k[0] == BASE):
        base = p50[(target, mode, body)]
        cells = ""
        for ours in targets:
            value = p50.get((ours, mode, body))
            cells += f"{'-':>24}" if value is None else f"{value:>12.2f} ({value / base:>6.3f}x)"
        print(f"{mode} {body:<13}{base:>10.2f}{cells}")
    rss = {t["name"]: (t.get("idle_rss_mb"), t.get("final_rss_mb")) for t in results["targets"]}
    print("\nRSS MB (idle, after the run):", {name: rss[name] for name in sorted(rss)})
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
