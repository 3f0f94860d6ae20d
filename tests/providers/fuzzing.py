"""Hypothesis strategies for the wires' fuzz tests: any JSON, and objects of a given shape."""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st


class JsonShapes:
    """Any JSON value whose objects use `keys`, and objects shaped like a wire's."""

    def __init__(self, keys: list[str]) -> None:
        self.any: st.SearchStrategy[Any] = st.recursive(
            st.none() | st.booleans() | st.integers(-2, 3) | st.text(max_size=4),
            lambda inner: (
                st.lists(inner, max_size=3)
                | st.dictionaries(st.sampled_from(keys), inner, max_size=4)
            ),
            max_leaves=12,
        )

    def shaped(self, kinds: list[str], **fields: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
        """An object of one of `kinds` with any of `fields` (each any JSON value, or its own
        strategy), or any JSON value at all."""
        optional = {name: strategy | self.any for name, strategy in fields.items()}
        return st.fixed_dictionaries({"type": st.sampled_from(kinds)}, optional=optional) | self.any
