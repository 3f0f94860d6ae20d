"""The servers under test, pinned to their CPUs, and what they cost while the load runs.

CPU is the user+system time of a server's whole process tree (a supervisor and its workers
alike) between the start and the end of a run: divided by the requests served it is the
overhead figure the bench reports, the most portable one. RSS is the tree's, sampled every
quarter second (its peak) and at rest (idle). Core utilisation comes from /proc/stat, to show
that the load generator's core is not the bottleneck.
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from types import TracebackType

import psutil


def post(url: str, body: bytes, headers: dict[str, str], timeout: float = 30) -> tuple[int, bytes]:
    """One POST: its status and whole body (an HTTP error's too)."""
    request = urllib.request.Request(url, data=body, method="POST", headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=timeout) as answer:
            return answer.status, answer.read()
    except urllib.error.HTTPError as error:
        return error.code, error.read()


def tree_usage(process: psutil.Process) -> tuple[float, int]:
    """(CPU seconds, RSS bytes) of a process and all its descendants."""
    cpu, rss = 0.0, 0
    try:
        tree = [process, *process.children(recursive=True)]
    except psutil.Error:
        return cpu, rss
    for member in tree:
        try:
            times = member.cpu_times()
            cpu += times.user + times.system
            rss += member.memory_info().rss
        except psutil.Error:
            continue
    return cpu, rss


def _core_jiffies() -> dict[int, tuple[int, int]]:
    """{cpu: (busy, total)} from /proc/stat."""
    out = {}
    for line in Path("/proc/stat").read_text().splitlines():
        name, *fields = line.split()
        if name.startswith("cpu") and name[3:].isdigit():
            values = [int(field) for field in fields]
            idle = values[3] + values[4]
            out[int(name[3:])] = (sum(values) - idle, sum(values))
    return out


def settle(
    process: psutil.Process, busy: float = 0.05, window: float = 0.5, limit: float = 60
) -> float:
    """Wait until a process tree is idle (under `busy` of a core over `window` seconds): a
    slow target still works through the requests a finished run left queued, and the next run
    must not pay for them. Returns the seconds waited (at most `limit`)."""
    started = time.monotonic()
    while time.monotonic() - started < limit:
        before = tree_usage(process)[0]
        time.sleep(window)
        if tree_usage(process)[0] - before < busy * window:
            break
    return round(time.monotonic() - started, 2)


class Server:
    """A command started on a set of CPUs (`taskset`), in its own session, its output logged."""

    def __init__(
        self, name: str, argv: list[str], cpus: str, env: dict[str, str], logs: Path,
        cwd: Path | None = None,
    ) -> None:  # fmt: skip
        self.name = name
        self.log_path = logs / f"{name}.log"
        self._log = self.log_path.open("wb")
        self.started = time.monotonic()
        pinned = ["taskset", "-c", cpus, *argv] if cpus else argv
        self.popen = subprocess.Popen(
            pinned, stdout=self._log, stderr=subprocess.STDOUT, env=env, cwd=cwd,
            start_new_session=True,
        )  # fmt: skip
        self.process = psutil.Process(self.popen.pid)

    def wait_ready(self, url: str, body: bytes, headers: dict[str, str], timeout: float) -> float:
        """Seconds from the start to the first 200 on a real request."""
        deadline = time.monotonic() + timeout
        last = ""
        while time.monotonic() < deadline:
            if self.popen.poll() is not None:
                raise RuntimeError(f"{self.name} exited ({self.popen.returncode}): {self.log_path}")
            try:
                status, data = post(url, body, headers, timeout=5)
            except OSError as error:
                last = repr(error)
            else:
                if status == 200:
                    return time.monotonic() - self.started
                last = f"HTTP {status}: {data[:300]!r}"
            time.sleep(0.2)
        raise RuntimeError(f"{self.name} not ready after {timeout:.0f} s: {last}")

    def stop(self) -> None:
        if self.popen.poll() is None:
            try:
                os.killpg(self.popen.pid, signal.SIGTERM)
                self.popen.wait(15)
            except subprocess.TimeoutExpired:
                os.killpg(self.popen.pid, signal.SIGKILL)
                self.popen.wait(5)
            except ProcessLookupError:
                pass
        self._log.close()


class Monitor:
    """CPU and peak RSS of some process trees, and each core's use, over a `with` block."""

    def __init__(self, processes: dict[str, psutil.Process], interval: float = 0.25) -> None:
        self.processes = processes
        self.interval = interval
        self.peak = dict.fromkeys(processes, 0)
        self.result: dict[str, object] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def __enter__(self) -> Monitor:
        self._cpu = {name: tree_usage(p)[0] for name, p in self.processes.items()}
        self._cores = _core_jiffies()
        self._start = time.monotonic()
        self._thread.start()
        return self

    def _sample(self) -> None:
        while not self._stop.wait(self.interval):
            for name, process in self.processes.items():
                self.peak[name] = max(self.peak[name], tree_usage(process)[1])

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._stop.set()
        self._thread.join()
        wall = time.monotonic() - self._start
        cores = _core_jiffies()
        self.result = {
            "wall_s": round(wall, 3),
            "core_util_pct": {
                str(core): round(
                    100 * (busy - self._cores[core][0]) / (total - self._cores[core][1]), 1
                )
                for core, (busy, total) in cores.items()
                if total > self._cores[core][1]
            },
        }
        for name, process in self.processes.items():
            cpu, rss = tree_usage(process)
            self.result[f"{name}_cpu_s"] = round(cpu - self._cpu[name], 4)
            self.result[f"{name}_rss_peak_mb"] = round(max(self.peak[name], rss) / 2**20, 1)
