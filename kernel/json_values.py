"""What a parsed JSON value is, as JSON means it: `true` is no integer, though Python's `bool`
is an `int`, so every field that takes a count, a size or a number asks here."""

from __future__ import annotations

from typing import Any, TypeGuard


def is_int(value: Any) -> TypeGuard[int]:
    """Whether a JSON value is an integer (JSON's `true` is not one, though Python's is)."""
    return isinstance(value, int) and not isinstance(value, bool)


def is_number(value: Any) -> TypeGuard[int | float]:
    """Whether a JSON value is a number (not a boolean)."""
    return isinstance(value, int | float) and not isinstance(value, bool)
