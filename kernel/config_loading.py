"""Loading config.yaml: the file read, LiteLLM's format resolved, the schema validated, once at
startup.

The file is LiteLLM's format (`model_list` with `model_name` + `litellm_params`, secrets as
`os.environ/VAR`) plus overspill's own blocks: a per-model `context:` block, `general_settings`
and a `middleware:` list. A bad file raises `ConfigError` with one line per problem, each
naming its YAML path (`model_list[2].litellm_params.model: field required`); what is only
ignored is a warning the server logs at startup.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from kernel import config_litellm
from kernel.client_keys import key_problems, model_problems
from kernel.config import Settings
from kernel.config_includes import INCLUDE_KEY, IncludeError, resolve_includes


class ConfigError(Exception):
    """config.yaml cannot be used; `problems` holds one line per problem."""

    def __init__(self, path: str, problems: list[str]) -> None:
        super().__init__(f"{path}: invalid configuration\n" + "\n".join(problems))
        self.path = path
        self.problems = problems


@dataclass(frozen=True)
class LoadedConfig:
    """Validated settings plus the warnings to log at startup."""

    settings: Settings
    warnings: list[str] = field(default_factory=list)
    environment: Mapping[str, str] = field(default_factory=dict)
    """`environment_variables:` resolved: the server sets them before it builds providers
    (LiteLLM does the same), so litellm's own lookups (`AWS_REGION_NAME`, ...) see them."""


def load_config(path: str | os.PathLike[str], env: Mapping[str, str] | None = None) -> LoadedConfig:
    """Read, resolve and validate a config file; raises ConfigError listing every problem."""
    name = str(path)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(name, [f"cannot read the file: {exc.strerror or exc}"]) from exc
    return parse_config(text, name, os.environ if env is None else env, base=Path(path))


def parse_config(
    text: str, name: str, env: Mapping[str, str], *, base: Path | None = None
) -> LoadedConfig:
    """Validate YAML text (see load_config); `include:` paths are relative to `base`."""
    raw = _read_yaml(text, name)
    if INCLUDE_KEY in raw:
        root = (base or Path(name)).absolute()
        try:
            raw = resolve_includes(raw, root, lambda path: _read_included(path, name))
        except IncludeError as exc:
            raise ConfigError(name, [str(exc)]) from None
    warnings: list[str] = []
    environment = config_litellm.environment_variables(
        raw.get("environment_variables"), env, warnings
    )
    written = raw
    raw, missing = config_litellm.resolve_env(raw, {**env, **environment}, warnings)
    warnings += config_litellm.ignored_keys(raw)
    raw = config_litellm.normalize(raw, warnings)
    try:
        settings = Settings.model_validate(raw)
    except ValidationError as exc:
        raise ConfigError(name, _describe_all(exc)) from None
    if missing:
        entries = [
            entry.model_copy(update={"missing_env": tuple(missing.get(i, ()))})
            for i, entry in enumerate(settings.model_list)
        ]
        settings = settings.model_copy(update={"model_list": tuple(entries)})
    settings = config_litellm.served_aliases(settings, warnings)
    _check_client_keys(settings, written, name, warnings)
    warnings += api_base_problems(settings)
    return LoadedConfig(settings, warnings, environment)


def api_base_problems(settings: Settings) -> list[str]:
    """A warning per deployment whose `api_base` is no http(s) URL with a host ("not a url",
    `localhost:11434` without its scheme, a documentation placeholder such as
    `<your-azure-endpoint>`): sent, each of its requests would fail as a connection error that
    names no setting, so that deployment answers 503 naming the setting instead. A warning,
    not an error, as for an unset variable: LiteLLM loads such a config, and the other
    deployments keep working."""
    return [
        f"model_list[{index}] ({entry.model_name}): {problem}; requests to this deployment "
        "are refused until it is one"
        for index, entry in enumerate(settings.model_list)
        if not entry.missing_env and (problem := entry.litellm_params.api_base_problem)
    ]


