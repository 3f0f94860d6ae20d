"""`overspill run -- COMMAND`: a real `overspill serve` started for the command when none runs,
the command pointed at it, overspill stopped afterwards; a running one used and left running."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import orjson

from proxy.run_cli import EXIT_NOT_FOUND, EXIT_NOT_STARTED
from tests.e2e.conftest import (
    PortTaken,
    on_a_free_port,
    port_taken,
    start_overspill,
    stop,
)
from tests.ports import free_port

AGENT = """
import json, os, sys, urllib.request
url = os.environ["ANTHROPIC_BASE_URL"]
with urllib.request.urlopen(url + "/health/liveness") as response:
    alive = response.status
seen = {name: os.environ.get(name) for name in
        ("ANTHROPIC_BASE_URL", "OPENAI_BASE_URL", "ANTHROPIC_AUTH_TOKEN", "OPENAI_API_KEY")}
open(sys.argv[1], "w").write(json.dumps({"alive": alive, **seen}))
sys.exit(7)
"""


def config(port: int) -> str:
    return f"""
model_list:
  - model_name: local
    litellm_params: {{model: openai/smollm2, api_base: "http://127.0.0.1:9/v1"}}
general_settings:
  master_key: sk-run
  port: {port}
  store: {{path: store}}
"""


def listening(port: int) -> bool:
    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", port)) == 0


def overspill_run(tmp_path: Path, port: int) -> subprocess.CompletedProcess[str]:
    """`overspill run` with the config on `port`, the agent writing what it saw."""
    path = tmp_path / "config.yaml"
    path.write_text(config(port))
    return subprocess.run(
        [sys.executable, "-m", "proxy", "run", "--config", str(path), "--",
         sys.executable, "-c", AGENT, str(tmp_path / "seen.json")],
        cwd=tmp_path, capture_output=True, text=True, timeout=120,
        env={**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True"},
    )  # fmt: skip


def run(tmp_path: Path, port: int) -> tuple[int, dict[str, object]]:
    """The agent's exit status and what it saw; `PortTaken` when overspill could not listen
    on `port` (free when chosen, taken before overspill bound it)."""
    done = overspill_run(tmp_path, port)
    if done.returncode == EXIT_NOT_STARTED and port_taken(done.stderr):
        raise PortTaken(done.stderr)
    return done.returncode, orjson.loads((tmp_path / "seen.json").read_bytes())


def test_run_starts_overspill_for_the_command_and_stops_it(tmp_path: Path) -> None:
    """With nothing on the port, overspill is started, the command reaches it through
    ANTHROPIC_BASE_URL with the master key as its token, its exit status is returned, and
    overspill is gone afterwards."""
    port, (status, seen) = on_a_free_port(lambda port: (port, run(tmp_path, port)))
    url = f"http://127.0.0.1:{port}"
    assert status == 7
    assert seen == {
        "alive": 200,
        "ANTHROPIC_BASE_URL": url,
        "OPENAI_BASE_URL": url + "/v1",
        "ANTHROPIC_AUTH_TOKEN": "sk-run",
        "OPENAI_API_KEY": "sk-run",
    }
    assert not listening(port)


def test_run_uses_a_running_overspill_and_leaves_it_running(tmp_path: Path) -> None:
    """An overspill already answering on the port is used as it is, and still runs after."""
    own = tmp_path / "own"
    own.mkdir()
    process, url, _ = start_overspill(config(free_port()), own)  # on a port of its own
    port = int(url.rsplit(":", 1)[1])
    try:
        status, seen = run(tmp_path, port)
        assert status == 7
        assert seen["ANTHROPIC_BASE_URL"] == url
        assert listening(port)
        assert process.poll() is None
    finally:
        stop(process)


def test_run_says_why_overspill_did_not_start(tmp_path: Path) -> None:
    """With another program listening on the port, the command is not run and overspill run
    says the address is in use, not only where the log is."""
    with socket.socket() as other:
        other.bind(("127.0.0.1", 0))
        other.listen()
        done = overspill_run(tmp_path, other.getsockname()[1])
    assert done.returncode == EXIT_NOT_STARTED
    assert "address already in use" in done.stderr.splitlines()[-1]
    assert not (tmp_path / "seen.json").exists()


def test_a_command_not_on_path_starts_nothing(tmp_path: Path) -> None:
    """A command that is not on PATH is status 127 and said at once, before any overspill is
    started for it (it started one, waited for it to be ready, then stopped it)."""
    port = free_port()
    path = tmp_path / "config.yaml"
    path.write_text(config(port))
    done = subprocess.run(
        [sys.executable, "-m", "proxy", "run", "--config", str(path), "--", "no-such-agent-x"],
        cwd=tmp_path, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == EXIT_NOT_FOUND
    assert done.stderr == "overspill run: command not found: no-such-agent-x\n"
    assert not listening(port)
