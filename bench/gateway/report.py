"""The tables of a run: every target's figures, and overspill's as ratios to the references.

CPU ms per request (a target's process tree, user+system, over a saturating wrk run, divided
by the requests) is the figure to read: it does not depend on how many cores there are.
Latency p50 comes from the moderate-rate run, where nothing queues. Each figure is the median
over the repeats; a ratio divides two figures of the same run.
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from typing import Any

from bench.gateway.targets import REFERENCES


def _median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def _cell(value: float | None, digits: int = 2) -> str:
    if value is None:
        return "-"
    return f"{value:,.0f}" if abs(value) >= 1000 else f"{value:.{digits}f}"


def cpu_ms(results: dict[str, Any]) -> dict[tuple[str, str, int], float]:
    """Median CPU ms per request, by (target, scenario, connections)."""
    groups: dict[tuple[str, str, int], list[float]] = defaultdict(list)
    for row in results["throughput"]:
        if row["requests"]:
            key = (row["target"], row["scenario"], row["conc"])
            groups[key].append(1000 * row["proxy_cpu_s"] / row["requests"])
    return {key: statistics.median(values) for key, values in groups.items()}


def p50_ms(results: dict[str, Any]) -> dict[tuple[str, str], float]:
    """Median p50 latency at the moderate rate, by (target, scenario)."""
    groups: dict[tuple[str, str], list[float]] = defaultdict(list)
    for row in results["latency"]:
        if row["p50_ms"] is not None:
            groups[(row["target"], row["scenario"])].append(row["p50_ms"])
    return {key: statistics.median(values) for key, values in groups.items()}


def ours(results: dict[str, Any]) -> list[str]:
    """The targets whose ratios are printed: every one that is not a reference or the mock."""
    names = [target["name"] for target in results["targets"]]
    return [name for name in names if name not in (*REFERENCES, "direct")]


def ratios(results: dict[str, Any]) -> str:
    """overspill's (and every other measured proxy's) CPU per request and p50, as ratios."""
    cpu, p50 = cpu_ms(results), p50_ms(results)
    present = {key[0] for key in cpu}
    references = [name for name in REFERENCES if name in present]
    lines: list[str] = []
    for name in ours(results):
        if name not in present:
            continue
        head = "".join(f" | x {reference}" for reference in references)
        lines += [f"\n### {name}: CPU ms per request at saturation\n"]
        lines += [f"| scenario | {name}{head} |", "|---" * (2 + len(references)) + "|"]
        for (target, scenario, conc), value in cpu.items():
            if target == name:
                cells = "".join(
                    f" | {_ratio(value, cpu.get((reference, scenario, conc)))}"
                    for reference in references
                )
                lines.append(f"| {scenario} c{conc} | {value:.3f}{cells} |")
        if any(target == name for target, _ in p50):
            lines += [f"\n### {name}: p50 ms at a moderate rate\n"]
            lines += [f"| scenario | {name}{head} |", "|---" * (2 + len(references)) + "|"]
            for (target, scenario), value in p50.items():
                if target == name:
                    cells = "".join(
                        f" | {_ratio(value, p50.get((reference, scenario)))}"
                        for reference in references
                    )
                    lines.append(f"| {scenario} | {value:.2f}{cells} |")
    return "\n".join(lines) + "\n"


def _ratio(value: float, base: float | None) -> str:
    return f"{value / base:.3f}" if base else "-"


def summary(results: dict[str, Any]) -> str:
    """The whole run as markdown: targets, throughput, latency, ratios."""
    meta = results["meta"]
    lines = [
        f"# Gateway bench, {meta['date']}\n",
        f"{meta['cpu_model']}, {meta['ncpu']} CPUs, load average {meta['load_average'][0]:.2f} "
        f"at the start; proxy on CPUs `{meta['proxy_cpus']}`, load generator and mock on "
        f"`{meta['gen_cpus']}`; LiteLLM {meta['litellm']}; {meta['repeats']} repeat(s) x "
        f"{meta['duration_s']} s (wrk), {meta['lat_duration_s']} s (hey).\n",
        "## Targets\n",
        "| target | startup s | idle RSS MB | RSS after MB | scenarios answered |",
        "|---|---|---|---|---|",
    ]
    for target in results["targets"]:
        checks = target.get("validation") or {}
        failed = [name for name, ok in checks.items() if ok is not True]
        answered = f"{len(checks) - len(failed)}/{len(checks)}"
        if failed or target.get("error"):
            answered += f" (failed: {target.get('error') or ', '.join(failed)})"
        lines.append(
            f"| {target['name']} | {_cell(target.get('startup_s'))} | "
            f"{_cell(target.get('idle_rss_mb'), 1)} | {_cell(target.get('final_rss_mb'), 1)} | "
            f"{answered} |"
        )
    lines += [
        "\n## Throughput at fixed concurrency (wrk, closed loop; medians over repeats)\n",
        "| scenario | target | RPS | CPU ms/req | p50 ms | p99 ms | errors | proxy CPU % "
        "| peak RSS MB | load core % |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    grouped: dict[tuple[str, int, str], list[dict[str, Any]]] = defaultdict(list)
    for row in results["throughput"]:
        grouped[(row["scenario"], row["conc"], row["target"])].append(row)
    gen = meta["gen_cpus"].split(",")[0].split("-")[0] or "0"
    order = {name: i for i, name in enumerate(meta["scenarios"])}
    for (scenario, conc, target), rows in sorted(
        grouped.items(), key=lambda item: (order.get(item[0][0], len(order)), item[0][1])
    ):
        cpu = _median([1000 * r["proxy_cpu_s"] / r["requests"] for r in rows if r["requests"]])
        busy = _median([100 * r["proxy_cpu_s"] / r["wall_s"] for r in rows])
        lines.append(
            f"| {scenario} c{conc} | {target} | {_cell(_median([r['rps'] for r in rows]), 1)} | "
            f"{_cell(cpu, 3)} | {_cell(_median([r['p50_us'] / 1000 for r in rows]))} | "
            f"{_cell(_median([r['p99_us'] / 1000 for r in rows]))} | "
            f"{sum(r['errors'] for r in rows)} | "
            f"{_cell(busy, 1)} | {_cell(max(r['proxy_rss_peak_mb'] for r in rows), 1)} | "
            f"{_cell(_median([r['core_util_pct'].get(gen, 0.0) for r in rows]), 1)} |"
        )
    if results["latency"]:
        lines += [
            "\n## Latency at a moderate rate (hey, 2 staggered connections; medians)\n",
            "| scenario | target | rate | achieved | p50 ms | p99 ms | first byte p50 | non-200 |",
            "|---|---|---|---|---|---|---|---|",
        ]
        by: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
        for row in results["latency"]:
            by[(row["scenario"], row["target"])].append(row)
        for (scenario, target), rows in sorted(
            by.items(), key=lambda item: order.get(item[0][0], len(order))
        ):
            p50s = [r["p50_ms"] for r in rows if r["p50_ms"] is not None]
            p99s = [r["p99_ms"] for r in rows if r["p99_ms"] is not None]
            firsts = [r["ttfb_p50_ms"] for r in rows if r["ttfb_p50_ms"] is not None]
            lines.append(
                f"| {scenario} | {target} | {rows[0]['rate']:g} | "
                f"{_cell(_median([r['achieved_rps'] for r in rows]))} | {_cell(_median(p50s))} | "
                f"{_cell(_median(p99s))} | {_cell(_median(firsts))} | "
                f"{sum(r['non200'] for r in rows)} |"
            )
    lines += ["\n## Ratios (same run)", ratios(results)]
    return "\n".join(lines)
