"""LiteLLM's config format, made to fit overspill's schema before it is validated.

Any config the LiteLLM proxy accepts loads. Its `environment_variables:`, `os.environ/VAR` in
any string of the blocks overspill reads, wildcard model names and
`router_settings.model_group_alias` (both of its forms) are honoured; every other LiteLLM key is
a warning that names its YAML path and says what overspill does instead (never its value: values
may be secrets). A model whose variable is unset is a warning too (that model answers 503 until
it is set, the others keep working). `include:` is `kernel/config_includes.py`'s.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from kernel.config import LOG_LEVEL_NAMES, GeneralSettings, ModelEntry, Settings
from kernel.wildcards import Pattern

ENV_PREFIX = "os.environ/"

CALLBACKS_REASON = (
    "overspill cannot run LiteLLM callbacks (it logs one JSON line per request instead)"
)
FALLBACKS_REASON = (
    "overspill does not fall back to other model names; a conversation that outgrows the "
    "window is condensed instead"
)
DATABASE_REASON = (
    "overspill keeps no database (no virtual keys, spend logs or models stored in a "
    "database): it serves the models in model_list"
)

# Top-level keys overspill reads (`include` is merged away before validation).
HONOURED_TOP_LEVEL_KEYS = frozenset(
    {
        "model_list",
        "general_settings",
        "litellm_settings",
        "router_settings",
        "environment_variables",
        "middleware",
        "documents",
    }
)
# LiteLLM's other top-level blocks: what overspill does instead.
LITELLM_IGNORED_BLOCKS: Mapping[str, str] = {
    "guardrails": "overspill runs no guardrails",
    "callback_settings": CALLBACKS_REASON,
    "credential_list": "overspill reads credentials from litellm_params (os.environ/VAR)",
    "mcp_servers": "overspill serves no MCP tools",
    "vector_store_registry": "overspill has no vector stores",
    "files_settings": "overspill serves no /files endpoints",
    "assistant_settings": "overspill serves no assistants endpoints",
    "finetune_settings": "overspill serves no fine-tuning endpoints",
}
# litellm_settings keys overspill honours.
LITELLM_SETTINGS_SUPPORTED = frozenset({"drop_params"})
LITELLM_SETTINGS_REASONS: Mapping[str, str] = {
    "cache": "overspill does not cache responses",
    "cache_params": "overspill does not cache responses",
    "set_verbose": "overspill's logging is set by general_settings.log_level",
    "json_logs": "overspill always logs JSON lines",
    "request_timeout": (
        "overspill's upstream timeout is general_settings.request_timeout "
        "(litellm_params.timeout per model)"
    ),
    "num_retries": "overspill does not retry a deployment; it fails over to the next one once",
    "fallbacks": FALLBACKS_REASON,
    "context_window_fallbacks": FALLBACKS_REASON,
    "default_fallbacks": FALLBACKS_REASON,
    "max_budget": "overspill tracks no spend",
    "budget_duration": "overspill tracks no spend",
}
ROUTER_SETTINGS_SUPPORTED = frozenset({"model_group_alias"})
ROUTER_SETTINGS_REASONS: Mapping[str, str] = {
    "fallbacks": FALLBACKS_REASON,
    "context_window_fallbacks": FALLBACKS_REASON,
    "default_fallbacks": FALLBACKS_REASON,
}
UNUSED = "LiteLLM setting overspill does not use"
"""What a LiteLLM setting no table names gets as its reason."""
ROUTER_REASON = (
    "overspill's router sends a model's requests to its deployments in turn "
    "and fails over to the next deployment once"
)
GENERAL_SETTINGS_REASONS: Mapping[str, str] = {
    "database_url": DATABASE_REASON,
    "database_connection_pool_limit": DATABASE_REASON,
    "store_model_in_db": DATABASE_REASON,
    "store_prompts_in_spend_logs": DATABASE_REASON,
    "disable_spend_logs": DATABASE_REASON,
    "alerting": "overspill sends no alerts",
    "alerting_threshold": "overspill sends no alerts",
    "alert_types": "overspill sends no alerts",
}
# Variables `environment_variables:` may not set (LiteLLM's `_BLOCKED_ENV_KEYS`, and ours).
BLOCKED_ENV_KEYS = frozenset(
    {
        "PATH",
        "LD_PRELOAD",
        "LD_LIBRARY_PATH",
        "DYLD_LIBRARY_PATH",
        "DYLD_INSERT_LIBRARIES",
        "PYTHONPATH",
        "PYTHONSTARTUP",
        "PYTHONHOME",
        "HOME",
        "USER",
        "SHELL",
        "LOGNAME",
        "NO_PROXY",
        "no_proxy",
        "OVERSPILL_CONFIG",
    }
)


def environment_variables(
    block: Any, env: Mapping[str, str], warnings: list[str]
) -> dict[str, str]:
    """LiteLLM's `environment_variables:`: NAME: value, or NAME: os.environ/OTHER."""
    if block is None:
        return {}
    if not isinstance(block, dict):
        warnings.append("environment_variables: must be a mapping of NAME: value; ignored")
        return {}
    resolved: dict[str, str] = {}
    for key, value in block.items():
        where = f"environment_variables.{key}"
        if str(key) in BLOCKED_ENV_KEYS:
            warnings.append(f"{where}: may not be set from the config (as in LiteLLM); ignored")
        elif value is None:
            warnings.append(f"{where}: has no value; not set")
        elif isinstance(value, str) and value.startswith(ENV_PREFIX):
            var = value[len(ENV_PREFIX) :]
            if env.get(var):
                resolved[str(key)] = env[var]
            else:
                warnings.append(f"{where}: environment variable {var} is unset; not set")
        else:
            resolved[str(key)] = str(value)
    return resolved


