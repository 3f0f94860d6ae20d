# Sourced by the gateway-bench wrappers (bench.sh, bench_servers.sh): checks the harness is
# there, fixes the master key for the run and writes overspill's config for it to $config
# (every layer named, so an older checkout runs the same layers: "all layers, nothing to do").
BENCH=${BENCH_DIR:-../shared/bench}
[ -x "$BENCH/run_gateway_bench.sh" ] || { echo "no gateway bench at $BENCH (set BENCH_DIR)" >&2; exit 1; }
export LITELLM_MASTER_KEY=${LITELLM_MASTER_KEY:-sk-bench-$(date +%s)}
mkdir -p var/bench
config="$PWD/var/bench/overspill-bench.yaml"
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