def _check_client_keys(
    settings: Settings, raw: Mapping[str, Any], name: str, warnings: list[str]
) -> None:
    """Refuse bad client keys (ConfigError); warn about the disabled ones."""
    keys = settings.general_settings.client_keys
    if not keys:
        return
    general = settings.general_settings
    problems = key_problems(keys, general.master_key)
    aliases = settings.router_settings.model_group_alias
    problems += model_problems(keys, settings.model_names(), aliases)
    general_block = raw.get("general_settings")
    written = general_block.get("client_keys") if isinstance(general_block, dict) else None
    for index, item in enumerate(keys):
        if item.key is not None:
            continue
        entry = written[index] if isinstance(written, list) and index < len(written) else None
        if isinstance(entry, dict) and entry.get("key") is not None:
            generic = f"general_settings.client_keys[{index}].key: environment variable "
            warnings[:] = [line for line in warnings if not line.startswith(generic)]
            warnings.append(
                f"general_settings.client_keys[{index}] ({item.name}): its key's environment "
                "variable is unset; this key is disabled (its requests get 401) until it is set"
            )
        else:
            problems.append(f"general_settings.client_keys[{index}].key: field required")
    if problems:
        raise ConfigError(name, problems)


def _read_yaml(text: str, name: str) -> dict[str, Any]:
    raw = _parse_yaml(text, name)
    if raw is None:
        raise ConfigError(name, ["the file is empty; it needs at least a model_list"])
    if not isinstance(raw, dict):
        raise ConfigError(name, ["the top level must be a mapping (model_list: ..., ...)"])
    return raw


def _read_included(path: Path, name: str) -> dict[str, Any]:
    """An included file (an empty one adds nothing, as in LiteLLM)."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(name, [f"include {path}: cannot read the file: {exc.strerror}"]) from exc
    raw = _parse_yaml(text, f"{name}: include {path.name}")
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise ConfigError(name, [f"include {path.name}: the top level must be a mapping"])
    return raw


def _parse_yaml(text: str, name: str) -> Any:
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
        problem = getattr(exc, "problem", None) or str(exc)
        raise ConfigError(name, [f"{where}not valid YAML: {problem}"]) from None


def _describe_all(exc: ValidationError) -> list[str]:
    """One line per problem; a list's "too short" is dropped when its items already failed."""
    errors = exc.errors()
    item_failed = {err["loc"][:1] for err in errors if len(err["loc"]) > 1}
    return [
        _describe(err)
        for err in errors
        if not (err["type"] == "too_short" and err["loc"] in item_failed)
    ]


def _describe(err: Mapping[str, Any]) -> str:
    """One problem as `yaml.path[2].field: message`."""
    path = ""
    for part in err["loc"]:
        if isinstance(part, int):
            path += f"[{part}]"
        elif part not in ("function-after",):
            path += f".{part}" if path else str(part)
    message = str(err["msg"]).replace("Tuple should", "List should")
    if err["type"] == "missing":
        message = "field required"
    elif err["type"] == "extra_forbidden":
        message = "unknown setting (check the spelling)"
    elif err["type"] in _SHAPES:
        message = _SHAPES[err["type"]]
    elif err["type"] == "value_error":
        message = message.removeprefix("Value error, ")
        if not path and _PATHED.match(message):
            return message  # a check across settings names the path it is about
    return f"{path or '(top level)'}: {message[0].lower()}{message[1:]}"


_SHAPES = {
    "tuple_type": "input should be a list (lines starting with '- ')",
    "list_type": "input should be a list (lines starting with '- ')",
    "dict_type": "input should be a mapping (key: value lines)",
    "model_type": "input should be a mapping (key: value lines)",
}
"""What a YAML author writes for pydantic's Python types: "input should be a valid tuple" or
"a valid dictionary or instance of LitellmParams" names the code, not the file."""
_PATHED = re.compile(r"[A-Za-z_][\w.\[\]]*: ")
"""A message that opens with the YAML path it is about (``model_list[0].context.x: …``)."""
