"""In-process CPU per request: overspill's app against the minimal passthrough's, same upstream.

Every shipped layer configured, nothing to do; the gateway bench's four chat bodies, one group
each: overspill's row over the passthrough's is the ratio to read. `overspill-1000-keys` has
1,000 client keys configured and a tenant's key presented (one hash whatever their number).
Each round is 20 requests.
"""

from __future__ import annotations

import gc
import logging

import pytest

from bench.micro.apps import BODIES, ASGIApp, call, overspill_app, passthrough_app
from bench.micro.conftest import Timed
from kernel.store import DiskHistoryStore

APPS = ("passthrough", "overspill", "overspill-1000-keys")


@pytest.fixture(scope="module")
def apps(store: DiskHistoryStore) -> dict[str, ASGIApp]:
    logging.getLogger("overspill").setLevel(logging.INFO)
    made: dict[str, ASGIApp] = {
        "passthrough": passthrough_app(),
        "overspill": overspill_app(store),
        "overspill-1000-keys": overspill_app(store, client_keys=1000),
    }
    gc.collect()  # the startup's garbage, once, before anything is measured
    return made


@pytest.mark.parametrize("app", APPS)
@pytest.mark.parametrize("body", list(BODIES))
def test_request(timed: Timed, apps: dict[str, ASGIApp], body: str, app: str) -> None:
    """One POST through the app, its answer read whole."""
    key = "sk-client-999" if app == "overspill-1000-keys" else "sk-bench"
    data = BODIES[body]
    timed(f"overhead: {body}", lambda: call(apps[app], data, key), times=20)
