"""`overspill eval` against the real local model: a short smoke so the command never rots."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import orjson
import pytest

from evaluation.conditions import CONDITIONS
from tests.e2e.conftest import local_config

pytestmark = pytest.mark.e2e
KINDS = "tool_fact,corrected_fact,instruction"
"""A few kinds keep the smoke short (every condition still asks each of them)."""


def test_eval_scores_every_condition_on_the_real_model(llama_server: str, tmp_path: Path) -> None:
    """One short conversation through every condition at a small window: the run completes
    and each condition has a row per probe asked, scored (recall itself is not judged)."""
    config = tmp_path / "config.yaml"
    config.write_text(local_config(llama_server, None))
    out = tmp_path / "rows.jsonl"
    done = subprocess.run(
        [sys.executable, "-m", "cli", "eval", "--config", str(config), "--seeds", "1",
         "--fillers", "0", "--window", "768", "--answer-tokens", "12", "--kinds", KINDS,
         "--out", str(out)],
        capture_output=True, text=True, cwd=tmp_path, timeout=300,
        env={**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True"},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    rows = [orjson.loads(line) for line in out.read_bytes().splitlines()]
    for condition in CONDITIONS:
        mine = [row for row in rows if row["condition"] == condition]
        assert [row["kind"] for row in mine] == KINDS.split(","), condition
        # a baseline may not fit the window (masking short replies saves little): then it
        # says so; nothing fails
        assert {row["status"] for row in mine} <= {"ok", "overflow"}, (condition, mine)
    for condition in ("overspill-once", "overspill-turns", "drop-oldest"):
        assert {r["status"] for r in rows if r["condition"] == condition} == {"ok"}, condition
    for condition in ("overspill-once", "overspill-turns"):
        # the conversation is past the window's prompt budget: overspill had to extract
        assert all(r["growths"] >= 1 for r in rows if r["condition"] == condition), condition
    asked = [row for row in rows if row["status"] == "ok"]
    assert all(isinstance(row["correct"], bool) for row in asked)
    assert "tune seeds 1, tune templates: recall by probe kind" in done.stdout
