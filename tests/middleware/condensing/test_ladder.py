"""The one ladder: cheaper model, user's model, visible cut; retried once when transient."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from kernel.errors import (
    UpstreamError,
    UpstreamRateLimited,
    UpstreamRejected,
    UpstreamTimeout,
)
from kernel.tokens import count_text
from kernel.types import Completion, Message
from middleware.condensing.ladder import (
    Rung,
    condense_message,
    extract_on_ladder,
    is_transient,
    retrying,
)
from tests.middleware.condensing.test_extraction import (
    FACTS,
    Scripted,
    conversation,
    fixed,
    prompt_text,
)


def rung(complete: Scripted, room: int, chars: float, how: str = "model") -> Rung:
    return Rung("m", complete, room, chars, "cheapest" if how == "cheapest" else "model")


DOCUMENT = "The contract number is QX-5521 and it renews on 1 June. " + "Boilerplate clause. " * 900


async def test_the_cheapest_rung_condenses_when_it_can_hold_the_text() -> None:
    """The first rung that fits answers: how="cheapest", one call, within the share."""
    cheap = Scripted(fixed("- contract QX-5521 renews 1 June"))
    big = Scripted(fixed("- unused"))
    rungs = [rung(cheap, 16_000, 4.0, "cheapest"), rung(big, 128_000, 3.5)]
    result = await condense_message(DOCUMENT, share_tokens=500, rungs=rungs)
    assert (result.how, result.calls) == ("cheapest", 1)
    assert "QX-5521" in result.text
    assert big.prompts == []


async def test_a_rung_too_small_for_the_text_is_skipped() -> None:
    """A window that cannot hold the text by its estimate is not called."""
    cheap = Scripted(fixed("- unused"))
    model = Scripted(fixed("- contract QX-5521"))
    rungs = [rung(cheap, 2_000, 4.0, "cheapest"), rung(model, 128_000, 3.5)]
    result = await condense_message(DOCUMENT, share_tokens=500, rungs=rungs)
    assert (result.how, result.calls) == ("model", 1)
    assert cheap.prompts == []


async def test_an_overflowing_or_refusing_rung_passes_to_the_next() -> None:
    """Overflow on one rung and a refusal on another end in truncation, within the share."""
    overflowing = Scripted(fixed("- x"), window=1000)
    refusing = Scripted(fixed("I'm sorry, I cannot help."))
    rungs = [rung(overflowing, 16_000, 40.0, "cheapest"), rung(refusing, 128_000, 3.5)]
    result = await condense_message(DOCUMENT, share_tokens=300, rungs=rungs, focus="renewal?")
    assert (result.how, result.calls) == ("truncated", 2)
    assert count_text(result.text) <= 300
    assert result.text.startswith("The contract number is QX-5521")
    assert "renewal?" in prompt_text(refusing.prompts[0])


async def test_a_message_that_fits_is_returned_unchanged() -> None:
    """Nothing to condense: no call, the text as is, and nothing to report."""
    result = await condense_message("short", share_tokens=50, rungs=[])
    assert (result.text, result.how, result.calls) == ("short", "unchanged", 0)


# ---------------------------------------------------------------- one more try when transient


class Flaky:
    """Fails with `errors` in turn, then answers."""

    def __init__(self, *errors: Exception) -> None:
        self.errors = list(errors)
        self.calls = 0

    async def __call__(self, messages: Sequence[Message], *, max_tokens: int) -> Completion:
        self.calls += 1
        if self.errors:
            raise self.errors.pop(0)
        return Completion("- fine", 10, 2, "stop")


@pytest.mark.parametrize(
    ("error", "transient"),
    [
        (UpstreamError("boom", upstream_status=503), True),
        (UpstreamError("unreachable"), True),
        (UpstreamTimeout("slow"), True),
        (UpstreamError("refused", upstream_status=401), False),
        (UpstreamRejected("bad", upstream_status=400), False),
        (UpstreamRateLimited("slow down", upstream_status=429), False),
    ],
)
async def test_a_transient_failure_is_tried_once_more(
    error: UpstreamError, transient: bool
) -> None:
    """5xx, timeouts and lost connections get one more try; other failures pass at once."""
    flaky = Flaky(error)
    call = retrying(flaky, "m")
    if transient:
        assert (await call([], max_tokens=5)).text == "- fine"
    else:
        with pytest.raises(UpstreamError):
            await call([], max_tokens=5)
    assert flaky.calls == (2 if transient else 1)
    assert is_transient(error) is transient


async def test_two_transient_failures_in_a_row_fail_the_call() -> None:
    """The retry is once: a second failure is the call's."""
    flaky = Flaky(UpstreamTimeout("slow"), UpstreamTimeout("slow"))
    with pytest.raises(UpstreamTimeout):
        await retrying(flaky, "m")([], max_tokens=5)
    assert flaky.calls == 2


async def test_history_takes_the_next_rung_when_one_fails() -> None:
    """An extraction model that keeps failing hands the history to the user's own model."""
    broken = Flaky(*[UpstreamError("down", upstream_status=502)] * 10)
    model = Scripted(fixed("- the user planned the release"))
    rungs = [Rung("cheap", broken, 4096, 4.0, "cheapest"), rung(model, 4096, 3.5)]
    result = await extract_on_ladder(conversation(6), rungs=rungs, target_tokens=300)
    assert not result.cut
    assert model.prompts
    assert "planned the release" in result.text


async def test_history_is_cut_visibly_when_no_rung_manages() -> None:
    """No usable answer anywhere: the last rung cuts the transcript and keeps the facts."""
    refusing = Scripted(fixed("I'm sorry, I cannot help with that."))
    result = await extract_on_ladder(
        conversation(10, filler_repeat=20), rungs=[rung(refusing, 4096, 3.5)], target_tokens=300
    )
    assert result.cut
    assert FACTS["ZX-4471"] in result.text
    assert count_text(result.text) <= 300


async def test_an_overflowing_rung_is_not_a_failure_of_the_request() -> None:
    """A rung whose every call overflows passes to the cut, never raises to the layer."""
    overflowing = Scripted(fixed("- x"), window=10)
    result = await extract_on_ladder(
        conversation(6), rungs=[rung(overflowing, 4096, 3.5)], target_tokens=200
    )
    assert result.cut
    assert overflowing.prompts