def _reason(key: str, reasons: Mapping[str, str], default: str) -> str:
    if "callback" in key:
        return CALLBACKS_REASON
    return reasons.get(key, default)


def ignored_keys(raw: Mapping[str, Any]) -> list[str]:
    """One line per key overspill does not act on: its YAML path and what happens instead."""
    warnings = []
    for key in raw:
        if key in HONOURED_TOP_LEVEL_KEYS:
            continue
        reason = LITELLM_IGNORED_BLOCKS.get(key, "not a setting overspill knows")
        warnings.append(f"{key}: {reason}; ignored")
    warnings += _unused(
        raw, "litellm_settings", LITELLM_SETTINGS_SUPPORTED, LITELLM_SETTINGS_REASONS, UNUSED
    )
    warnings += _unused(
        raw, "router_settings", ROUTER_SETTINGS_SUPPORTED, ROUTER_SETTINGS_REASONS, ROUTER_REASON
    )
    models = raw.get("model_list")
    if isinstance(models, list):
        known_entry = set(ModelEntry.model_fields) - {"missing_env"}
        warnings += [
            f"model_list[{index}].{key}: not an overspill setting; ignored"
            for index, entry in enumerate(models)
            if isinstance(entry, dict)
            for key in entry
            if key not in known_entry
        ]
    known = frozenset(GeneralSettings.model_fields)
    warnings += _unused(raw, "general_settings", known, GENERAL_SETTINGS_REASONS, UNUSED)
    return warnings


def _unused(
    raw: Mapping[str, Any],
    block: str,
    honoured: frozenset[str],
    reasons: Mapping[str, str],
    default: str,
) -> list[str]:
    """One line per key of a block that overspill does not act on, with what it does instead."""
    keys = raw.get(block)
    if not isinstance(keys, dict):
        return []
    return [
        f"{block}.{key}: {_reason(str(key), reasons, default)}; ignored"
        for key in keys
        if key not in honoured
    ]


def normalize(raw: dict[str, Any], warnings: list[str]) -> dict[str, Any]:
    """What LiteLLM accepts but overspill's schema spells differently, made to fit."""
    out = {key: value for key, value in raw.items() if value is not None or key == "middleware"}
    if out.get("model_list") is None:
        out["model_list"] = []
    if out["model_list"] == []:
        warnings.append(
            "model_list: no models are configured; every request gets 404 model_not_found "
            "(LiteLLM can add models from its database; overspill has none)"
        )
    general = out.get("general_settings")
    if isinstance(general, dict) and "log_level" in general:
        level = general["log_level"]
        if not (isinstance(level, str) and level.lower() in LOG_LEVEL_NAMES):
            general = {k: v for k, v in general.items() if k != "log_level"}
            if level is not None:
                warnings.append(
                    f"general_settings.log_level: {level!r} is not a level overspill knows "
                    "(debug, info, warning, error); using info"
                )
            out["general_settings"] = general
    if "router_settings" in out:
        out["router_settings"] = _router_settings(out["router_settings"], warnings)
    return out


def _router_settings(block: Any, warnings: list[str]) -> dict[str, Any]:
    """`model_group_alias` in both of LiteLLM's forms; malformed entries are warned about."""
    if not isinstance(block, dict):
        warnings.append("router_settings: must be a mapping; ignored")
        return {}
    aliases = block.get("model_group_alias")
    if aliases is None:
        return {}
    if not isinstance(aliases, dict):
        warnings.append(
            "router_settings.model_group_alias: must be a mapping of alias: model_name; ignored"
        )
        return {}
    clean: dict[str, dict[str, Any]] = {}
    for alias, item in aliases.items():
        target = item.get("model") if isinstance(item, dict) else item
        if not isinstance(target, str) or not target:
            warnings.append(
                f"router_settings.model_group_alias.{alias}: needs a model_name "
                "(alias: model_name, or alias: {model: model_name, hidden: true}); ignored"
            )
            continue
        hidden = isinstance(item, dict) and item.get("hidden") is True
        clean[str(alias)] = {"model": target, "hidden": hidden}
    return {"model_group_alias": clean}


