"""Real processes: llama-server with SmolLM2 (2048-token window) and `overspill serve` before it.

The local model comes from scripts/local-model.sh (built and cached on first use). Nothing here
is skipped when the model is missing: preparing it is part of the check.
"""

from __future__ import annotations

import contextlib
import functools
import os
import re
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import httpx
import openai
import pytest

from kernel.config import GeneralSettings
from tests.e2e.relay import Recorded, recording_relay
from tests.ports import free_port

ROOT = Path(__file__).resolve().parents[2]
MASTER_KEY = "sk-e2e-master"
WINDOW = 2048

_clients: list[openai.OpenAI] = []


def sdk_client(url: str, key: str = MASTER_KEY, timeout: float = 600) -> openai.OpenAI:
    """The real OpenAI SDK pointed at overspill (no retries: failures show at once); the test's
    teardown closes it, so no pooled connection outlives the test."""
    made = openai.OpenAI(base_url=url + "/v1", api_key=key, max_retries=0, timeout=timeout)
    _clients.append(made)
    return made


@pytest.fixture(autouse=True)
def close_sdk_clients() -> Iterator[None]:
    """Close every SDK client a test made (and the connections of its streams)."""
    yield
    while _clients:
        _clients.pop().close()


@dataclass(frozen=True)
class Served:
    """A running overspill in front of the real local model."""

    base_url: str
    log_path: Path
    upstream: str

    def client(self, key: str = MASTER_KEY) -> openai.OpenAI:
        """The real OpenAI SDK pointed at overspill, closed when the test ends."""
        return sdk_client(self.base_url, key)

    def log_lines(self) -> list[str]:
        """overspill's structured log so far."""
        return self.log_path.read_text().splitlines()

    def statuses(self, api: str) -> list[int]:
        """The statuses overspill logged for requests to one API (`messages`, `responses`)."""
        found = []
        for line in self.log_lines():
            compact = line.replace(" ", "")
            if f'"api":"{api}"' in compact:
                status = re.search(r'"status":(\d+)', compact)
                if status:
                    found.append(int(status.group(1)))
        return found

    def health(self) -> httpx.Response:
        """overspill's `GET /health` (every deployment asked for one token), as the master."""
        return httpx.get(
            self.base_url + "/health",
            headers={"authorization": f"Bearer {MASTER_KEY}"},
            timeout=180,
        )

    def metric(self, name: str) -> float:
        """The sum of a metric's samples on overspill's /metrics now."""
        request = urllib.request.Request(
            self.base_url + "/metrics", headers={"authorization": f"Bearer {MASTER_KEY}"}
        )
        with urllib.request.urlopen(request, timeout=30) as response:
            text = response.read().decode()
        total = 0.0
        for line in text.splitlines():
            if line.startswith(name + "{") or line.startswith(name + " "):
                total += float(line.rsplit(" ", 1)[1])
        return total


T = TypeVar("T")
PORT_TRIES = 5
"""Ports tried for a server whose port was taken between choosing it and listening on it."""
_TAKEN = re.compile(r"address already in use|couldn't bind", re.IGNORECASE)
"""What a server logs when it cannot listen on its port (uvicorn, redis-server, llama-server)."""


class PortTaken(RuntimeError):
    """A server could not listen: the port chosen for it (`free_port`, free when asked) was
    taken before it bound it, by a listener or an outgoing connection of another process."""


def port_taken(text: str) -> bool:
    """Whether a server's output says it could not listen on its port."""
    return _TAKEN.search(text) is not None


def on_a_free_port(start: Callable[[int], T]) -> T:
    """`start(port)` on a port free when chosen, and on another while the one chosen was
    taken before the server bound it (`PortTaken`), up to `PORT_TRIES` ports."""
    return started(lambda: start(free_port()))


def started(start: Callable[[], T], again: bool = True) -> T:
    """`start()`, called again (up to `PORT_TRIES` times, when `again`) while a port it chose
    was taken before its server bound it (`PortTaken`)."""
    for attempt in range(1, PORT_TRIES + 1):
        try:
            return start()
        except PortTaken:
            if not again or attempt == PORT_TRIES:
                raise
    raise AssertionError("unreachable")


