#!/usr/bin/env bash
# `make bench`: overspill's per-request overhead, measured in one run beside the direct mock,
# the LiteLLM proxy and the minimal passthrough (../shared/bench), with httpx (the reference) and
# with aiohttp (the client overspill's fast path uses). Extra arguments go to the
# harness (e.g. --quick). The summary is copied to var/bench/summary.md. OVERSPILL_SRC measures
# another checkout of the code (e.g. a git worktree of a commit) with this venv.
set -euo pipefail
cd "$(dirname "$0")/.."
BENCH=${BENCH_DIR:-../shared/bench}
[ -x "$BENCH/run_gateway_bench.sh" ] || { echo "no gateway bench at $BENCH (set BENCH_DIR)" >&2; exit 1; }
export LITELLM_MASTER_KEY=${LITELLM_MASTER_KEY:-sk-bench-$(date +%s)}
mkdir -p var/bench
config="$PWD/var/bench/overspill-bench.yaml"
# Every layer runs (today's default, named so that OVERSPILL_SRC=<an older checkout> runs the
# same layers), so the figure is "all layers, nothing to do".
src=${OVERSPILL_SRC:-$PWD}
python="$PWD/.venv/bin/python"
cat > "$config" <<YAML
model_list:
  - model_name: mock-model
    litellm_params:
      model: openai/mock-model
      api_base: os.environ/UPSTREAM_BASE
      api_key: sk-mock
      timeout: 60
general_settings:
  master_key: os.environ/LITELLM_MASTER_KEY
  store: {path: $PWD/var/bench/store}
middleware: [documents, history_splice, overflow_recovery, ollama_window]
YAML
before=$(ls -1d /tmp/gwbench-results/*/ 2>/dev/null | sort | tail -1 || true)
"$BENCH/run_gateway_bench.sh" --target direct --target litellm --target passthrough \
    --target passthrough-aiohttp \
    --target "overspill=cmd:env -C $src $python -m proxy serve --config $config --host {host} --port {port}" "$@"
latest=$(ls -1d /tmp/gwbench-results/*/ | sort | tail -1)
if [ "$latest" != "$before" ]; then
    cp "$latest/summary.md" "$latest/results.json" var/bench/
    echo "summary: var/bench/summary.md (from $latest)"
fi
