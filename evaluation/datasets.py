"""Outside datasets read from a path (a file, or a folder of them), never committed. Pure."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

__all__ = ["json_files"]


def json_files(
    path: Path, dataset: str, order: Callable[[Path], Any] = lambda p: p.name
) -> list[tuple[Path, Any]]:
    """Each JSON file at `path` (the file, or each ``.json`` of the folder in `order`) with
    its parsed content. Raises ValueError naming the file that cannot be read, or the folder
    that holds no `dataset` file."""
    if path.is_dir():
        files = sorted(path.glob("*.json"), key=order)
        if not files:
            raise ValueError(f"{path}: no {dataset} .json file in this folder")
        return [found for file in files for found in json_files(file, dataset)]
    try:
        return [(path, json.loads(path.read_text(encoding="utf-8")))]
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"{path}: cannot be read as JSON ({exc})") from None