def exited(what: str, process: subprocess.Popen[bytes], log: Path) -> RuntimeError:
    """The error for a server that exited while starting (`PortTaken` when its port was)."""
    text = log.read_text()
    kind = PortTaken if port_taken(text) else RuntimeError
    return kind(f"{what} exited with {process.returncode}:\n{text[-3000:]}")


def wait_ready(url: str, process: subprocess.Popen[bytes], what: str, log: Path) -> None:
    """Poll `url` until it answers 200 (the process must stay alive meanwhile)."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise exited(what, process, log)
        try:
            with urllib.request.urlopen(url, timeout=1) as response:
                if response.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.1)  # polling a starting process, not a test sleep
    raise RuntimeError(f"{what} not ready after 60 s:\n{log.read_text()[-3000:]}")


def local_model() -> tuple[str, str]:
    """Paths of the llama-server binary and the SmolLM2 weights (prepared if needed)."""
    out = subprocess.run(
        ["bash", str(ROOT / "scripts" / "local-model.sh")],
        check=True, capture_output=True, text=True, env={**os.environ, "PYTHON": sys.executable},
    )  # fmt: skip
    found = dict(line.split("=", 1) for line in out.stdout.splitlines() if "=" in line)
    return found["LLAMA_SERVER"], found["LLAMA_MODEL"]


EMBED_WINDOW = 512
"""The embeddings server's window: its longest input, in tokens (as `make run` starts it)."""
EMBEDDINGS = ("--embeddings", "--pooling", "mean")
"""What makes a llama-server answer /v1/embeddings (OpenAI's shape needs a pooling)."""


NO_FLASH_ATTENTION = ("-fa", "off")
"""llama.cpp's CPU flash attention, on by default, extends a cached prompt (each turn of a
conversation) in about 2.5 to 3.5 times the time plain attention takes and decodes at half the
speed at 1,500 tokens of context; it is faster only on a long prompt read cold, by a tenth to
a third (`python -m bench.model_attention`). Off, as `make run` starts the model."""


def free_cores() -> int:
    """The cores no other process keeps busy: the machine's less its one-minute load average
    (rounded down), at least one. llama.cpp's threads wait for each other after every step,
    so one on a core another process is busy on stalls the rest: beside a busy llama-server
    on 2 cores, SmolLM2 read a cold 900-token prompt at 43 tokens/s on two threads and at
    150 on one, and a test that takes a minute on an idle machine ran past ten."""
    return max(1, (os.cpu_count() or 2) - int(os.getloadavg()[0]))


def threads() -> int:
    """A worker's own llama-server's threads: the free cores shared among pytest-xdist's
    workers (more threads than free cores make llama.cpp's spinning barriers crawl)."""
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    return max(1, free_cores() // max(1, workers))


@contextlib.contextmanager
def running_llama_server(
    workdir: Path,
    window: int = WINDOW,
    *flags: str,
    alias: str = "smollm2-135m",
) -> Iterator[str]:
    """A real llama-server with SmolLM2-135M, one slot of `window` tokens, `threads()` threads
    and `flags`; yields its /v1 URL."""
    binary, model = local_model()
    log = workdir / "llama-server.log"

    def start(port: int) -> tuple[subprocess.Popen[bytes], int]:
        with log.open("wb") as sink:
            process = subprocess.Popen(
                [binary, "-m", model, "-a", alias, "-c", str(window), "-np", "1",
                 "-t", str(threads()), "--host", "127.0.0.1", "--port", str(port),
                 "--no-webui", *NO_FLASH_ATTENTION, *flags],
                stdout=sink, stderr=subprocess.STDOUT,
            )  # fmt: skip
        try:
            wait_ready(f"http://127.0.0.1:{port}/health", process, "llama-server", log)
        except BaseException:
            process.kill()
            process.wait(timeout=10)
            raise
        return process, port

    process, port = on_a_free_port(start)
    try:
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        process.terminate()
        process.wait(timeout=10)


@pytest.fixture(scope="session")
def llama_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The session's llama-server (one 2048-token slot); yields its /v1 URL. Under
    pytest-xdist each worker starts its own on its share of the free cores (one thread each
    on 2 cores): the model's work is the check's longest path, and one server shared by both
    workers, on one thread so that a busy worker cannot stall its other threads, read both
    workers' prompts on one core while the other waited (pytest 12:42 shared, 10:33 on a
    server each, one run each on the 2-core VM; docs/benchmarks.md)."""
    with running_llama_server(tmp_path_factory.mktemp("llama")) as url:
        yield url


@pytest.fixture(scope="module")
def relay(llama_server: str) -> Iterator[tuple[str, Recorded]]:
    """A recording relay in front of the session's llama-server, one per test module: the
    prompts that module's servers sent, to compare."""
    with recording_relay(llama_server) as relayed:
        yield relayed


