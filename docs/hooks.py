"""The documentation site's generated parts, filled in while `mkdocs build` runs (an mkdocs hook).

A page's markdown may hold markers; each is replaced before the page is rendered:

    <!-- generated: configuration -->   every config setting, read from kernel/config.py's models
    <!-- generated: metrics -->         every Prometheus metric, read from kernel/metrics.py
    <!-- include: ARCHITECTURE.md -->   a markdown file of the repository's root, its links
                                        rewritten to work from the page that includes it

So the reference pages cannot drift from the code: a setting's type, default, constraints and
description are the schema's own, a metric's name, labels and help text the registry's. A
setting's description is its `Field(description=...)`, else the docstring under its
annotation; `tests/test_docs.py` fails when one has neither.
"""

from __future__ import annotations

import ast
import functools
import inspect
import posixpath
import re
import sys
import types
import typing
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import annotated_types
from prometheus_client import Counter, Gauge, Histogram
from pydantic import BaseModel, SecretStr
from pydantic.fields import FieldInfo
from pydantic.json_schema import SkipJsonSchema
from pydantic_core import PydanticUndefined

ROOT = Path(__file__).resolve().parents[1]
MARKER = re.compile(r"<!-- (generated|include): (\S+) -->")
LINK = re.compile(r"(\]\()([^)#\s]+)((?:#[^)\s]*)?\))")
ROOT_PAGES = {
    "README.md": "index.md",
    "ARCHITECTURE.md": "architecture.md",
    "CHANGELOG.md": "changelog.md",
}
"""The root files the site includes as its own pages: a link to one goes to that page."""
LOADERS_OWN: type = SkipJsonSchema
"""A field annotated `SkipJsonSchema[...]` is set by the loader, never written in the file."""


@dataclass(frozen=True)
class Section:
    """One block of config.yaml: where it is written and the model that validates it."""

    path: str
    """As a YAML path: `model_list[].context`, `general_settings.store`; "" for the top level."""
    model: type[BaseModel]

    @property
    def anchor(self) -> str:
        """The section's id on the page (`model_list-context`)."""
        slug = re.sub(r"[^a-z0-9_]+", "-", self.path.lower()).strip("-")
        return slug or "top-level"

    @property
    def title(self) -> str:
        """The section's heading."""
        return f"`{self.path}`" if self.path else "Top level"

    def fields(self) -> Iterator[tuple[str, FieldInfo]]:
        """The settings a user writes here (a field marked SkipJsonSchema is the loader's own)."""
        for name, info in self.model.model_fields.items():
            if not any(isinstance(item, LOADERS_OWN) for item in info.metadata):
                yield name, info


def config_sections() -> list[Section]:
    """Every block of the config, the top level first, each nested block after its parent."""
    from kernel.config import Settings

    sections: list[Section] = []
    pending = [Section("", Settings)]
    while pending:
        section = pending.pop(0)
        sections.append(section)
        children = []
        for name, info in section.fields():
            nested = _nested(info.annotation, f"{section.path}.{name}".lstrip("."))
            children += [Section(path, model) for path, model in nested]
        pending[:0] = children
    return sections


def _nested(annotation: Any, path: str) -> list[tuple[str, type[BaseModel]]]:
    """The models inside a field's type, with the YAML path each is written at."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [(path, annotation)]
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is typing.Annotated:
        return _nested(args[0], path)
    if origin in (tuple, list):
        return _nested(args[0], f"{path}[]")
    if origin is dict:
        return _nested(args[1], f"{path}.<name>")
    return [found for arg in args for found in _nested(arg, path)]


def field_description(model: type[BaseModel], name: str) -> str:
    """A setting's description: `Field(description=...)`, else its docstring; "" when none."""
    info = model.model_fields[name]
    if info.description:
        return _one_paragraph(info.description)
    for cls in model.__mro__:
        if isinstance(cls, type) and issubclass(cls, BaseModel) and name in _docstrings(cls):
            return _docstrings(cls)[name]
    return ""


@functools.cache
def _docstrings(cls: type) -> dict[str, str]:
    """The string literal under each annotated attribute of a class body, by attribute."""
    found: dict[str, str] = {}
    for node in ast.walk(_module_tree(cls.__module__)):
        if not (isinstance(node, ast.ClassDef) and node.name == cls.__name__):
            continue
        for statement, after in zip(node.body, node.body[1:], strict=False):
            if (
                isinstance(statement, ast.AnnAssign)
                and isinstance(statement.target, ast.Name)
                and isinstance(after, ast.Expr)
                and isinstance(after.value, ast.Constant)
                and isinstance(after.value.value, str)
            ):
                found[statement.target.id] = _one_paragraph(after.value.value)
    return found


@functools.cache
def _module_tree(name: str) -> ast.Module:
    """A module's source, parsed once."""
    return ast.parse(inspect.getsource(sys.modules[name]))


def _one_paragraph(text: str) -> str:
    return " ".join(inspect.cleandoc(text).split())


