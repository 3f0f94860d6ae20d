"""Several workers: their counts merged from a shared directory, made and removed by serve."""

from __future__ import annotations

import http.server
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
from prometheus_client.exposition import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from providers.fake import completion
from proxy.metrics import MULTIPROC_ENV, merged, shared_metrics, worker_stopped
from tests.e2e.conftest import start_overspill

ANSWER = orjson.dumps(completion("hello"))


class Upstream(http.server.BaseHTTPRequestHandler):
    """An OpenAI-wire upstream on loopback that answers every chat request at once."""

    protocol_version = "HTTP/1.1"

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("content-length", "0")))
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(ANSWER)))
        self.end_headers()
        self.wfile.write(ANSWER)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def upstream() -> Iterator[str]:
    """The stub upstream's /v1 URL."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Upstream)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    server.shutdown()
    server.server_close()


def samples(text: str, name: str) -> dict[tuple[tuple[str, str], ...], float]:
    """The samples called `name` in a scrape, by their labels."""
    return {
        tuple(sorted(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name == name
    }


def test_two_workers_serve_one_merged_count(upstream: str, tmp_path: Path) -> None:
    """`serve --workers 2` shares a private metrics directory, merges it on /metrics, and
    removes it on exit."""
    config = (
        "model_list:\n  - model_name: local\n"
        f"    litellm_params: {{model: openai/stub, api_base: '{upstream}'}}\n"
        "general_settings: {store: {path: store}}\nmiddleware: []\n"
    )
    env = {k: v for k, v in os.environ.items() if k != MULTIPROC_ENV}
    process, base, log = start_overspill(config, tmp_path, "--workers", "2", env=env)
    try:
        shared = _shared_dir(log)
        assert shared.is_dir()
        body = {"model": "local", "messages": [{"role": "user", "content": "hi"}]}
        for _ in range(20):  # a new connection each: either worker may take it
            with httpx.Client(base_url=base) as client:
                assert client.post("/v1/chat/completions", json=body).status_code == 200
        scrape = _scrape_until(base, 20)
        files = sorted(p.name for p in shared.iterdir())
    finally:
        process.terminate()
        process.wait(timeout=30)
    assert any(name.startswith("counter_") for name in files)
    requests = samples(scrape, "overspill_requests_total")
    assert requests[(("model", "local"), ("status", "200"), ("stream", "false"))] == 20
    calls = samples(scrape, "overspill_upstream_calls_total")
    assert calls[(("model", "local"), ("provider", "openai"))] == 20
    assert not shared.exists()


def _scrape_until(base: str, requests: int) -> str:
    """A scrape once every worker has flushed its counts (each does within a second)."""
    key = (("model", "local"), ("status", "200"), ("stream", "false"))
    deadline = time.monotonic() + 15
    while True:
        scrape = httpx.get(base + "/metrics").text
        if samples(scrape, "overspill_requests_total").get(key) == requests:
            return scrape
        if time.monotonic() > deadline:
            return scrape  # the assertions below say what is missing
        time.sleep(0.05)  # polling other processes' flush, not a test sleep


def _shared_dir(log: Path) -> Path:
    """The directory `serve` said its workers share (its JSON log line)."""
    for line in log.read_text().splitlines():
        if line.startswith("{"):
            record = json.loads(line)
            if str(record.get("msg", "")).startswith("metrics: workers share"):
                return Path(record["msg"].split()[3])
    raise AssertionError(f"no shared metrics directory logged:\n{log.read_text()[-2000:]}")


COUNTING_WORKER = """
import sys
from kernel import metrics
for _ in range(int(sys.argv[1])):
    metrics.request_done("local", False, 200, 0.01)
"""


def test_the_collector_sums_processes_counts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Counts two processes wrote to the shared directory come back as one sum."""
    monkeypatch.setenv(MULTIPROC_ENV, str(tmp_path))
    for count in (3, 4):
        subprocess.run([sys.executable, "-c", COUNTING_WORKER, str(count)], check=True)
    text = merged(generate_latest, str(tmp_path)).decode()
    requests = samples(text, "overspill_requests_total")
    assert requests[(("model", "local"), ("status", "200"), ("stream", "false"))] == 7
    seconds = samples(text, "overspill_request_duration_seconds_count")
    assert seconds[(("model", "local"), ("stream", "false"))] == 7


def test_one_worker_needs_no_shared_directory(monkeypatch: pytest.MonkeyPatch) -> None:
    """A single worker without the variable keeps its counts in memory."""
    monkeypatch.delenv(MULTIPROC_ENV, raising=False)
    with shared_metrics(1) as path:
        assert path is None
        assert MULTIPROC_ENV not in os.environ


def test_several_workers_get_a_private_directory_removed_after(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """More than one worker: a fresh directory is made and named in the environment, then
    removed, and the variable unset, when serving ends."""
    monkeypatch.delenv(MULTIPROC_ENV, raising=False)
    with shared_metrics(2) as path:
        assert path is not None
        assert os.environ[MULTIPROC_ENV] == path
        assert Path(path).is_dir()
    assert not Path(path).exists()
    assert MULTIPROC_ENV not in os.environ


def test_the_operators_directory_is_honoured_and_kept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """PROMETHEUS_MULTIPROC_DIR set by the operator is used (made if missing), never removed."""
    given = tmp_path / "metrics"
    monkeypatch.setenv(MULTIPROC_ENV, str(given))
    with shared_metrics(4) as path:
        assert path == str(given)
        assert given.is_dir()
    assert given.is_dir()
    assert os.environ[MULTIPROC_ENV] == str(given)


async def test_a_worker_marks_itself_dead_when_it_shuts_down(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """At a worker's shutdown its live-gauge files go (prometheus-client's bookkeeping)."""
    monkeypatch.setenv(MULTIPROC_ENV, str(tmp_path))
    live = tmp_path / f"gauge_livesum_{os.getpid()}.db"
    live.write_bytes(b"")
    worker_stopped()
    assert not live.exists()