@pytest.fixture(scope="session")
def llama_embed_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The session's embeddings llama-server (the same weights, --embeddings, mean pooling,
    512-token inputs), started by the first test that needs it; yields its /v1 URL. Its own
    process, as `make run` starts it: an embeddings call on the chat server's one slot would
    evict the cached prompt the other tests' conversations reuse."""
    workdir = tmp_path_factory.mktemp("llama-embed")
    with running_llama_server(
        workdir, EMBED_WINDOW, *EMBEDDINGS, alias="smollm2-135m-embed"
    ) as url:
        yield url


GRACEFUL_SHUTDOWN_SECONDS = GeneralSettings().graceful_shutdown_seconds


def start_overspill(
    config: str, tmp: Path, *args: str, env: Mapping[str, str] | None = None
) -> tuple[subprocess.Popen[bytes], str, Path]:
    """`overspill serve` as a subprocess on a free port, with `args` (`--workers 2`) and the
    environment `env` (this process's by default); its process, URL and log."""
    path = tmp / "config.yaml"
    path.write_text(config)
    environment = {**(os.environ if env is None else env), "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    return on_a_free_port(functools.partial(_start_overspill, path, tmp, args, environment))


def _start_overspill(
    path: Path, tmp: Path, args: tuple[str, ...], env: Mapping[str, str], port: int
) -> tuple[subprocess.Popen[bytes], str, Path]:
    log = tmp / "overspill.log"
    command = [sys.executable, "-m", "proxy", "serve", "--config", str(path), "--port", str(port)]
    with log.open("wb") as sink:
        process = subprocess.Popen(
            [*command, *args], stdout=sink, stderr=subprocess.STDOUT, cwd=tmp, env=env
        )
    url = f"http://127.0.0.1:{port}"
    wait_ready(url + "/health/readiness", process, "overspill", log)
    return process, url, log


def local_config(
    llama_server: str,
    middleware: str | None = "[]",
    store: str = "{path: store}",
    window: int | None = WINDOW,
    passthrough: bool | None = None,
) -> str:
    """A config whose model `local` is the real llama-server (`middleware=None`: no key, so
    the recommended layers run; `window=None`: overspill does not know the window;
    `passthrough`: the model entry's setting, when given). A turn
    may wait for another's growth as long as one upstream call may take (`timeout`): on a
    loaded box an extraction outlasts the default 60 s, and a waiter would then grow its own."""
    layers = "" if middleware is None else f"middleware: {middleware}\n"
    road = "" if passthrough is None else f"    passthrough: {str(passthrough).lower()}\n"
    context = (
        ""
        if window is None
        else f"    context:\n      window: {window}\n      max_wait_seconds: 300\n"
    )
    return f"""
model_list:
  - model_name: local
    litellm_params:
      model: openai/smollm2-135m
      api_base: {llama_server}
      timeout: 300
{road}{context}general_settings:
  master_key: {MASTER_KEY}
  max_body_bytes: 200000
  store: {store}
{layers}"""


def stop(process: subprocess.Popen[bytes]) -> None:
    """SIGTERM, and wait out overspill's graceful stop (30 s by default, for requests a test
    left open); a process still there after it is killed, never leaked."""
    process.terminate()
    try:
        process.wait(timeout=GRACEFUL_SHUTDOWN_SECONDS + 15)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def serve(config: str, tmp: Path, upstream: str) -> Iterator[Served]:
    """Run overspill with `config` until the session ends."""
    process, url, log = start_overspill(config, tmp)
    try:
        yield Served(url, log, upstream)
    finally:
        stop(process)


def run_mock(name: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A provider mock of `tests/mocks/` (`anthropic`, `gemini`) on a free port: its base URL
    while it runs."""
    log = tmp_path_factory.mktemp("mock") / "mock.log"

    def start(port: int) -> tuple[subprocess.Popen[bytes], int]:
        with log.open("wb") as sink:
            process = subprocess.Popen(
                [sys.executable, "-m", f"tests.mocks.{name}", "--port", str(port)],
                stdout=sink, stderr=subprocess.STDOUT, cwd=ROOT,
            )  # fmt: skip
        deadline = time.monotonic() + 30
        while "listening" not in log.read_text():  # it prints once bound
            if process.poll() is not None:
                raise exited(f"mock {name}", process, log)
            if time.monotonic() > deadline:
                stop(process)
                raise RuntimeError(f"mock not listening on {port}: {log.read_text()}")
            time.sleep(0.05)  # polling a starting process, not a test sleep
        return process, port

    process, port = on_a_free_port(start)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        stop(process)


@pytest.fixture(scope="session")
def overspill(llama_server: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    """overspill serve with `middleware: []` (no layers) before the real llama-server."""
    yield from serve(local_config(llama_server), tmp_path_factory.mktemp("plain"), llama_server)


@pytest.fixture(scope="session")
def litellm_road(llama_server: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    """overspill serve with no layers, its model kept off the byte passthrough
    (`passthrough: false`): litellm's translation of OpenAI's wire, sent by overspill."""
    config = local_config(llama_server, passthrough=False)
    yield from serve(config, tmp_path_factory.mktemp("litellm-road"), llama_server)


@pytest.fixture(scope="session")
def recovering(llama_server: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    """overspill serve with its default layers before the real llama-server, not told its
    window: the first overflow is how compaction starts (fail-first)."""
    config = local_config(llama_server, None, window=None)
    yield from serve(config, tmp_path_factory.mktemp("recovering"), llama_server)


@pytest.fixture(scope="session")
def compacting(llama_server: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    """overspill serve with its default layers before the real llama-server, its window known:
    compaction runs ahead of the wall."""
    config = local_config(llama_server, None)
    yield from serve(config, tmp_path_factory.mktemp("compacting"), llama_server)


def responses_config(llama_server: str) -> str:
    """The default layers before the real llama-server, by both roads to the Responses API:
    translated through chat completions (`local`) and llama-server's own (`local-native`);
    the Agents SDK's default model name is an alias of `local`."""
    return f"""
model_list:
  - model_name: local
    litellm_params: {{model: openai/smollm2-135m, api_base: {llama_server}, timeout: 300}}
    context: {{window: {WINDOW}}}
  - model_name: local-native
    litellm_params: {{model: openai/smollm2-135m, api_base: {llama_server}, timeout: 300}}
    responses_api: native
    context: {{window: {WINDOW}}}
router_settings:
  model_group_alias: {{"gpt-5.6-luna": local}}
general_settings:
  master_key: {MASTER_KEY}
  max_body_bytes: 400000
  store: {{path: store}}
"""


@pytest.fixture(scope="session")
def responding(llama_server: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    """overspill serve with its default layers and both roads to the Responses API."""
    config = responses_config(llama_server)
    yield from serve(config, tmp_path_factory.mktemp("responses"), llama_server)


def messages_config(llama_server: str) -> str:
    """The default layers before the real llama-server, by both roads to the Messages API:
    translated through chat completions (`local`) and llama-server's own (`local-native`,
    `messages_api: native`); Claude's model names are served by `local` (a wildcard)."""
    return f"""
model_list:
  - model_name: local
    litellm_params: {{model: openai/smollm2-135m, api_base: {llama_server}, timeout: 300}}
    context: {{window: {WINDOW}}}
  - model_name: local-native
    litellm_params: {{model: openai/smollm2-135m, api_base: {llama_server}, timeout: 300}}
    messages_api: native
    context: {{window: {WINDOW}}}
  - model_name: "claude-*"
    litellm_params: {{model: openai/smollm2-135m, api_base: {llama_server}, timeout: 300}}
    context: {{window: {WINDOW}}}
general_settings:
  master_key: {MASTER_KEY}
  max_body_bytes: 400000
  store: {{path: store}}
"""


@pytest.fixture(scope="session")
def messaging(llama_server: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    """overspill serve with its default layers and both roads to the Messages API."""
    config = messages_config(llama_server)
    yield from serve(config, tmp_path_factory.mktemp("messages"), llama_server)
