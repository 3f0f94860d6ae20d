"""The documentation stays true to the code: every config setting is described, the generated
references name every setting and metric, and the root documents' links lead somewhere.

The site itself is built with warnings as errors by `make test` (`mkdocs build --strict`)."""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path
from types import ModuleType

import pytest

from kernel import metrics
from kernel.config_loading import parse_config

ROOT = Path(__file__).resolve().parents[1]


def load_hooks() -> ModuleType:
    """docs/hooks.py, the mkdocs hook that generates the reference pages."""
    spec = importlib.util.spec_from_file_location("docs_hooks", ROOT / "docs" / "hooks.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["docs_hooks"] = module
    spec.loader.exec_module(module)
    return module


hooks = load_hooks()


def test_every_config_setting_has_a_description() -> None:
    """A setting without `Field(description=...)` or a docstring under it fails here."""
    undescribed = [
        f"{section.path or '(top level)'}.{name} ({section.model.__name__})"
        for section in hooks.config_sections()
        for name, _ in section.fields()
        if not hooks.field_description(section.model, name)
    ]
    assert undescribed == []


def test_the_configuration_reference_has_a_row_per_setting() -> None:
    """Each block of the config is a section, and each of its settings a row in it."""
    page = hooks.render_configuration()
    sections = page.split("\n### ")
    paths = [section.path for section in hooks.config_sections()]
    assert {"", "model_list[]", "model_list[].context", "general_settings.store"} <= set(paths)
    assert "documents.rules[]" in paths
    for section, text in zip(hooks.config_sections(), sections, strict=True):
        assert f"{{#{section.anchor}}}" in text.splitlines()[0]
        rows = re.findall(r"^\| `(\w+)` \|", text, re.MULTILINE)
        assert rows == [name for name, _ in section.fields()]


def test_a_row_shows_type_default_bounds_and_description() -> None:
    """`context.compact_at` reads as a number, 0.7 by default, in (0, 1], with its meaning."""
    page = hooks.render_configuration()
    row = next(line for line in page.splitlines() if line.startswith("| `compact_at` |"))
    cells = [cell.strip() for cell in row.strip("|").split(" | ")]
    assert cells[1:4] == ["number", "`0.7`", "> 0, ≤ 1"]
    assert "background" in cells[4]


def test_the_loaders_own_fields_are_not_settings() -> None:
    """`missing_env` is filled by the loader: it is not offered to users as a setting."""
    entry = next(s for s in hooks.config_sections() if s.path == "model_list[]")
    assert "missing_env" not in dict(entry.fields())
    assert "model_name" in dict(entry.fields())


def test_the_metrics_reference_lists_every_registered_metric() -> None:
    """The generated table and the registry name the same metrics, each with its labels (the
    process collectors a serving worker adds are prometheus-client's, not listed)."""
    registered = {
        family.name for family in metrics.REGISTRY.collect() if family.name.startswith("overspill_")
    }
    documented = {doc.name.removesuffix("_total") for doc in hooks.metric_docs()}
    assert documented == registered
    page = hooks.render_metrics()
    requests = next(line for line in page.splitlines() if "`overspill_requests_total`" in line)
    assert "counter" in requests
    assert "`model`, `status`, `stream`" in requests


def test_an_included_root_file_has_its_links_rewritten(tmp_path: Path) -> None:
    """A link to docs/... or to another root page works from the page that includes it."""
    text = (
        "[rows](docs/eval/changes.md#x25) [arch](ARCHITECTURE.md) [web](https://example.org/a) "
        "[here](#top) [code](kernel/config.py)"
    )
    rewritten = hooks.relink(text, "eval/index.md")
    assert "[rows](changes.md#x25)" in rewritten
    assert "[arch](../architecture.md)" in rewritten
    assert "[web](https://example.org/a)" in rewritten
    assert "[here](#top)" in rewritten
    assert "[code](kernel/config.py)" in rewritten


def test_an_unknown_marker_stops_the_build() -> None:
    """A page asking for a generated part that does not exist is an error, not a blank."""
    with pytest.raises(ValueError, match="no generated part named 'nonesuch'"):
        hooks.expand("<!-- generated: nonesuch -->", "reference/x.md")


def test_root_documents_link_only_to_files_that_exist() -> None:
    """Every relative link of README.md, ARCHITECTURE.md and CHANGELOG.md leads to a file of
    the repository."""
    targets = [
        (name, target)
        for name in ("README.md", "ARCHITECTURE.md", "CHANGELOG.md")
        for _, target, _ in hooks.LINK.findall((ROOT / name).read_text(encoding="utf-8"))
        if "://" not in target
    ]
    assert ("README.md", "docs/getting-started.md") in targets
    assert [(name, t) for name, t in targets if not (ROOT / t).exists()] == []


def error_codes() -> set[str]:
    """Every error code a client can receive: the `code` of each class of the error tree, in
    kernel/errors.py or beside a provider (read from the source, so no module need be loaded)."""
    found: set[str] = set()
    for package in ("kernel", "middleware", "providers", "proxy"):
        for path in (ROOT / package).rglob("*.py"):
            text = path.read_text(encoding="utf-8")
            found |= set(
                re.findall(r'^    code(?:: ClassVar\[str \| None\])? = "(\w+)"$', text, re.M)
            )
    return found


def test_the_api_page_lists_every_error_code() -> None:
    """A code added to the error tree without its row in the API's error table fails here."""
    page = (ROOT / "docs" / "api" / "index.md").read_text(encoding="utf-8")
    listed = set(re.findall(r"^\| [0-9x]+ \| `(\w+)` \|", page, re.MULTILINE))
    assert {"context_length_exceeded", "unsupported_parameter"} <= error_codes()
    assert error_codes() - listed == set()


def yaml_blocks() -> list[tuple[str, str]]:
    """Every fenced YAML block of the docs and the README that is a whole config."""
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
    return [
        (page.relative_to(ROOT).as_posix(), block)
        for page in pages
        for block in re.findall(r"```yaml\n(.*?)```", page.read_text(encoding="utf-8"), re.S)
        if block.startswith("model_list:")
    ]


@pytest.mark.parametrize(("page", "block"), yaml_blocks())
def test_a_config_shown_in_the_docs_loads(page: str, block: str) -> None:
    """A config example the docs show is one overspill accepts, without a warning beyond
    the secrets it reads from the environment."""
    loaded = parse_config(block, page, {})
    unexpected = [line for line in loaded.warnings if "environment variable" not in line]
    assert unexpected == []
