#!/usr/bin/env bash
# `make bench-litellm`: the litellm path (an `anthropic/...` model) measured in one run against
# the LiteLLM proxy serving the same model, both in front of scripts/mock_anthropic.py (Anthropic's
# Messages API, JSON and SSE), with the gateway harness (../shared/bench) as the orchestrator:
# CPU per request at saturation (wrk, proxy pinned to CPU 1, load and mocks on CPU 0) and p50
# at a moderate rate, JSON and SSE x small and large bodies. Also measured in the same run: the
# OpenAI-wire fast path against the harness's own mock, for reference
# (LITELLM_PATH_OPENAI=0 leaves it out). OVERSPILL_BEFORE=<dir with an older checkout> adds
# that build as the target `before`; OVERSPILL_SRC=<dir> measures another checkout than this
# one as `overspill` (e.g. `git archive HEAD | tar -x -C dir`, so editing meanwhile is safe). Extra arguments go to the harness (e.g. --quick, --conc 16).
# Ends by printing every overspill target's CPU per request and p50 as a ratio to LiteLLM's.
set -euo pipefail
cd "$(dirname "$0")/.."
BENCH=${BENCH_DIR:-../shared/bench}
[ -x "$BENCH/run_gateway_bench.sh" ] || { echo "no gateway bench at $BENCH (set BENCH_DIR)" >&2; exit 1; }
export LITELLM_MASTER_KEY=${LITELLM_MASTER_KEY:-sk-bench-$(date +%s)}
python="$PWD/.venv/bin/python"
dir="$PWD/var/bench-litellm"
mkdir -p "$dir"
port=$("$python" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
export ANTHROPIC_MOCK_BASE="http://127.0.0.1:$port"
taskset -c "${GEN_CPUS:-0}" "$python" scripts/mock_anthropic.py --port "$port" > "$dir/mock_anthropic.log" 2>&1 &
mock=$!
trap 'kill $mock 2>/dev/null || true' EXIT
for _ in $(seq 50); do
    curl -sf -o /dev/null "$ANTHROPIC_MOCK_BASE/v1/messages" -d '{"model":"m"}' && break
    sleep 0.1
done

cat > "$dir/litellm-anthropic.yaml" <<YAML
# The LiteLLM proxy's anchor config, with the model on Anthropic's wire.
model_list:
  - model_name: mock-model
    litellm_params:
      model: anthropic/mock-model
      api_base: os.environ/ANTHROPIC_MOCK_BASE
      api_key: sk-mock
      timeout: 60
litellm_settings:
  drop_params: true
  set_verbose: false
  telemetry: false
YAML
overspill_config() {  # $1: the model, $2: its api_base
    cat <<YAML
model_list:
  - model_name: mock-model
    litellm_params:
      model: $1
      api_base: $2
      api_key: sk-mock
      timeout: 60
general_settings:
  master_key: os.environ/LITELLM_MASTER_KEY
  store: {path: $dir/store}
middleware: [documents, history_splice, overflow_recovery, ollama_window]
YAML
}
overspill_config anthropic/mock-model os.environ/ANTHROPIC_MOCK_BASE > "$dir/overspill-anthropic.yaml"
overspill_config openai/mock-model os.environ/UPSTREAM_BASE > "$dir/overspill-openai.yaml"

serve() {  # $1: target name, $2: source checkout, $3: config
    echo "$1=cmd:env -C $2 $python -m proxy serve --config $3 --host {host} --port {port}"
}
targets=(--target "litellm=cmd:{venv}/bin/litellm --config $dir/litellm-anthropic.yaml --host {host} --port {port}")
src=${OVERSPILL_SRC:-$PWD}
targets+=(--target "$(serve overspill "$src" "$dir/overspill-anthropic.yaml")")
if [ -n "${OVERSPILL_BEFORE:-}" ]; then
    targets+=(--target "$(serve before "$OVERSPILL_BEFORE" "$dir/overspill-anthropic.yaml")")
fi
if [ "${LITELLM_PATH_OPENAI:-1}" != 0 ]; then
    targets+=(--target "$(serve openai-wire "$src" "$dir/overspill-openai.yaml")")
fi
out="$dir/run-$(date +%Y%m%d-%H%M%S)"
"$BENCH/run_gateway_bench.sh" "${targets[@]}" --out "$out" "$@"
cp "$out/summary.md" "$out/results.json" "$dir/"
echo "summary: $dir/summary.md"
ticks=$(awk '{print $14 + $15}' "/proc/$mock/stat")
echo "the Anthropic mock used $(( ticks / $(getconf CLK_TCK) )) s of CPU over the whole run (on CPU ${GEN_CPUS:-0})"
"$python" scripts/litellm_path_ratios.py "$dir/results.json"
