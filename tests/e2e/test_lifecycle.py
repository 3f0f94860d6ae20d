"""A real `overspill serve` process changed and stopped while a stream is open.

SIGTERM: no new connections, the open stream finishes, exit status 0 (and a stream longer
than the grace period is cut). SIGHUP and `POST /overspill/config/reload`: the new config is
served while the open stream keeps its own; a bad file is refused and the old config kept.
The upstream is a real HTTP server in this process whose streams the test holds open.
"""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from tests.e2e.conftest import MASTER_KEY, sdk_client, start_overspill
from tests.e2e.upstream import PIECES, HeldStreams, held_upstream

pytestmark = pytest.mark.e2e

DEADLINE_SECONDS = 60
UPSTREAM_KEY = "sk-upstream-secret-4b1d"


def config(upstream: str, *, grace: int = 30, extra_model: str | None = None) -> str:
    """A config whose model `held` is the held upstream (byte passthrough)."""
    models = [("held", upstream)] + ([(extra_model, upstream)] if extra_model else [])
    listed = "".join(
        f"""
  - model_name: {name}
    litellm_params: {{model: openai/held, api_base: "{base}", api_key: {UPSTREAM_KEY}}}"""
        for name, base in models
    )
    return f"""
model_list:{listed}
general_settings:
  master_key: {MASTER_KEY}
  graceful_shutdown_seconds: {grace}
  store: {{path: store}}
middleware: []
"""


@pytest.fixture
def upstream() -> Iterator[tuple[str, HeldStreams]]:
    """The held upstream for one test."""
    with held_upstream() as running:
        yield running


@pytest.fixture
def stop_all() -> Iterator[list[subprocess.Popen[bytes]]]:
    """Processes to kill if a test leaves them running."""
    started: list[subprocess.Popen[bytes]] = []
    yield started
    for process in started:
        if process.poll() is None:
            process.kill()
            process.wait(timeout=10)


def serve(
    text: str, tmp: Path, stop_all: list[subprocess.Popen[bytes]]
) -> tuple[subprocess.Popen[bytes], str, Path]:
    process, url, log = start_overspill(text, tmp)
    stop_all.append(process)
    return process, url, log


def client(url: str) -> openai.OpenAI:
    """The real OpenAI SDK pointed at overspill; closed when the test ends."""
    return sdk_client(url, timeout=120)


def open_stream(url: str, streams: HeldStreams) -> tuple[Iterator[str], str]:
    """A stream through overspill, its first piece already read (the upstream holds the rest)."""
    stream = client(url).chat.completions.create(
        model="held", messages=[{"role": "user", "content": "count"}], stream=True
    )
    pieces = (chunk.choices[0].delta.content or "" for chunk in stream if chunk.choices)
    first = next(pieces)
    assert streams.first_sent.wait(DEADLINE_SECONDS), "the upstream sent its first chunk"
    return pieces, first


def wait_for(condition: Callable[[], bool], what: str) -> None:
    """Poll `condition` until it holds (a deadline, not a timing assertion)."""
    deadline = time.monotonic() + DEADLINE_SECONDS
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {DEADLINE_SECONDS} s: {what}")
        time.sleep(0.05)  # polling a real process, not a test sleep


def refuses_connections(url: str) -> bool:
    host, port = url.removeprefix("http://").split(":")
    try:
        socket.create_connection((host, int(port)), timeout=1).close()
    except ConnectionRefusedError:
        return True
    return False


def log_records(log: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in log.read_text().splitlines() if line.startswith("{")]


def logged(log: Path, message: str) -> bool:
    return any(record["msg"] == message for record in log_records(log))


def model_names(url: str) -> list[str]:
    return [model.id for model in client(url).models.list()]


def test_sigterm_lets_the_open_stream_finish_and_exits_0(
    upstream: tuple[str, HeldStreams], tmp_path: Path, stop_all: list[subprocess.Popen[bytes]]
) -> None:
    """On SIGTERM new connections are refused, the open stream ends whole, the exit is 0."""
    base, streams = upstream
    process, url, log = serve(config(base), tmp_path, stop_all)
    pieces, first = open_stream(url, streams)
    process.send_signal(signal.SIGTERM)
    wait_for(lambda: refuses_connections(url), "new connections refused")
    assert process.poll() is None
    streams.release.set()
    assert [first, *pieces] == [*PIECES, ""]
    assert process.wait(timeout=DEADLINE_SECONDS) == 0
    requests = [r for r in log_records(log) if r["msg"] == "request"]
    assert [(r["status"], r["stream"]) for r in requests] == [(200, True)]


