#!/usr/bin/env bash
# `make run`: start the local model servers and overspill on $PORT with config.yaml; Ctrl-C
# stops them all. Two llama-servers on the same SmolLM2 weights: chat and completions on
# $LOCAL_MODEL_PORT (2048-token window), embeddings on $LOCAL_EMBED_PORT (--embeddings, mean
# pooling, 512-token inputs), so that an embeddings call never evicts the chat server's cached
# prompt (each server has one slot). Flash attention is off: on the CPU it reads a prompt that
# extends a cached one (each turn of a conversation) about four times slower.
set -euo pipefail
cd "$(dirname "$0")/.."
LOCAL_MODEL_PORT=${LOCAL_MODEL_PORT:-8081}
LOCAL_EMBED_PORT=${LOCAL_EMBED_PORT:-8082}
CONFIG=${CONFIG:-config.yaml}
eval "$(scripts/local-model.sh)"
mkdir -p var
pids=()
trap 'kill "${pids[@]}" 2>/dev/null || true' EXIT INT TERM

serve() {  # serve NAME PORT LOG FLAGS...: one llama-server, waited for until it answers
    local name=$1 port=$2 log=$3 pid
    shift 3
    "$LLAMA_SERVER" -m "$LLAMA_MODEL" -a "$name" -np 1 -t "$(nproc)" \
        --host 127.0.0.1 --port "$port" --no-webui -fa off "$@" > "$log" 2>&1 &
    pid=$!
    pids+=("$pid")
    for _ in $(seq 1 300); do
        if python3 -c "import urllib.request as u; u.urlopen('http://127.0.0.1:$port/health', timeout=1)" \
            2>/dev/null; then
            echo "local model $name ready on http://127.0.0.1:$port (log: $log)" >&2
            return
        fi
        kill -0 "$pid" 2>/dev/null || { echo "llama-server failed: see $log" >&2; exit 1; }
        sleep 0.2
    done
    echo "llama-server $name not ready after 60 s: see $log" >&2
    exit 1
}

serve smollm2-135m "$LOCAL_MODEL_PORT" var/llama-server.log -c 2048
serve smollm2-135m-embed "$LOCAL_EMBED_PORT" var/llama-embed.log -c 512 --embeddings --pooling mean
.venv/bin/overspill serve --config "$CONFIG" ${PORT:+--port "$PORT"}
