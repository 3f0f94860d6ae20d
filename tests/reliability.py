"""The reliability suite's report: cases tried, right and wrong per area.

A test joins the suite with ``@pytest.mark.reliability("area")`` (areas: timeouts,
upstream-bodies, streams, input, protocol, secrets, store, memory, tenants, crash, fuzz).
``make test`` runs the fast part; ``make reliability`` runs every reliability test with the
full example counts (``OVERSPILL_RELIABILITY=full``) and prints the table at the end. Each
report carries its area (``user_properties``), so the table adds up the same when pytest-xdist's
workers run the tests and only the reports reach the process that prints it.
"""

from __future__ import annotations

import os
from collections import defaultdict
from dataclasses import dataclass

import pytest

FULL = os.environ.get("OVERSPILL_RELIABILITY") == "full"


def examples(fast: int, full: int) -> int:
    """How many generated cases a fuzzing test tries: few in ``make test``, many in the suite."""
    return full if FULL else fast


@dataclass
class _Tally:
    tried: int = 0
    right: int = 0
    wrong: int = 0


_TALLIES: dict[str, _Tally] = defaultdict(_Tally)
_AREA = "reliability-area"


def _area(item: pytest.Item) -> str | None:
    marker = item.get_closest_marker("reliability")
    if marker is None:
        return None
    if not marker.args or not isinstance(marker.args[0], str):
        raise pytest.UsageError(f"{item.nodeid}: @pytest.mark.reliability needs an area name")
    return marker.args[0]


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]):  # type: ignore[no-untyped-def]
    """Mark each report of a reliability case with its area."""
    outcome = yield
    report: pytest.TestReport = outcome.get_result()
    area = _area(item)
    if area is not None:
        report.user_properties.append((_AREA, area))


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """Count each reliability case once, by its outcome (a setup error counts as wrong)."""
    area = next((value for name, value in report.user_properties if name == _AREA), None)
    if not isinstance(area, str) or report.skipped:
        return
    if report.when == "call" or (report.when == "setup" and report.failed):
        tally = _TALLIES[area]
        tally.tried += 1
        if report.passed:
            tally.right += 1
        else:
            tally.wrong += 1


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """Print the per-area table whenever reliability cases ran."""
    if not _TALLIES:
        return
    write = terminalreporter.write_line
    terminalreporter.section("reliability")
    write(f"{'area':<16}{'tried':>7}{'right':>7}{'wrong':>7}")
    total = _Tally()
    for area in sorted(_TALLIES):
        tally = _TALLIES[area]
        write(f"{area:<16}{tally.tried:>7}{tally.right:>7}{tally.wrong:>7}")
        total.tried += tally.tried
        total.right += tally.right
        total.wrong += tally.wrong
    write(f"{'all':<16}{total.tried:>7}{total.right:>7}{total.wrong:>7}")
    if FULL:
        write("(full run: every reliability case, full example counts)")
