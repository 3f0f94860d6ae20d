"""ARCHITECTURE.md names every module's room: a module added, moved or removed without its row
in "Every module's room" fails here, so the page stays the truth about the tree."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
ROW = re.compile(r"^\| `([\w/]+\.py)` \|", re.MULTILINE)


BESIDE = ("bench",)
"""Packages with a room per module whose imports `lint-imports` does not check: the benchmarks."""


def pyproject() -> dict[str, Any]:
    """pyproject.toml, parsed."""
    return tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))


def packages() -> list[str]:
    """The top-level packages whose imports `lint-imports` checks (pyproject.toml), and the
    benchmarks beside them."""
    names: list[str] = pyproject()["tool"]["importlinter"]["root_packages"]
    return [*names, *BESIDE]


def modules_on_disk() -> list[str]:
    """Every module of those packages (an `__init__.py` is its package, not a room)."""
    return sorted(
        path.relative_to(ROOT).as_posix()
        for package in packages()
        for path in (ROOT / package).rglob("*.py")
        if path.name != "__init__.py"
    )


def rooms() -> list[str]:
    """The modules ARCHITECTURE.md's "Every module's room" section has a row for."""
    text = (ROOT / "ARCHITECTURE.md").read_text(encoding="utf-8")
    section = text.split("## Every module's room", 1)[1].split("\n## ", 1)[0]
    return ROW.findall(section)


def test_every_module_has_a_room() -> None:
    """Each module under cli/, proxy/, evaluation/, middleware/, providers/, kernel/ and
    bench/ has its row."""
    floors = {"cli", "proxy", "evaluation", "middleware", "providers", "kernel", "bench"}
    assert floors <= set(packages())
    assert sorted(set(modules_on_disk()) - set(rooms())) == []


def test_every_room_is_a_module() -> None:
    """No row names a module that is gone, and none is listed twice."""
    listed = rooms()
    assert sorted(set(listed) - set(modules_on_disk())) == []
    assert len(listed) == len(set(listed))


def test_the_command_sits_above_both_server_and_evaluation() -> None:
    """The `overspill` console script is cli/'s, the floor lint-imports puts above proxy/ and
    evaluation/, so neither has to import the other to offer its commands."""
    config = pyproject()
    assert config["project"]["scripts"]["overspill"] == "cli.main:main"
    floors = config["tool"]["importlinter"]["contracts"][0]
    assert floors["type"] == "layers"
    assert floors["layers"][:3] == ["cli", "evaluation", "proxy"]
    assert "ignore_imports" not in floors
