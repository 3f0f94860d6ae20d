"""What the harness needs beside the project's venv, installed on first use and cached.

- `wrk` (throughput) and `hey` (latency at a fixed rate) from Debian, and `golang-go` to
  build the mock: `apt-get install` when missing and running as root, else a message that
  says what to install;
- the mock upstream, built from `mock_upstream.go` into the cache (rebuilt when the source
  changes);
- the LiteLLM proxy, `litellm[proxy]` at the version pyproject.toml pins, in a venv of its own
  in the cache (its dependencies never touch the project's venv).

The cache is `$XDG_CACHE_HOME/overspill/bench` (default `~/.cache/overspill/bench`), shared
by every checkout on the machine.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
TOOLS = {"wrk": "wrk", "hey": "hey", "go": "golang-go", "taskset": "util-linux"}
"""Command: the Debian package that has it."""


def cache_dir() -> Path:
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    path = base / "overspill" / "bench"
    path.mkdir(parents=True, exist_ok=True)
    return path


def log(*parts: object) -> None:
    print("bench:", *parts, file=sys.stderr, flush=True)


def ensure_commands() -> None:
    """wrk, hey, go and taskset on PATH, installed with apt-get when missing (as root)."""
    missing = [package for command, package in TOOLS.items() if shutil.which(command) is None]
    if not missing:
        return
    if os.geteuid() == 0 and shutil.which("apt-get"):
        log("installing", " ".join(missing), "with apt-get")
        env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        subprocess.run(["apt-get", "update", "-qq"], check=True, env=env, capture_output=True)
        subprocess.run(["apt-get", "install", "-y", "-qq", *missing], check=True, env=env)
    still = [command for command in TOOLS if shutil.which(command) is None]
    if still:
        packages = " ".join(TOOLS[command] for command in still)
        raise SystemExit(f"bench: missing {', '.join(still)}: sudo apt-get install {packages}")


def mock_binary() -> Path:
    """The mock upstream, built from its source into the cache when it changed."""
    source = HERE / "mock_upstream.go"
    digest = hashlib.sha256(source.read_bytes()).hexdigest()[:12]
    binary = cache_dir() / f"mock-upstream-{digest}"
    if not binary.exists():
        log("building the mock upstream ->", binary)
        env = {**os.environ, "GO111MODULE": "off", "GOCACHE": str(cache_dir() / "go-build")}
        partial = binary.with_suffix(".partial")
        subprocess.run(["go", "build", "-o", str(partial), str(source)], check=True, env=env)
        partial.rename(binary)
    return binary


def litellm_spec() -> str:
    """`litellm[proxy]==X`, X the version pyproject.toml pins for overspill itself."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    for dependency in project["dependencies"]:
        found = re.fullmatch(r"litellm\s*==\s*([\w.]+)", dependency)
        if found:
            return f"litellm[proxy]=={found.group(1)}"
    raise SystemExit("bench: pyproject.toml pins no litellm version (litellm==X)")


def litellm_venv() -> Path:
    """A venv holding the LiteLLM proxy at the pinned version, made on first use."""
    spec = litellm_spec()
    venv = cache_dir() / ("litellm-proxy-" + spec.rsplit("==", 1)[1])
    python = venv / "bin" / "python"
    probe = [str(python), "-c", "import litellm.proxy.proxy_server, uvloop"]
    if python.exists() and subprocess.run(probe, capture_output=True).returncode == 0:
        return venv
    log(f"installing {spec} into {venv} (once)")
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    pip = [str(python), "-m", "pip", "install", "-q"]
    subprocess.run([*pip, "--upgrade", "pip"], check=True)
    subprocess.run([*pip, spec, "uvloop"], check=True)
    return venv


def version_of(python: Path, package: str) -> str:
    """A package's version in another interpreter's environment."""
    code = f"import importlib.metadata as m; print(m.version({package!r}))"
    done = subprocess.run([str(python), "-c", code], capture_output=True, text=True)
    return done.stdout.strip() or "?"
