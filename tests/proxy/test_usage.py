"""The usage summary: the days it covers, and `overspill usage` read from a config's store."""

from __future__ import annotations

import asyncio
import datetime as dt
import time
from pathlib import Path

import orjson
import pytest

from cli.main import main
from kernel.errors import InvalidChatRequest
from kernel.spending import Tally
from kernel.store import DiskHistoryStore
from kernel.usage import day_of
from proxy.usage import days_asked
from tests.conftest import settings_from

CONFIG = "model_list: []\ngeneral_settings:\n  usage: {period: month, keep_days: 40}\n"
NOON = dt.datetime(2026, 3, 4, 12, tzinfo=dt.UTC).timestamp()


def test_the_days_default_to_the_budget_period_and_are_checked() -> None:
    """No range: the current period (this month so far); a range is checked by name."""
    settings = settings_from(CONFIG)
    assert days_asked(None, None, settings, NOON) == [
        "2026-03-01", "2026-03-02", "2026-03-03", "2026-03-04",
    ]  # fmt: skip
    assert days_asked("2026-03-03", None, settings, NOON) == ["2026-03-03", "2026-03-04"]
    assert days_asked(None, "2026-02-10", settings, NOON) == ["2026-02-10"]
    for first, last, param in [
        ("2026-3-3", None, "from"),
        ("2026-03-05", "2026-03-01", "from"),
        ("2026-01-01", "2026-03-01", "from"),  # longer than keep_days
        (None, "soon", "to"),
    ]:
        with pytest.raises(InvalidChatRequest) as refused:
            days_asked(first, last, settings, NOON)
        assert refused.value.param == param


def test_the_command_reads_the_store_the_config_names(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`overspill usage --config` sums each tenant's per-day counts by model."""
    config = tmp_path / "config.yaml"
    config.write_text(CONFIG + "  store: {path: store}\n")

    async def record() -> None:
        store = DiskHistoryStore(tmp_path / "store")
        today = day_of(time.time())
        await store.add_usage("acme", today, "local", Tally(3, 1, 900, 60), 3600)
        await store.add_usage("beta", today, "local", Tally(1, 0, 100, 10), 3600)
        await store.aclose()

    asyncio.run(record())
    assert main(["usage", "--config", str(config), "--json"]) == 0
    report = orjson.loads(capsys.readouterr().out)
    assert [(row["tenant"], row["calls"], row["tokens"]) for row in report["data"]] == [
        ("acme", 3, 960),
        ("beta", 1, 110),
    ]
    assert main(["usage", "--config", str(config), "--tenant", "acme"]) == 0
    table = capsys.readouterr().out
    assert "acme" in table
    assert "beta" not in table
    assert main(["usage", "--config", str(config), "--from", "nope"]) == 1
    assert "from must be a day as YYYY-MM-DD" in capsys.readouterr().err
