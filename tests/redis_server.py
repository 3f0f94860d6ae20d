"""A throwaway redis-server for the tests that need a real one (session-scoped fixture)."""

from __future__ import annotations

import contextlib
import shutil
import signal
import subprocess
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, TypeVar

import pytest

from tests.e2e.conftest import PortTaken, started
from tests.ports import free_port


@pytest.fixture(scope="session")
def redis_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A throwaway redis-server (no persistence, loopback only) for the whole session."""
    with redis_process(tmp_path_factory.mktemp("redis")) as (_, url):
        yield url


T = TypeVar("T")


@contextlib.contextmanager
def redis_process(
    workdir: Path, *options: str, port: int | None = None
) -> Iterator[tuple[subprocess.Popen[str], str]]:
    """A redis-server of the test's own (to stop, stall or kill), its process and URL; no
    persistence unless `options` ask for it. Stopped (or reaped, if killed) at the end. On a
    port of its own choosing, started again on another when that one was taken meanwhile; a
    port given is the caller's to choose again (`PortTaken`, `retried`)."""

    def start() -> contextlib.AbstractContextManager[tuple[subprocess.Popen[str], str]]:
        return _redis_process(workdir, options, port or free_port())

    with retried(start, again=port is None) as found:
        yield found


@contextlib.contextmanager
def retried(
    start: Callable[[], contextlib.AbstractContextManager[T]], again: bool = True
) -> Iterator[T]:
    """What `start()` makes, made anew (up to `PORT_TRIES` times) while a port chosen for it
    was taken before it listened (`PortTaken`), when `again`. Only the start is tried again:
    what fails inside the context fails as it is."""
    with contextlib.ExitStack() as stack:
        yield started(lambda: stack.enter_context(start()), again)


@contextlib.contextmanager
def _redis_process(
    workdir: Path, options: tuple[str, ...], port: int
) -> Iterator[tuple[subprocess.Popen[str], str]]:
    server = shutil.which("redis-server")
    if server is None:
        pytest.fail(
            "redis-server is not on PATH: run scripts/ensure-redis.sh "
            "(`make test` does) or `apt-get install redis-server`"
        )
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


def port_of(url: str) -> int:
    """The port of a `redis://127.0.0.1:PORT/0` URL."""
    return int(url.rsplit(":", 1)[1].split("/")[0])


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
    if any("Address already in use" in line for line in seen):
        raise PortTaken("".join(seen))
    pytest.fail("redis-server did not start:\n" + "".join(seen))


@pytest.fixture
def own_redis(tmp_path: Path) -> Iterator[tuple[subprocess.Popen[str], str]]:
    """A redis-server of this test's own, to stall (SIGSTOP) or kill."""
    with redis_process(tmp_path) as found:
        yield found
