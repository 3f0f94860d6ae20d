#!/usr/bin/env bash
# `make run`: start the local model server (llama-server + SmolLM2, 2048-token window) on
# $LOCAL_MODEL_PORT and overspill on $PORT with config.yaml; Ctrl-C stops both.
set -euo pipefail
cd "$(dirname "$0")/.."
LOCAL_MODEL_PORT=${LOCAL_MODEL_PORT:-8081}
CONFIG=${CONFIG:-config.yaml}
eval "$(scripts/local-model.sh)"
mkdir -p var
"$LLAMA_SERVER" -m "$LLAMA_MODEL" -a smollm2-135m -c 2048 -np 1 -t "$(nproc)" \
    --host 127.0.0.1 --port "$LOCAL_MODEL_PORT" --no-webui > var/llama-server.log 2>&1 &
llama_pid=$!
trap 'kill $llama_pid 2>/dev/null || true' EXIT INT TERM
for _ in $(seq 1 100); do
    python3 -c "import urllib.request as u; u.urlopen('http://127.0.0.1:$LOCAL_MODEL_PORT/health', timeout=1)" \
        2>/dev/null && break
    kill -0 $llama_pid 2>/dev/null || { echo "llama-server failed: see var/llama-server.log" >&2; exit 1; }
    sleep 0.2
done
echo "local model ready on http://127.0.0.1:$LOCAL_MODEL_PORT (log: var/llama-server.log)" >&2
.venv/bin/overspill serve --config "$CONFIG" ${PORT:+--port "$PORT"}
