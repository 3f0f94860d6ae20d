"""Argument types for the command line: a bad number stops at the option, naming it.

argparse calls each with the option's text; an `ArgumentTypeError` becomes its usage error
("argument --port: 70000 is not a port (1 to 65535)"), exit status 2, before anything starts.
"""

from __future__ import annotations

import argparse

MAX_PORT = 65535


def positive(text: str) -> int:
    """A whole number above 0."""
    number = _whole(text)
    if number < 1:
        raise argparse.ArgumentTypeError(f"{number} is not above 0")
    return number


def not_negative(text: str) -> int:
    """A whole number, 0 or more."""
    number = _whole(text)
    if number < 0:
        raise argparse.ArgumentTypeError(f"{number} is below 0")
    return number


def port(text: str) -> int:
    """A TCP port to serve on, 1 to `MAX_PORT`, as general_settings.port takes (0, "any free
    port", would serve where no client is told to look; a larger number wraps around)."""
    number = _whole(text)
    if not 1 <= number <= MAX_PORT:
        raise argparse.ArgumentTypeError(f"{number} is not a port (1 to {MAX_PORT})")
    return number


def _whole(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
