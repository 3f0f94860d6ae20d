"""The per-model token calibration: learned from upstream counts, robust to tiny prompts."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from kernel.calibration import MAX_RATIO, MIN_RATIO, ratio, sample, teaches


def test_unknown_models_are_not_corrected() -> None:
    """Until a model's count is observed, estimates are used as they are."""
    assert ratio(()) == 1.0


def test_ratio_moves_toward_what_the_upstream_reports() -> None:
    """The first sample sets the ratio; a later one moves it `weight` of the way."""
    assert ratio((1.2,), weight=0.5) == 1.2
    assert ratio((1.0, 1.2), weight=0.5) == 1.1


def test_tiny_prompts_and_missing_counts_teach_nothing() -> None:
    """A short prompt's ratio is mostly template overhead; it is ignored, as is no count."""
    assert sample(14, 37) is None
    assert sample(1000, None) is None
    assert sample(1000, 0) is None


def test_wild_counts_are_bounded() -> None:
    """An absurd upstream count cannot push a sample past its bounds."""
    assert sample(1000, 1_000_000) == MAX_RATIO
    assert sample(1000, 1) == MIN_RATIO


@given(st.lists(st.floats(MIN_RATIO, MAX_RATIO), min_size=1, max_size=16))
def test_the_ratio_stays_within_the_samples(samples: list[float]) -> None:
    """The moving average never leaves the range of its samples."""
    assert min(samples) - 1e-9 <= ratio(samples) <= max(samples) + 1e-9


def test_a_sample_teaches_only_when_it_differs_from_the_correction() -> None:
    """Within 1% of the current correction a sample is not worth recording."""
    assert not teaches(1.205, 1.2)
    assert teaches(1.22, 1.2)
    assert teaches(0.9, 1.0)
