"""The `overspill` command: the server's subcommands (proxy/cli.py) and the evaluation's `eval`
(evaluation/cli.py), each run by the floor it belongs to."""

from __future__ import annotations

from collections.abc import Sequence

from evaluation import cli as eval_cli
from proxy import cli as server_cli


def main(argv: Sequence[str] | None = None) -> int:
    """The console script's entry point; returns the exit status."""
    args = server_cli.parser(eval_cli.add_parser).parse_args(argv)
    if args.command == "eval":
        return eval_cli.run(args)
    return server_cli.run(args)