def test_a_stream_past_the_grace_period_is_cut_and_the_exit_is_still_0(
    upstream: tuple[str, HeldStreams], tmp_path: Path, stop_all: list[subprocess.Popen[bytes]]
) -> None:
    """A stream still open when the grace period ends is cut; the process exits 0."""
    base, streams = upstream
    process, url, log = serve(config(base, grace=1), tmp_path, stop_all)
    pieces, _ = open_stream(url, streams)
    process.send_signal(signal.SIGTERM)
    assert process.wait(timeout=DEADLINE_SECONDS) == 0
    with pytest.raises((httpx.HTTPError, openai.APIError)):
        list(pieces)
    assert any("graceful shutdown exceeded" in r["msg"] for r in log_records(log))


def test_sighup_serves_the_new_config_while_the_open_stream_keeps_the_old(
    upstream: tuple[str, HeldStreams], tmp_path: Path, stop_all: list[subprocess.Popen[bytes]]
) -> None:
    """After SIGHUP the new config answers; a stream opened before it completes unharmed."""
    base, streams = upstream
    process, url, log = serve(config(base), tmp_path, stop_all)
    pieces, first = open_stream(url, streams)
    changed = config(base, extra_model="added").replace("store:", "port: 4999\n  store:")
    (tmp_path / "config.yaml").write_text(changed)
    process.send_signal(signal.SIGHUP)
    wait_for(lambda: "added" in model_names(url), "the reloaded model list")
    restart = [r["msg"] for r in log_records(log) if "takes effect on restart" in r["msg"]]
    assert restart
    assert restart[0].startswith("general_settings.port changed")
    streams.release.set()
    assert [first, *pieces] == [*PIECES, ""]
    reply = client(url).chat.completions.create(
        model="added", messages=[{"role": "user", "content": "count"}]
    )
    assert reply.choices[0].message.content == " ".join(PIECES)
    assert process.poll() is None


def test_a_bad_config_is_refused_and_the_running_one_kept(
    upstream: tuple[str, HeldStreams], tmp_path: Path, stop_all: list[subprocess.Popen[bytes]]
) -> None:
    """A reload of a broken file answers 400 naming the YAML path, logs why, keeps serving."""
    base, _ = upstream
    process, url, log = serve(config(base), tmp_path, stop_all)
    (tmp_path / "config.yaml").write_text(
        config(base).replace("model: openai/held,", "").replace("store:", "port: lots\n  store:")
    )
    refused = httpx.post(
        url + "/overspill/config/reload", headers={"authorization": f"Bearer {MASTER_KEY}"}
    )
    assert refused.status_code == 400
    error = refused.json()["error"]
    assert error["code"] == "invalid_config"
    assert "model_list[0].litellm_params.model: field required" in error["message"]
    assert "general_settings.port: input should be a valid integer" in error["message"]
    process.send_signal(signal.SIGHUP)
    wait_for(lambda: sum(r["msg"].startswith("config reload refused") for r in log_records(log)) == 2,
             "the refused SIGHUP reload logged")  # fmt: skip
    assert model_names(url) == ["held"]
    assert httpx.post(url + "/overspill/config/reload").status_code == 401
    assert UPSTREAM_KEY not in log.read_text()
    assert MASTER_KEY not in log.read_text()
    assert process.poll() is None


def test_the_endpoint_reloads_a_good_config_log_levels_included(
    upstream: tuple[str, HeldStreams], tmp_path: Path, stop_all: list[subprocess.Popen[bytes]]
) -> None:
    """POST /overspill/config/reload swaps in a good file, says what now runs, and applies
    its per-logger levels (request lines off) at once."""
    base, _ = upstream
    _, url, log = serve(config(base), tmp_path, stop_all)
    ask = {"model": "held", "messages": [{"role": "user", "content": "count"}]}
    key = {"authorization": f"Bearer {MASTER_KEY}"}
    assert httpx.post(url + "/v1/chat/completions", json=ask, headers=key).status_code == 200
    quiet = config(base, extra_model="added").replace(
        "store:", "log_levels: {overspill.request: WARNING}\n  store:"
    )
    (tmp_path / "config.yaml").write_text(quiet)
    answer = httpx.post(url + "/overspill/config/reload", headers=key)
    assert answer.status_code == 200
    assert answer.json() | {"config": None} == {
        "status": "reloaded", "config": None, "generation": 2, "models": ["held", "added"],
        "layers": [], "restart_required": [], "warnings": [],
    }  # fmt: skip
    assert model_names(url) == ["held", "added"]
    assert httpx.post(url + "/v1/chat/completions", json=ask, headers=key).status_code == 200
    assert [r["status"] for r in log_records(log) if r["msg"] == "request"] == [200]


