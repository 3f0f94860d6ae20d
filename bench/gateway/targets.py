"""What the bench measures: the mock, the reference passthroughs, the LiteLLM proxy, overspill.

Every target but `direct` is a proxy in front of the same mock upstream, started by the
harness on the proxy CPUs. The LiteLLM proxy and overspill read configs written from the
same model list (`scenarios.MODELS`), so both route each scenario's model to the same wire.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from bench.gateway.scenarios import MODELS, Scenario

ROOT = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class Setting:
    """Where a run's pieces are: what a target's command line is made from."""

    out: Path
    mock: Path
    manifest: Path
    upstream_root: str
    litellm_venv: Path | None
    python: str = sys.executable


@dataclass(frozen=True)
class Target:
    """A server to measure: how to start it, and which scenarios it can serve."""

    name: str
    command: Callable[[Setting, int], list[str]]
    forwards_bytes: bool = False
    """A byte forwarder serves only scenarios whose upstream speaks the client's wire."""
    cwd: Path = ROOT

    def serves(self, scenario: Scenario) -> bool:
        return scenario.same_wire or not self.forwards_bytes


def _api_base(setting: Setting, wire: str) -> str:
    return setting.upstream_root + ("/v1" if wire == "openai" else "")


def litellm_config(setting: Setting) -> Path:
    """The LiteLLM proxy's config: every model, out-of-the-box settings otherwise."""
    lines = ["model_list:"]
    for model in MODELS:
        lines += [
            f"  - model_name: {model.name}",
            "    litellm_params:",
            f"      {{model: {model.litellm_model}, api_base: '{_api_base(setting, model.wire)}',"
            " api_key: sk-mock, timeout: 60}",
        ]
    lines += ["litellm_settings: {drop_params: true, set_verbose: false, telemetry: false}"]
    path = setting.out / "litellm.yaml"
    path.write_text("\n".join(lines) + "\n")
    return path


def overspill_config(setting: Setting, name: str) -> Path:
    """overspill's config: every model, every shipped layer configured (with nothing to do)."""
    lines = ["model_list:"]
    for model in MODELS:
        lines += [
            f"  - model_name: {model.name}",
            "    litellm_params:",
            f"      {{model: {model.litellm_model}, api_base: '{_api_base(setting, model.wire)}',"
            " api_key: sk-mock, timeout: 60}",
        ]
        if model.overspill_entry:
            lines.append(f"    {model.overspill_entry}")
    lines += [
        "general_settings:",
        "  master_key: os.environ/LITELLM_MASTER_KEY",
        f"  store: {{path: '{setting.out / ('store-' + name)}'}}",
        "middleware: [documents, history_splice, overflow_recovery, ollama_window]",
    ]
    path = setting.out / f"{name}.yaml"
    path.write_text("\n".join(lines) + "\n")
    return path


_HOST = ["--host", "127.0.0.1"]
_UVICORN = ["--loop", "uvloop", "--http", "httptools", "--no-access-log", "--log-level", "warning"]
_GRANIAN = [
    "--interface", "asgi", "--loop", "uvloop", "--http", "1", "--no-ws", "--workers", "1",
    "--runtime-threads", "1", "--no-access-log", "--log-level", "warning",
]  # fmt: skip
"""One worker, one runtime thread: the same one-core budget as uvicorn's."""


def _bin(setting: Setting, name: str) -> str:
    return str(Path(setting.python).parent / name)


def _uvicorn(app: str) -> Callable[[Setting, int], list[str]]:
    def command(setting: Setting, port: int) -> list[str]:
        return [setting.python, "-m", "uvicorn", app, *_HOST, "--port", str(port), *_UVICORN]

    return command


def _granian(app: str, *extra: str) -> Callable[[Setting, int], list[str]]:
    def command(setting: Setting, port: int) -> list[str]:
        where = ["--working-dir", str(ROOT), *_HOST, "--port", str(port)]
        return [_bin(setting, "granian"), *_GRANIAN, *extra, *where, app]

    return command


def _direct(setting: Setting, port: int) -> list[str]:
    return [str(setting.mock), "-addr", f"127.0.0.1:{port}", "-routes", str(setting.manifest)]


def _litellm(setting: Setting, port: int) -> list[str]:
    if setting.litellm_venv is None:
        raise RuntimeError("the LiteLLM proxy's venv was not made")
    litellm = str(setting.litellm_venv / "bin" / "litellm")
    config = str(litellm_config(setting))
    return [litellm, "--config", config, *_HOST, "--port", str(port)]


def overspill(name: str = "overspill", source: Path = ROOT) -> Target:
    """overspill from a checkout (this one, or another: an A/B in one run), this venv's python."""

    def command(setting: Setting, port: int) -> list[str]:
        config = str(overspill_config(setting, name))
        serve = [setting.python, "-m", "proxy", "serve", "--config", config]
        return [*serve, *_HOST, "--port", str(port)]

    return Target(name, command, cwd=source)


def _overspill_granian(setting: Setting, port: int) -> list[str]:
    config = overspill_config(setting, "overspill-granian")
    factory = _granian("proxy.server:app_from_env", "--factory")(setting, port)
    return ["env", f"OVERSPILL_CONFIG={config}", *factory]


PASSTHROUGH = "bench.gateway.passthrough.with_httpx:app"
PASSTHROUGH_AIOHTTP = "bench.gateway.passthrough.with_aiohttp:app"

TARGETS = {
    target.name: target
    for target in (
        Target("direct", _direct, forwards_bytes=True),
        Target("litellm", _litellm),
        Target("passthrough", _uvicorn(PASSTHROUGH), forwards_bytes=True),
        Target("passthrough-aiohttp", _uvicorn(PASSTHROUGH_AIOHTTP), forwards_bytes=True),
        overspill(),
        Target("passthrough-granian", _granian(PASSTHROUGH), forwards_bytes=True),
        Target("passthrough-aiohttp-granian", _granian(PASSTHROUGH_AIOHTTP), forwards_bytes=True),
        Target("overspill-granian", _overspill_granian),
    )
}
"""`direct`: the mock on the proxy CPU, the load sent straight to it (one core's ceiling).
The `-granian` ones: the same apps under granian instead of uvicorn (the server's share)."""

DEFAULT_TARGETS = ("direct", "litellm", "passthrough", "passthrough-aiohttp", "overspill")
REFERENCES = ("passthrough", "passthrough-aiohttp", "litellm")
"""What overspill's figures are divided by, when the run has them."""
