"""Shadow mode: every layer decides and reports what it would do, and the request goes
upstream unchanged, so a team can watch overspill on live traffic before it touches a prompt.

On for a model (`context.shadow: true`) or for a client key (`client_keys[].shadow: true`),
resolved at the edge into `RequestContext.shadow`. Each layer then plans as it would (windows,
budgets, the cache's entries, the documents' placement) without changing the request, writing
the store or calling a model, and reports its decision as a `shadow-<layer>` note (the
`x-overspill-shadow-<layer>` header and the request's log line) and in
`overspill_shadow_decisions_total{model,layer,decision}`:

    documents          would-append (placed/received, how), would-refuse
    observation_masking  would-mask (how many old tool results, the tokens it would save)
    history_splice     would-splice, would-grow-now, would-grow-after (tokens before → after)
    overflow_recovery  would-recover (on the upstream's overflow, which the client receives)
    ollama_window      would-set-num-ctx, would-refuse

A request's `documents` cannot go upstream as they are (no upstream knows the field): in shadow
mode they go as one plain batch, every document whole in the order sent, where the layer
would put its batch.
"""

from __future__ import annotations

from kernel import metrics
from kernel.types import RequestContext


def would(ctx: RequestContext, layer: str, decision: str, detail: str = "") -> None:
    """Report what `layer` would have done (`decision` is from a short fixed list)."""
    ctx.notes[f"shadow-{layer}"] = f"{decision} {detail}".strip()
    model = ctx.model.model_name if ctx.model is not None else metrics.NO_MODEL
    metrics.shadow_decision(model, layer, decision)
