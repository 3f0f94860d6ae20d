"""Every in-process benchmark (bench/micro) still runs: each one once, untimed."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_every_benchmark_runs_once() -> None:
    """`pytest bench/micro --benchmark-disable` passes: no benchmark measures code that moved."""
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "bench/micro", "-q", "-p", "no:cacheprovider",
         "--benchmark-disable"],
        cwd=ROOT, capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert " passed" in done.stdout.splitlines()[-1]
