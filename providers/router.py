"""Spreads requests over a model name's deployments and fails over before the first byte.

Deployments sharing a `model_name` take turns (round robin). When one fails in a way another
may not (unreachable, timed out, rate limited, 5xx), the next is tried, each at most once per
request. Errors that another deployment would repeat (the request is invalid, the context
window is exceeded) are raised at once. Streams are primed by the providers, so a failover
never happens after content has reached the client.
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Mapping, Sequence

from kernel.errors import (
    ContextWindowExceeded,
    ModelNotFound,
    UpstreamError,
    UpstreamRejected,
)
from kernel.types import (
    ChatRequest,
    ChatResponse,
    Provider,
    RequestContext,
)

log = logging.getLogger("overspill.router")


class Router:
    """The innermost step of the pipeline: picks a deployment and calls its provider."""

    def __init__(self, deployments: Mapping[str, Sequence[Provider]]) -> None:
        self.deployments = {name: tuple(group) for name, group in deployments.items()}
        self._turns = {name: itertools.count() for name in self.deployments}

    async def complete(self, request: ChatRequest, ctx: RequestContext) -> ChatResponse:
        """Send the request to a deployment of `request.model`."""
        group = self.deployments.get(request.model)
        if not group:
            raise ModelNotFound(f"no deployment serves model {request.model!r}", param="model")
        if len(group) == 1:
            return await group[0].complete(request, ctx)
        start = next(self._turns[request.model]) % len(group)
        order = group[start:] + group[:start]
        for attempt, provider in enumerate(order, 1):
            try:
                return await provider.complete(request, ctx)
            except (ContextWindowExceeded, UpstreamRejected):
                raise
            except UpstreamError as exc:
                if attempt == len(order):
                    raise
                log.warning(
                    "deployment failed; trying the next",
                    extra={"model": request.model, "provider": provider.name, "error": str(exc)},
                )
                ctx.note("failover", attempt)
        raise AssertionError("unreachable: the loop returns or raises")

    async def aclose(self) -> None:
        """Close every provider."""
        for group in self.deployments.values():
            for provider in group:
                await provider.aclose()
