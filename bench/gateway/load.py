"""The load generators: wrk for throughput at a fixed concurrency, hey for latency at a fixed rate.

Both run on the load CPUs (`taskset`). wrk is closed-loop (each connection sends its next
request when the last one finished), keep-alive, one thread. The latency run is `workers`
single-connection hey processes sharing the rate, started 1/rate s apart so that their tickers
interleave: one `hey -c N` fires its N workers in the same instant, a burst, not a moderate rate.
"""

from __future__ import annotations

import csv
import io
import json
import os
import subprocess
import time
from pathlib import Path
from typing import Any

LUA = Path(__file__).resolve().parent / "post_body.lua"


def _pinned(cpus: str, argv: list[str]) -> list[str]:
    return ["taskset", "-c", cpus, *argv] if cpus else argv


def wrk(
    url: str, body: Path, connections: int, seconds: int, auth: str, cpus: str
) -> dict[str, Any]:
    """One wrk run: requests, requests/s, errors and latency percentiles (µs)."""
    env = {**os.environ, "BODY_FILE": str(body), "AUTH_HEADER": auth}
    argv = ["wrk", "-t1", f"-c{connections}", f"-d{seconds}s", "--timeout", "30s", "-s", str(LUA)]
    done = subprocess.run(
        _pinned(cpus, [*argv, url]), capture_output=True, text=True, env=env, timeout=seconds + 90
    )
    line = next((ln for ln in done.stdout.splitlines() if ln.startswith("WRKJSON ")), None)
    if line is None:
        raise RuntimeError(f"wrk printed no summary: {done.stdout}\n{done.stderr}")
    result: dict[str, Any] = json.loads(line.removeprefix("WRKJSON "))
    result["rps"] = round(result["requests"] / (result["duration_us"] / 1e6), 1)
    return result


def _percentile(ordered: list[float], share: float) -> float | None:
    if not ordered:
        return None
    at = (len(ordered) - 1) * share
    low = int(at)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (at - low)


def hey(
    url: str, body: Path, rate: float, seconds: int, auth: str, cpus: str, workers: int = 2
) -> dict[str, Any]:
    """Latency at `rate` requests/s: p50/p99 and time to the first byte (ms), non-200 count."""
    started = []
    for i in range(workers):
        argv = [
            "hey", "-z", f"{seconds}s", "-c", "1", "-q", f"{rate / workers:g}", "-cpus", "1",
            "-m", "POST", "-T", "application/json", "-H", f"Authorization: {auth}",
            "-D", str(body), "-t", "30", "-o", "csv", url,
        ]  # fmt: skip
        started.append(
            subprocess.Popen(
                _pinned(cpus, argv), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
            )
        )
        if i + 1 < workers:
            time.sleep(1 / rate)
    rows: list[dict[str, str]] = []
    for process in started:
        out, err = process.communicate(timeout=seconds + 90)
        got = list(csv.DictReader(io.StringIO(out)))
        if not got:
            raise RuntimeError(f"hey printed no rows: {out[:300]}\n{err[:300]}")
        rows += got
    ok = [row for row in rows if row.get("status-code") == "200"]
    total = sorted(float(row["response-time"]) * 1000 for row in ok)
    first = sorted(
        (float(row["Request-write"]) + float(row["Response-delay"])) * 1000 for row in ok
    )

    def rounded(value: float | None) -> float | None:
        return None if value is None else round(value, 3)

    return {
        "rate": rate,
        "requests": len(rows),
        "non200": len(rows) - len(ok),
        "achieved_rps": round(len(rows) / seconds, 2),
        "p50_ms": rounded(_percentile(total, 0.5)),
        "p99_ms": rounded(_percentile(total, 0.99)),
        "ttfb_p50_ms": rounded(_percentile(first, 0.5)),
    }
