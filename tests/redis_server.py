"""A throwaway redis-server for the tests that need a real one (session-scoped fixture)."""

from __future__ import annotations

import contextlib
import shutil
import signal
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import IO

import pytest

from tests.e2e.conftest import free_port


@pytest.fixture(scope="session")
def redis_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A throwaway redis-server (no persistence, loopback only) for the whole session."""
    with redis_process(tmp_path_factory.mktemp("redis")) as (_, url):
        yield url


@contextlib.contextmanager
def redis_process(
    workdir: Path, *options: str, port: int | None = None
) -> Iterator[tuple[subprocess.Popen[str], str]]:
    """A redis-server of the test's own (to stop, stall or kill), its process and URL; no
    persistence unless `options` ask for it. Stopped (or reaped, if killed) at the end."""
    server = shutil.which("redis-server")
    if server is None:
        pytest.fail(
            "redis-server is not on PATH: run scripts/ensure-redis.sh "
            "(`make test` does) or `apt-get install redis-server`"
        )
    port = port or free_port()
    command = [server, "--port", str(port), "--bind", "127.0.0.1", "--save", ""]
    command += ["--appendonly", "no", "--dir", str(workdir), "--logfile", "", *options]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, text=True, cwd=workdir)
    assert process.stdout is not None
    drain: threading.Thread | None = None
    try:
        drain = wait_until_logged(process, process.stdout, "Ready to accept connections")
        yield process, f"redis://127.0.0.1:{port}/0"
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGCONT)  # a stalled server must hear the TERM
            process.terminate()
        process.wait(timeout=10)
        if drain is not None:
            drain.join(timeout=10)  # the log ends when the server exits
        process.stdout.close()


def wait_until_logged(
    process: subprocess.Popen[str], log: IO[str], marker: str
) -> threading.Thread:
    """Read the server's log until a line holds `marker` (it is ready); then drain it on a
    thread."""
    seen = []
    for line in log:
        seen.append(line)
        if marker in line:
            drain = threading.Thread(target=log.readlines, name="redis-log", daemon=True)
            drain.start()
            return drain
    process.wait(timeout=10)
    pytest.fail("redis-server did not start:\n" + "".join(seen))


@pytest.fixture
def own_redis(tmp_path: Path) -> Iterator[tuple[subprocess.Popen[str], str]]:
    """A redis-server of this test's own, to stall (SIGSTOP) or kill."""
    with redis_process(tmp_path) as found:
        yield found