def yaml_type(annotation: Any, sections: dict[type[BaseModel], Section]) -> str:
    """A field's type as a YAML writer reads it (`number or null`, `list of string`)."""
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is typing.Annotated:
        return yaml_type(args[0], sections)
    if origin is typing.Literal:
        return "one of " + ", ".join(f"`{_yaml_value(arg)}`" for arg in args)
    if origin in (types.UnionType, typing.Union):
        parts = [yaml_type(arg, sections) for arg in args if arg is not type(None)]
        return " or ".join(parts + (["null"] if type(None) in args else []))
    if origin in (tuple, list):
        return f"list of {yaml_type(args[0], sections)}"
    if origin is dict:
        return f"mapping of {yaml_type(args[0], sections)} to {yaml_type(args[1], sections)}"
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        section = sections[annotation]
        return f"[mapping](#{section.anchor})"
    names = {bool: "boolean", int: "integer", float: "number", str: "string"}
    if annotation is SecretStr:
        return "string (secret)"
    if annotation is Any:
        return "any"
    return names.get(annotation, getattr(annotation, "__name__", str(annotation)))


def _yaml_value(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, tuple | list):
        return "[" + ", ".join(_yaml_value(item) for item in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {_yaml_value(v)}" for k, v in value.items()) + "}"
    return str(value)


def default_of(info: FieldInfo) -> str:
    """A field's default as written in YAML; "required" when it has none."""
    if info.default_factory is not None:
        value = info.default_factory()  # type: ignore[call-arg]
        return "" if isinstance(value, BaseModel) else f"`{_yaml_value(value)}`"
    if info.default is PydanticUndefined:
        return "required"
    return f"`{_yaml_value(info.default)}`"


BOUNDS: tuple[tuple[type, str, str], ...] = (
    (annotated_types.Gt, "gt", "> {}"),
    (annotated_types.Ge, "ge", "≥ {}"),
    (annotated_types.Lt, "lt", "< {}"),
    (annotated_types.Le, "le", "≤ {}"),
    (annotated_types.MinLen, "min_length", "length ≥ {}"),
    (annotated_types.MaxLen, "max_length", "length ≤ {}"),
)
"""Each bound pydantic keeps in a field's metadata: its class, the attribute, how it reads."""


def constraints_of(info: FieldInfo) -> str:
    """A field's bounds (`> 0`, `≤ 1`, `length ≥ 1`)."""
    return ", ".join(
        text.format(getattr(item, attribute))
        for item in info.metadata
        for kind, attribute, text in BOUNDS
        if isinstance(item, kind)
    )


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def render_configuration() -> str:
    """The configuration reference: one table per block of config.yaml."""
    sections = config_sections()
    by_model = {section.model: section for section in sections}
    out = []
    for section in sections:
        out.append(f"### {section.title} {{#{section.anchor}}}\n")
        intro = inspect.cleandoc(section.model.__doc__ or "")
        if intro:
            out.append(intro + "\n")
        out.append("| setting | type | default | bounds | what it does |")
        out.append("|---|---|---|---|---|")
        for name, info in section.fields():
            out.append(
                f"| `{name}` | {_cell(yaml_type(info.annotation, by_model))} "
                f"| {_cell(default_of(info))} | {constraints_of(info)} "
                f"| {_cell(field_description(section.model, name))} |"
            )
        out.append("")
    return "\n".join(out)


@dataclass(frozen=True)
class MetricDoc:
    """One Prometheus metric as a scraper sees it."""

    name: str
    kind: str
    labels: tuple[str, ...]
    help: str


def metric_docs() -> list[MetricDoc]:
    """Every metric kernel/metrics.py defines, in the order it defines them."""
    from kernel import metrics

    found = []
    for value in vars(metrics).values():
        if isinstance(value, Counter | Gauge | Histogram):
            family = next(iter(value.describe()))
            name = f"{family.name}_total" if family.type == "counter" else family.name
            labels = tuple(value._labelnames)
            found.append(MetricDoc(name, family.type, labels, family.documentation))
    return found


def render_metrics() -> str:
    """The metrics reference: one row per metric."""
    out = ["| metric | type | labels | what it counts |", "|---|---|---|---|"]
    for metric in metric_docs():
        labels = ", ".join(f"`{label}`" for label in metric.labels)
        out.append(f"| `{metric.name}` | {metric.kind} | {labels} | {_cell(metric.help)} |")
    return "\n".join(out) + "\n"


GENERATED = {"configuration": render_configuration, "metrics": render_metrics}


def include_root(name: str, page_uri: str) -> str:
    """A root markdown file, as the page `page_uri` (relative to docs/) includes it."""
    return relink((ROOT / name).read_text(encoding="utf-8"), page_uri)


def relink(text: str, page_uri: str) -> str:
    """Markdown written at the repository's root, its links to docs/ and to the root pages
    the site includes made relative to `page_uri`. Other links are left as they are, so one
    to a file outside docs/ fails the strict build rather than leading nowhere."""
    here = posixpath.dirname(page_uri) or "."

    def rewrite(match: re.Match[str]) -> str:
        target = match.group(2)
        if "://" in target:
            return match.group(0)
        if target.startswith("docs/"):
            target = target.removeprefix("docs/")
        elif target in ROOT_PAGES:
            target = ROOT_PAGES[target]
        else:
            return match.group(0)
        return match.group(1) + posixpath.relpath(target, here) + match.group(3)

    return LINK.sub(rewrite, text)


def expand(markdown: str, page_uri: str) -> str:
    """A page's markdown with every marker replaced (an unknown marker is an error)."""

    def replace(match: re.Match[str]) -> str:
        kind, what = match.groups()
        if kind == "include":
            return include_root(what, page_uri)
        if what not in GENERATED:
            raise ValueError(f"{page_uri}: no generated part named {what!r}")
        return GENERATED[what]()

    return MARKER.sub(replace, markdown)


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    """mkdocs' hook: expand the markers of each page before it is rendered."""
    return expand(markdown, page.file.src_uri)
