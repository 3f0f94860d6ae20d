"""The shared estimator: what it writes to the calibration log, and when it does not."""

from __future__ import annotations

from kernel.config_loading import parse_config
from kernel.estimator import Estimator

ONE_MODEL = "model_list:\n  - {model_name: local, litellm_params: {model: openai/smollm2}}\n"
ENTRY = parse_config(ONE_MODEL, "c", {}).settings.model_list[0]


class Log:
    """A calibration log in memory that counts its writes."""

    def __init__(self, *samples: float) -> None:
        self.samples = list(samples)
        self.writes = 0

    async def calibration(self, model: str) -> tuple[float, ...]:
        return tuple(self.samples)

    async def add_calibration(self, model: str, ratio: float) -> None:
        self.writes += 1
        self.samples.insert(0, ratio)


async def test_a_sample_matching_the_correction_just_read_is_not_written() -> None:
    """A steady model's samples cost no store write once its correction was read."""
    log = Log(1.2)
    estimator = Estimator(log)
    assert await estimator.scale(ENTRY) == 1.2
    await estimator.observe(ENTRY, 1000, 1205)
    await estimator.observe(ENTRY, 1000, 1195)
    assert log.writes == 0


async def test_a_sample_that_moves_the_correction_is_written() -> None:
    """A sample more than the tolerance away from the correction is recorded."""
    log = Log(1.2)
    estimator = Estimator(log)
    await estimator.scale(ENTRY)
    await estimator.observe(ENTRY, 1000, 1300)
    assert log.samples[0] == 1.3


async def test_after_a_write_the_next_sample_is_written_until_read_again() -> None:
    """The correction a write changed is not known until read, so samples go to the log."""
    log = Log()
    estimator = Estimator(log)
    assert await estimator.scale(ENTRY) == 1.0
    await estimator.observe(ENTRY, 1000, 1300)
    await estimator.observe(ENTRY, 1000, 1300)
    assert log.writes == 2
    assert await estimator.scale(ENTRY) > 1.0
    await estimator.observe(ENTRY, 1000, 1300)
    assert log.writes == 2
