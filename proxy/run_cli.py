"""`overspill run -- COMMAND ...`: an agent run through overspill, overspill started if needed.

    overspill run [--config config.yaml] [--port N] [--key KEY] -- claude ...

When nothing answers on the config's address (`general_settings.host`/`port`, or `--port`),
`overspill serve` is started with the config (its log in a file named on stderr, so the
agent's terminal stays its own) and stopped when the command ends; an overspill already
running there is used as it is and left running. The command gets the address in the
variables agents read: `ANTHROPIC_BASE_URL` (Claude Code, the Anthropic SDK) and
`OPENAI_BASE_URL` (Codex, the OpenAI SDK), and a key for overspill: `--key`, else
`$OVERSPILL_API_KEY`, else the config's master key, as `ANTHROPIC_AUTH_TOKEN` (sent as a bearer
token, which Claude Code uses without asking) and `OPENAI_API_KEY`. The exit status is the
command's.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import orjson

from kernel.config import GeneralSettings
from kernel.config_loading import ConfigError, load_config
from proxy.arguments import port

READY_SECONDS = 60.0
"""How long a started overspill may take to answer its readiness probe."""
NO_KEY = "overspill"
"""The key an agent is given for an open gateway (agents want one; overspill takes any)."""
EXIT_NOT_STARTED = 3
EXIT_NOT_FOUND = 127
"""The command is not on PATH (a shell's status for it); overspill is not started."""


def add_parser(commands: Any) -> None:
    """Register the `run` subcommand."""
    parser = commands.add_parser(
        "run",
        help="run an agent (claude, codex, ...) through overspill, starting it if needed",
        description="Start overspill with the config unless it already runs, run COMMAND "
        "pointed at it (ANTHROPIC_BASE_URL, OPENAI_BASE_URL), stop overspill afterwards.",
    )
    parser.add_argument("--config", default=os.environ.get("OVERSPILL_CONFIG", "config.yaml"))
    parser.add_argument(
        "--port", type=port, help="overspill's port (default: general_settings.port)"
    )
    parser.add_argument("--key", default=os.environ.get("OVERSPILL_API_KEY"), help="overspill key")
    parser.add_argument("agent", nargs=argparse.REMAINDER, help="-- COMMAND [ARGS...]")


def run(args: argparse.Namespace) -> int:
    """Run the agent through overspill; the agent's exit status."""
    command = list(args.agent)
    if command[:1] == ["--"]:
        command = command[1:]
    if not command:
        print(
            "overspill run: give the command after --, e.g. overspill run -- claude",
            file=sys.stderr,
        )
        return 2
    try:
        loaded = load_config(args.config)
    except ConfigError as exc:
        for problem in exc.problems:
            print(f"{exc.path}: {problem}", file=sys.stderr)
        return 2
    if shutil.which(command[0]) is None:  # before overspill is started for nothing
        print(f"overspill run: command not found: {command[0]}", file=sys.stderr)
        return EXIT_NOT_FOUND
    general = loaded.settings.general_settings
    url = base_url(general, args.port)
    server: subprocess.Popen[bytes] | None = None
    if not alive(url):
        server, log = start(args.config, args.port or general.port)
        print(f"overspill run: starting overspill at {url} (log: {log})", file=sys.stderr)
        if not wait_ready(url, server):
            stop(server)
            why = reason(log)
            said = f": {why}" if why else ""
            print(f"overspill run: overspill did not start{said} (log: {log})", file=sys.stderr)
            return EXIT_NOT_STARTED
    try:
        return subprocess.call(command, env=agent_env(os.environ, url, key_of(args.key, general)))
    except FileNotFoundError:  # gone since it was found
        print(f"overspill run: command not found: {command[0]}", file=sys.stderr)
        return EXIT_NOT_FOUND
    finally:
        if server is not None:
            stop(server)


def base_url(general: GeneralSettings, port: int | None) -> str:
    """The address an agent on this machine reaches overspill at."""
    host = general.host if general.host not in ("0.0.0.0", "::", "") else "127.0.0.1"
    host = f"[{host}]" if ":" in host else host
    return f"http://{host}:{port or general.port}"


def key_of(given: str | None, general: GeneralSettings) -> str:
    """The key the agent sends: the given one, else the master key, else a placeholder."""
    if given:
        return given
    if general.master_key is not None:
        return general.master_key.get_secret_value()
    return NO_KEY


def agent_env(environ: Mapping[str, str], url: str, key: str) -> dict[str, str]:
    """The agent's environment: overspill's address and key in the variables agents read."""
    env = dict(environ)
    env["ANTHROPIC_BASE_URL"] = url
    env["OPENAI_BASE_URL"] = url + "/v1"
    env["ANTHROPIC_AUTH_TOKEN"] = key
    env["OPENAI_API_KEY"] = key
    return env


def alive(url: str) -> bool:
    """Whether an overspill answers its liveness probe at `url`."""
    try:
        with urllib.request.urlopen(url + "/health/liveness", timeout=2) as response:
            return bool(response.status == 200 and b"alive" in response.read())
    except OSError:
        return False


def start(config: str, port: int) -> tuple[subprocess.Popen[bytes], Path]:
    """`overspill serve` with `config` on `port`, its output in a log file."""
    handle, name = tempfile.mkstemp(prefix="overspill-run-", suffix=".log")
    log = Path(name)
    with os.fdopen(handle, "wb") as sink:
        server = subprocess.Popen(
            [sys.executable, "-m", "proxy", "serve", "--config", config, "--port", str(port)],
            stdout=sink,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
    return server, log


def reason(log: Path) -> str:
    """Why a server that did not start stopped, from its log: the message of its last error
    record (a port in use), else its last line that is not a record (a traceback's), or ""."""
    try:
        lines = log.read_text(errors="replace").splitlines()
    except OSError:
        return ""
    plain = ""
    for line in reversed(lines):
        try:
            record = orjson.loads(line)
        except orjson.JSONDecodeError:
            plain = plain or line.strip()
            continue
        if isinstance(record, dict) and record.get("level") in ("error", "critical"):
            return str(record.get("msg", line))
    return plain


def wait_ready(url: str, server: subprocess.Popen[bytes], seconds: float = READY_SECONDS) -> bool:
    """Poll the readiness probe until it answers, the server exits, or time runs out."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if server.poll() is not None:
            return False
        try:
            with urllib.request.urlopen(url + "/health/readiness", timeout=2) as response:
                if response.status == 200:
                    return True
        except OSError:
            pass
        time.sleep(0.1)
    return False


def stop(server: subprocess.Popen[bytes], grace: float = 40.0) -> None:
    """SIGTERM, and overspill's graceful stop waited out (then a kill)."""
    if server.poll() is not None:
        return
    server.terminate()
    try:
        server.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        server.kill()
        server.wait()