def served_aliases(settings: Settings, warnings: list[str]) -> Settings:
    """Aliases whose target is served; the others are warned about and dropped."""
    aliases = settings.router_settings.model_group_alias
    if not aliases:
        return settings
    names = set(settings.model_names())
    patterns = [Pattern.of(name) for name in settings.wildcard_names()]
    kept = {}
    for alias, item in aliases.items():
        where = f"router_settings.model_group_alias.{alias}"
        if item.model not in names and not any(p.match(item.model) is not None for p in patterns):
            warnings.append(f"{where}: {item.model!r} is not a model_name in model_list; ignored")
            continue
        if alias in names and alias != item.model:
            warnings.append(
                f"{where}: {alias!r} is also a model_name in model_list; as in LiteLLM, the "
                f"alias wins and its requests go to {item.model!r}"
            )
        kept[alias] = item
    if len(kept) == len(aliases):
        return settings
    router = settings.router_settings.model_copy(update={"model_group_alias": kept})
    return settings.model_copy(update={"router_settings": router})


def resolve_env(
    raw: dict[str, Any], env: Mapping[str, str], warnings: list[str]
) -> tuple[dict[str, Any], dict[int, list[str]]]:
    """Replace `os.environ/VAR` strings (in nested mappings and lists too) in the blocks
    overspill reads; remember which model entries miss a variable."""
    missing: dict[int, list[str]] = {}
    resolved = dict(raw)
    models = raw.get("model_list")
    if isinstance(models, list):
        resolved["model_list"] = [
            _model_entry(index, entry, env, missing, warnings) for index, entry in enumerate(models)
        ]
    for block, keys in (
        ("general_settings", None),
        ("litellm_settings", LITELLM_SETTINGS_SUPPORTED),
        ("router_settings", ROUTER_SETTINGS_SUPPORTED),
    ):
        value = raw.get(block)
        if not isinstance(value, dict):
            continue
        unset: list[tuple[str, str]] = []
        honoured: dict[str, Any] = {}
        for key, item in value.items():
            if keys is not None and key not in keys:
                honoured[key] = item
                continue
            found = _substitute(item, env, unset, f"{block}.{key}")
            if found is not None or item is None:  # an unset one leaves the default in place
                honoured[key] = found
        resolved[block] = honoured
        warnings += [
            f"{path}: environment variable {var} is unset; treated as not set"
            for path, var in unset
        ]
    return resolved, missing


def _model_entry(
    index: int,
    entry: Any,
    env: Mapping[str, str],
    missing: dict[int, list[str]],
    warnings: list[str],
) -> Any:
    """One model_list entry resolved; an unset `model` keeps its reference so the entry
    loads (marked unusable) instead of failing validation."""
    unset: list[tuple[str, str]] = []
    out = _substitute(entry, env, unset, f"model_list[{index}]")
    if not unset:
        return out
    names = list(dict.fromkeys(var for _, var in unset))
    missing[index] = names
    label = entry.get("model_name", "?") if isinstance(entry, dict) else "?"
    for var in names:
        warnings.append(
            f"model_list[{index}] ({label}): environment variable {var} is unset; "
            "requests to this deployment will fail until it is set"
        )
    if isinstance(out, dict) and isinstance(entry, dict):
        if out.get("model_name") is None and isinstance(entry.get("model_name"), str):
            out["model_name"] = entry["model_name"]
        params, original = out.get("litellm_params"), entry.get("litellm_params")
        if (
            isinstance(params, dict)
            and isinstance(original, dict)
            and params.get("model") is None
            and isinstance(original.get("model"), str)
        ):
            params["model"] = original["model"]
    return out


def _substitute(value: Any, env: Mapping[str, str], unset: list[tuple[str, str]], path: str) -> Any:
    """`value` with every `os.environ/VAR` string replaced. An unset one is left out of its
    mapping (so the setting takes its default, as if never written) and is None in a list."""
    if isinstance(value, str) and value.startswith(ENV_PREFIX):
        var = value[len(ENV_PREFIX) :]
        if env.get(var):
            return env[var]
        unset.append((path, var))
        return None
    if isinstance(value, dict):
        resolved = {k: _substitute(v, env, unset, f"{path}.{k}") for k, v in value.items()}
        return {k: v for k, v in resolved.items() if v is not None or value[k] is None}
    if isinstance(value, list):
        return [_substitute(v, env, unset, f"{path}[{i}]") for i, v in enumerate(value)]
    return value


def env_references(value: Any) -> Iterator[str]:
    """Every variable an `os.environ/VAR` string inside `value` names (for tests and tools)."""
    if isinstance(value, str) and value.startswith(ENV_PREFIX):
        yield value[len(ENV_PREFIX) :]
    elif isinstance(value, dict):
        for item in value.values():
            yield from env_references(item)
    elif isinstance(value, list):
        for item in value:
            yield from env_references(item)