def test_every_log_line_is_json_without_foreign_fields_or_secrets(
    upstream: tuple[str, HeldStreams], tmp_path: Path, stop_all: list[subprocess.Popen[bytes]]
) -> None:
    """Each line is one JSON object: other libraries' record attributes and keys never appear."""
    base, _ = upstream
    with_litellm = config(base).replace(
        "general_settings:",
        "  - model_name: claude\n"
        "    litellm_params: {model: anthropic/claude-x, api_key: sk-ant-secret-9f9f}\n"
        "general_settings:",
    )  # a litellm model: its import adds a redaction filter to uvicorn's logger
    process, url, log = serve(with_litellm, tmp_path, stop_all)
    ask = {"model": "held", "messages": [{"role": "user", "content": "count"}]}
    good = httpx.post(url + "/v1/chat/completions", json=ask,
                      headers={"authorization": f"Bearer {MASTER_KEY}"})  # fmt: skip
    wrong = httpx.post(url + "/v1/chat/completions", json=ask,
                       headers={"authorization": "Bearer sk-wrong-key-7a7a"})  # fmt: skip
    assert (good.status_code, wrong.status_code) == (200, 401)
    process.send_signal(signal.SIGTERM)
    assert process.wait(timeout=DEADLINE_SECONDS) == 0
    text = log.read_text()
    records = [json.loads(line) for line in text.splitlines()]
    foreign = [r for r in records if not r["logger"].startswith("overspill")]
    assert any(r["logger"] == "uvicorn.error" for r in foreign)
    assert all(set(r) <= {"ts", "level", "logger", "msg", "exc"} for r in foreign), foreign
    assert [r["status"] for r in records if r["msg"] == "request"] == [200, 401]
    assert not [r for r in records if r["logger"] == "uvicorn.access"]  # one line per request
    for secret in (UPSTREAM_KEY, "sk-ant-secret-9f9f", MASTER_KEY, "sk-wrong-key-7a7a"):
        assert secret not in text
    assert "litellm_redacted" not in text


def serve_workers(
    text: str, tmp: Path, stop_all: list[subprocess.Popen[bytes]], workers: int
) -> tuple[subprocess.Popen[bytes], str, Path]:
    """`overspill serve --workers N` (uvicorn's supervisor and N worker processes)."""
    process, url, log = start_overspill(text, tmp, "--workers", str(workers))
    stop_all.append(process)
    return process, url, log


def test_with_workers_a_reload_replaces_them_and_a_bad_file_keeps_them(
    upstream: tuple[str, HeldStreams], tmp_path: Path, stop_all: list[subprocess.Popen[bytes]]
) -> None:
    """--workers 2: SIGHUP with a bad file keeps the workers; the endpoint with a good one has
    the supervisor replace both; SIGTERM stops everything with status 0."""
    base, _ = upstream
    process, url, log = serve_workers(config(base), tmp_path, stop_all, workers=2)
    (tmp_path / "config.yaml").write_text(config(base).replace("model: openai/held,", ""))
    process.send_signal(signal.SIGHUP)
    wait_for(lambda: logged(log, "cannot start: the config cannot be used"), "the refused worker")
    wait_for(lambda: any("aborting the restart" in r["msg"] for r in log_records(log)),
             "the supervisor keeping its workers")  # fmt: skip
    assert model_names(url) == ["held"]
    (tmp_path / "config.yaml").write_text(config(base, extra_model="added"))
    answer = httpx.post(
        url + "/overspill/config/reload", headers={"authorization": f"Bearer {MASTER_KEY}"}
    )
    assert answer.json()["status"] == "restarting_workers"

    def replaced() -> bool:
        ready = [r for r in log_records(log) if r["msg"] == "ready" and "added" in r["models"]]
        return len(ready) == 2

    wait_for(replaced, "both workers replaced")
    wait_for(lambda: sum("Finished server process" in r["msg"] for r in log_records(log)) == 2,
             "both old workers stopped")  # fmt: skip
    assert model_names(url) == ["held", "added"]
    process.send_signal(signal.SIGTERM)
    assert process.wait(timeout=DEADLINE_SECONDS) == 0
