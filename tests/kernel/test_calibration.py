"""The per-model token calibration: learned from upstream counts, robust to tiny prompts."""

from __future__ import annotations

from kernel.calibration import MAX_RATIO, Calibration


def test_unknown_models_are_not_corrected() -> None:
    """Until a model's count is observed, estimates are used as they are."""
    assert Calibration().ratio("m") == 1.0


def test_ratio_moves_toward_what_the_upstream_reports() -> None:
    """The first observation sets the ratio; later ones move it part of the way."""
    calibration = Calibration(weight=0.5)
    calibration.observe("m", 1000, 1200)
    assert calibration.ratio("m") == 1.2
    calibration.observe("m", 1000, 1000)
    assert calibration.ratio("m") == 1.1


def test_tiny_prompts_and_missing_counts_teach_nothing() -> None:
    """A short prompt's ratio is mostly template overhead; it is ignored, as is no count."""
    calibration = Calibration()
    calibration.observe("m", 14, 37)
    calibration.observe("m", 1000, None)
    assert calibration.ratio("m") == 1.0


def test_wild_counts_are_bounded() -> None:
    """An absurd upstream count cannot push the ratio past its bounds."""
    calibration = Calibration()
    calibration.observe("m", 1000, 1_000_000)
    assert calibration.ratio("m") == MAX_RATIO
