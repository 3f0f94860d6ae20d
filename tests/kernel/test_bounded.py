"""Bounded: values by key, the least recently used out past a bound on their summed size."""

from __future__ import annotations

from kernel.bounded import Bounded


def test_the_least_recently_used_go_once_the_values_pass_the_bound() -> None:
    """Values are kept while their sizes sum within the bound; past it the least recently
    used (read or written) go first."""
    kept: Bounded[str, str] = Bounded(6, len)
    kept.put("a", "aa")
    kept.put("b", "bb")
    assert kept.get("a") == "aa"  # now the most recently used
    kept.put("c", "ccc")
    assert (kept.get("b"), kept.get("a"), kept.get("c")) == (None, "aa", "ccc")
    assert kept.held() == 5


def test_a_value_put_again_replaces_the_old_and_its_size() -> None:
    """Putting a key again replaces its value, and only the new value's size is counted."""
    kept: Bounded[str, str] = Bounded(10, len)
    kept.put("a", "aaaa")
    kept.put("a", "a")
    assert (kept.get("a"), kept.held(), len(kept)) == ("a", 1, 1)
    assert kept.pop("a") == "a"
    assert (kept.pop("a"), kept.held(), len(kept)) == (None, 0, 0)


def test_the_newest_value_is_kept_whatever_its_size() -> None:
    """A value larger than the bound is kept until the next one pushes it out."""
    kept: Bounded[str, str] = Bounded(3, len)
    kept.put("big", "x" * 10)
    assert kept.get("big") == "x" * 10
    kept.put("small", "y")
    assert (kept.get("big"), kept.get("small"), kept.held()) == (None, "y", 1)
