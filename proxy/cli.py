"""The server's commands: `serve`, `check-config`, `conversations`, `run`, `usage`, `ollama`.

The `overspill` command (cli/main.py) is these and the evaluation's `eval`; `python -m proxy`
is these alone, so the server can start itself (`overspill run`) without the command above it.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import sys
from collections.abc import Callable, Sequence
from types import FrameType
from typing import Any

from kernel.config_loading import ConfigError, LoadedConfig, load_config
from proxy.arguments import port, positive
from proxy.exposure import HOST_ENV, address_problem, open_gateway_refusal

CONFIG_ENV = "OVERSPILL_CONFIG"
WORKERS_ENV = "OVERSPILL_WORKERS"
"""How many worker processes `serve` started (read by each worker: proxy/live.py)."""
EXIT_BAD_CONFIG = 2

log = logging.getLogger("overspill")


def main(argv: Sequence[str] | None = None) -> int:
    """`python -m proxy`: the server's own commands, every `overspill` command but `eval`
    (the `overspill` command itself is cli/main.py's); returns the exit status."""
    return run(parser().parse_args(argv))


def run(args: argparse.Namespace) -> int:
    """One of the server's commands, parsed; returns the exit status."""
    if args.command == "check-config":
        return check_config(args.config)
    if args.command == "ollama":
        return ollama_refresh(args)
    if args.command == "conversations":
        from proxy import conversations_cli

        return conversations_cli.run(args)
    if args.command == "run":
        from proxy import run_cli

        return run_cli.run(args)
    if args.command == "usage":
        from proxy import usage

        return usage.run(args)
    if args.command == "health":
        from proxy import health_cli

        return health_cli.run(args)
    return serve(args)


def parser(*more: Callable[[Any], None]) -> argparse.ArgumentParser:
    """The `overspill` command's parser with the server's subcommands; each of `more` adds
    its own after them (the command line above the server adds `eval` so)."""
    parser = argparse.ArgumentParser(
        prog="overspill",
        description="OpenAI-compatible proxy that keeps long conversations inside the window.",
    )
    commands = parser.add_subparsers(dest="command", required=True)
    serve_cmd = commands.add_parser("serve", help="run the proxy")
    serve_cmd.add_argument("--config", default=os.environ.get(CONFIG_ENV, "config.yaml"))
    serve_cmd.add_argument("--host", help="bind address (default: general_settings.host)")
    serve_cmd.add_argument("--port", type=port, help="port (default: general_settings.port)")
    serve_cmd.add_argument("--workers", type=positive, default=1, help="worker processes")
    check = commands.add_parser("check-config", help="validate a config file and exit")
    check.add_argument("config", nargs="?", default=os.environ.get(CONFIG_ENV, "config.yaml"))
    from proxy import conversations_cli

    conversations_cli.add_parser(commands)
    from proxy import run_cli

    run_cli.add_parser(commands)
    from proxy import usage

    usage.add_parser(commands)
    from proxy import health_cli

    health_cli.add_parser(commands)
    ollama = commands.add_parser("ollama", help="forget the Ollama windows a running server cached")
    ollama.add_argument("action", choices=["refresh"])
    ollama.add_argument("--url", default="http://127.0.0.1:4000", help="the running overspill")
    ollama.add_argument("--key", default=os.environ.get("OVERSPILL_MASTER_KEY"))
    for add in more:
        add(commands)
    return parser


def _load(path: str) -> LoadedConfig | None:
    try:
        loaded = load_config(path)
    except ConfigError as exc:
        for problem in exc.problems:
            print(f"{exc.path}: {problem}", file=sys.stderr)
        return None
    return loaded


def check_config(path: str) -> int:
    """Validate the config (and the layers it names) without serving."""
    loaded = _load(path)
    if loaded is None:
        return EXIT_BAD_CONFIG
    problem = _layer_problem(loaded) or asyncio.run(_check_store(loaded, _config_dir(path)))
    if problem:
        print(f"{path}: {problem}", file=sys.stderr)
        return EXIT_BAD_CONFIG
    for warning in loaded.warnings:
        print(f"{path}: warning: {warning}", file=sys.stderr)
    names = ", ".join(loaded.settings.model_names())
    count = len(loaded.settings.model_list)
    print(f"{path}: ok ({count} deployment{'' if count == 1 else 's'}: {names})")
    aliases = loaded.settings.router_settings.model_group_alias
    if aliases:
        listed = ", ".join(
            f"{alias} → {item.model}{' (hidden)' if item.hidden else ''}"
            for alias, item in aliases.items()
        )
        print(f"{path}: aliases: {listed}")
    print(f"{path}: {layers_line(loaded)}")
    return 0


def ollama_refresh(args: argparse.Namespace) -> int:
    """POST /overspill/ollama/refresh on a running server."""
    from proxy.admin_client import AdminCallError, call

    try:
        answer = call("POST", args.url, "/overspill/ollama/refresh", args.key)
    except AdminCallError as exc:
        print(f"ollama refresh: {exc}", file=sys.stderr)
        return 1
    print(f"dropped {answer.get('dropped', 0)} cached Ollama windows")
    return 0


def _config_dir(path: str) -> str:
    """Relative paths in the config (the store's) are relative to the config file."""
    return os.path.dirname(os.path.abspath(path))


def layers_line(loaded: LoadedConfig) -> str:
    """Which layers run, and whether that is the default."""
    from middleware.pipeline import active_layers

    names = active_layers(loaded.settings)
    listed = ", ".join(names) if names else "none (middleware: [])"
    origin = (
        "the default: no middleware key" if loaded.settings.middleware is None else "middleware:"
    )
    return f"layers: {listed} ({origin})"


def _layer_problem(loaded: LoadedConfig) -> str | None:
    """Why `middleware:` cannot be built, or None."""
    from middleware.pipeline import LAYERS, MiddlewareError, check_layers

    try:
        check_layers(loaded.settings, LAYERS)
    except MiddlewareError as exc:
        return str(exc)
    return None


async def _check_store(loaded: LoadedConfig, base: str) -> str | None:
    """Open and probe the configured store once, so a bad store path stops startup clearly."""
    from kernel.store import StoreError
    from proxy.stores import open_store

    try:
        store = open_store(loaded.settings.general_settings.store, base_dir=base)
        try:
            await store.ping()
        finally:
            await store.aclose()
    except StoreError as exc:
        return str(exc)
    return None


def serve(args: argparse.Namespace) -> int:
    """Validate the config, then run uvicorn with the app factory."""
    loaded = _load(args.config)
    if loaded is None:
        return EXIT_BAD_CONFIG
    import uvicorn

    from proxy import logs

    general = loaded.settings.general_settings
    logs.configure(general.log_level, general.log_levels)
    problem = _layer_problem(loaded) or asyncio.run(_check_store(loaded, _config_dir(args.config)))
    if problem:
        print(f"{args.config}: {problem}", file=sys.stderr)
        return EXIT_BAD_CONFIG
    for warning in loaded.warnings:
        log.warning(warning)
    log.info(layers_line(loaded))
    host = args.host or general.host
    port = args.port or general.port
    refusal = address_problem(host, port) or open_gateway_refusal(
        loaded.settings, host, loaded.warnings
    )
    if refusal:
        print(f"{args.config}: {refusal}", file=sys.stderr)
        return EXIT_BAD_CONFIG
    if general.master_key is None and not general.client_keys:
        log.warning(
            "no general_settings.master_key or client_keys: any client that can reach "
            "overspill may use it"
        )
    os.environ[CONFIG_ENV] = os.path.abspath(args.config)
    os.environ[WORKERS_ENV] = str(args.workers)
    os.environ[HOST_ENV] = host
    _take_signals()
    from proxy.connection import server_options
    from proxy.limits import ConnectionLimits
    from proxy.metrics import shared_metrics

    with shared_metrics(args.workers) as metrics_dir:
        if metrics_dir:
            log.info("metrics: workers share %s (PROMETHEUS_MULTIPROC_DIR)", metrics_dir)
        uvicorn.run(
            "proxy.server:app_from_env",
            factory=True,
            host=host,
            port=port,
            workers=args.workers,
            access_log=False,
            log_config=None,
            timeout_graceful_shutdown=general.graceful_shutdown_seconds,
            **server_options(ConnectionLimits.of(general)),
        )
    return 0


def _take_signals() -> None:
    """Before uvicorn starts: SIGTERM ends in a graceful stop and exit status 0, and a SIGHUP
    sent before the app can reload is ignored rather than fatal.

    uvicorn handles SIGTERM itself (stop accepting, let requests finish for
    `graceful_shutdown_seconds`, run the app's shutdown), then re-raises the signal with the
    handler it found: ours, so the process exits 0 instead of dying of the signal. With
    `--workers N` its supervisor takes every signal over (SIGHUP: replace the workers).
    """

    def stopped(signum: int, frame: FrameType | None) -> None:
        log.info("stopped", extra={"signal": signal.Signals(signum).name})

    signal.signal(signal.SIGTERM, stopped)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
