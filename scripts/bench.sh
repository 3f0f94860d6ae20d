#!/usr/bin/env bash
# `make bench`: overspill's per-request overhead, measured in one run beside the direct mock,
# the LiteLLM proxy and the minimal passthrough (../shared/bench), with httpx (the reference) and
# with aiohttp (the client overspill's fast path uses). Extra arguments go to the
# harness (e.g. --quick). The summary is copied to var/bench/summary.md. OVERSPILL_SRC measures
# another checkout of the code (e.g. a git worktree of a commit) with this venv.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/bench_common.sh
src=${OVERSPILL_SRC:-$PWD}
before=$(ls -1d /tmp/gwbench-results/*/ 2>/dev/null | sort | tail -1 || true)
"$BENCH/run_gateway_bench.sh" --target direct --target litellm --target passthrough \
    --target passthrough-aiohttp \
    --target "overspill=cmd:env -C $src $python -m proxy serve --config $config --host {host} --port {port}" "$@"
latest=$(ls -1d /tmp/gwbench-results/*/ | sort | tail -1)
if [ "$latest" != "$before" ]; then
    cp "$latest/summary.md" "$latest/results.json" var/bench/
    echo "summary: var/bench/summary.md (from $latest)"
fi
