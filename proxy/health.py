"""`GET /health`: every deployment of the config asked for one token, as LiteLLM's model
health check asks them (`/health/liveness` and `/health/readiness` never call a model).

Each deployment (a `model_list` entry) gets one call of its own, never failed over to another:
a chat model (or one whose mode nobody knows) a one-token chat completion, an embedding model
an embedding of one word, a completion model a one-token legacy completion. A chat check goes
through the model layers as overspill's own calls do, so an Ollama deployment is asked with the
window it runs with (a call without it would make Ollama reload the model). The answer is
LiteLLM's: `healthy_endpoints` and `unhealthy_endpoints` (each with the model's name, its
upstream model, the seconds it took, and for an unhealthy one the error and the status
overspill would answer with), their counts, and `unchecked_endpoints` for what no call can
check (a wildcard entry without LiteLLM's `model_info.health_check_model`, the name a client
would send that it is checked with; a mode overspill serves no API of; a spent own-token
budget). A deployment's `model_info.health_check_timeout` bounds its check, as in LiteLLM.

Who may ask: any key the API routes take, for the models that key may use; only the master key
(or anyone on an open gateway, which serves its own machine) sees each deployment's api_base.
`?model=NAME` checks one model's deployments (an alias's target's, or the one a wildcard
serves NAME with) and answers 503 when none is healthy, as LiteLLM does.

The calls are bounded: at most `AT_ONCE` at a time, each `CHECK_SECONDS` at most, one per
deployment; each is counted in the caller's own-token usage (kernel/usage.py), so a tenant's
budget bounds what its checks spend.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from time import perf_counter
from typing import Any

import orjson

from kernel import redaction
from kernel.config import ModelEntry, Settings
from kernel.errors import ModelNotFound, OverspillError
from kernel.spending import OverBudget, Spend
from kernel.types import Complete
from kernel.wildcards import is_wildcard
from providers.model_info import apis_served, mode_of
from proxy.keys import Caller
from proxy.system import System, usable, why_unusable

CHECK_SECONDS = 60.0
"""How long one deployment's check may take unless its `model_info.health_check_timeout`
says (LiteLLM's default, `HEALTH_CHECK_TIMEOUT_SECONDS`)."""
AT_ONCE = 8
"""How many deployments are checked at a time."""
PROBE = "ping"
"""What each check sends: one word, answered with one token."""


@dataclass(frozen=True, slots=True)
class Deployment:
    """One deployment to check: the model name the router serves it under, its entry, the
    API its check calls (None: no call can check it, `why` says why), and its place among
    that name's deployments (None: it cannot be called, `why` says why)."""

    name: str
    entry: ModelEntry
    api: str | None
    index: int | None
    why: str | None = None


def planned(
    settings: Settings,
    caller: Caller,
    only: str | None,
    served: Callable[[str], Sequence[ModelEntry]],
) -> list[Deployment]:
    """The deployments a health check asks about: every entry of the models `caller` may
    use, or those serving `only` (ModelNotFound when none does; the caller's refusal when it
    may not use it). `served(name)`: the entries a wildcard serves `name` with."""
    if only is None:
        groups = _groups(settings.model_list).items()
        return [d for name, entries in groups if caller.allows(name)
                for d in _group_checks(name, entries, served)]  # fmt: skip
    caller.check_model(only)
    target = only
    alias = settings.router_settings.model_group_alias.get(only)
    if alias is not None:
        target = alias.model
    entries = _groups(settings.model_list).get(target) or list(served(target))
    if not entries:
        raise ModelNotFound(
            f"model {only!r} is not served by overspill: GET /v1/models lists the models this "
            "key may use",
            param="model",
        )
    return _group_checks(target, entries, served)


def _group_checks(
    name: str, entries: Sequence[ModelEntry], served: Callable[[str], Sequence[ModelEntry]]
) -> list[Deployment]:
    """The checks of the deployments serving `name`: a wildcard's by its stand-in name."""
    return _stand_ins(name, entries, served) if is_wildcard(name) else _checks(name, entries)


def _groups(model_list: Sequence[ModelEntry]) -> dict[str, list[ModelEntry]]:
    """The entries of each `model_name`, in the config's order (a wildcard's alone)."""
    groups: dict[str, list[ModelEntry]] = {}
    for entry in model_list:
        groups.setdefault(entry.model_name, []).append(entry)
    return groups


def _stand_ins(
    name: str, entries: Sequence[ModelEntry], served: Callable[[str], Sequence[ModelEntry]]
) -> list[Deployment]:
    """A wildcard's checks: of the name its `model_info.health_check_model` gives (LiteLLM's
    key), on the deployments serving that name; unchecked without one, or when the wildcard
    does not serve it."""
    asked = sorted({str(e.model_info["health_check_model"]) for e in entries
                    if e.model_info.get("health_check_model") is not None})  # fmt: skip
    found = [check for model in asked for check in _checks(model, served(model))]
    if found:
        return found
    why = (
        f"a wildcard: GET /health?model=NAME checks a model {name!r} serves, or set "
        "model_info.health_check_model to one"
        if not asked
        else f"model_info.health_check_model {', '.join(asked)} is not a name {name!r} serves"
    )
    return [Deployment(name, entry, None, None, why) for entry in entries]


def _checks(name: str, entries: Sequence[ModelEntry]) -> list[Deployment]:
    """One check per entry serving `name` (no wildcard): the usable ones numbered as the
    router's group numbers them (build_providers and System.expand keep the usable ones, in
    order)."""
    found = []
    index = 0
    for entry in entries:
        api = probe_api(entry, name)
        if not usable(entry):
            found.append(Deployment(name, entry, api, None, why_unusable([entry])))
            continue
        none = f"mode {mode_of(entry, name)!r}: overspill serves none of its APIs"
        found.append(Deployment(name, entry, api, index, None if api else none))
        index += 1
    return found


def probe_api(entry: ModelEntry, name: str) -> str | None:
    """The API a check of `entry` calls: chat for a chat model or one whose mode nobody
    knows, else embeddings or completions, whichever its mode serves; None for none."""
    apis = apis_served(entry, name)
    if apis is None or "chat" in apis:
        return "chat"
    return next((api for api in ("embeddings", "completions") if api in apis), None)


async def health_body(
    system: System, caller: Caller, admin: bool, only: str | None
) -> tuple[int, bytes]:
    """The `/health` answer (status, body) for `caller`; `admin`: it sees api_base."""
    wildcards = system.wildcards
    checks = planned(system.settings, caller, only, wildcards.match if wildcards else _none)
    gate = asyncio.Semaphore(AT_ONCE)
    spend = Spend(caller.tenant)  # the request's: the tenant's budget is read once
    results = await asyncio.gather(*(_checked(system, spend, d, gate) for d in checks))
    lists: dict[str, list[dict[str, Any]]] = {"healthy": [], "unhealthy": [], "unchecked": []}
    for deployment, (verdict, details) in zip(checks, results, strict=True):
        item: dict[str, Any] = {
            "model_name": deployment.name,
            "model": deployment.entry.litellm_params.model,
        }
        if admin and deployment.entry.litellm_params.api_base:
            item["api_base"] = deployment.entry.litellm_params.api_base
        lists[verdict].append({**item, **details})
    body = {
        "healthy_endpoints": lists["healthy"],
        "unhealthy_endpoints": lists["unhealthy"],
        "unchecked_endpoints": lists["unchecked"],
        "healthy_count": len(lists["healthy"]),
        "unhealthy_count": len(lists["unhealthy"]),
    }
    status = 503 if only is not None and not lists["healthy"] else 200
    return status, redaction.redactor.redact_bytes(orjson.dumps(body))


async def _checked(
    system: System, spend: Spend, deployment: Deployment, gate: asyncio.Semaphore
) -> tuple[str, Mapping[str, Any]]:
    """("healthy" | "unhealthy" | "unchecked", what to say of it) for one deployment."""
    if deployment.api is None:
        return "unchecked", {"reason": deployment.why}
    if deployment.index is None:
        return "unhealthy", {"error": deployment.why, "status": 503}
    ask = _ask(system, deployment, spend)
    seconds = float(deployment.entry.model_info.get("health_check_timeout") or CHECK_SECONDS)
    async with gate:
        started = perf_counter()
        try:
            await asyncio.wait_for(ask([{"role": "user", "content": PROBE}], max_tokens=1),
                                   seconds)  # fmt: skip
        except OverBudget as refused:
            return "unchecked", {"reason": str(refused)}
        except TimeoutError:
            error = f"no answer within {seconds:g} seconds"
            return "unhealthy", {"error": error, "status": 504, **_took(started)}
        except OverspillError as failed:
            details = {"error": failed.message, "status": failed.http_status()}
            return "unhealthy", {**details, **_took(started)}
    return "healthy", _took(started)


def _none(name: str) -> list[ModelEntry]:
    return []


def _took(started: float) -> dict[str, float]:
    return {"seconds": round(perf_counter() - started, 3)}


def _ask(system: System, deployment: Deployment, spend: Spend) -> Complete:
    """The one call that checks `deployment`, counted in `spend`'s tenant's usage."""
    assert deployment.api is not None
    assert deployment.index is not None
    return system.internal.probe(
        deployment.name, deployment.index, deployment.entry, spend, deployment.api
    )
