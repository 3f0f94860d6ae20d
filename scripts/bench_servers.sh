#!/usr/bin/env bash
# Which HTTP server: uvicorn (httptools + uvloop, as `overspill serve` runs it) against granian
# (Rust, ASGI, uvloop), measured in ONE run of the gateway bench (../shared/bench, or BENCH_DIR):
#
#   passthrough            the minimal starlette + httpx passthrough under uvicorn
#   passthrough-granian    the same app under granian
#   passthrough-aiohttp    the passthrough with an aiohttp upstream client, under uvicorn,
#   passthrough-aiohttp-granian  and under granian (the server's share when the client is cheap)
#   overspill              `python -m proxy serve` (uvicorn, overspill's own HTTP protocol)
#   overspill-granian      the same app factory (proxy.server:app_from_env) under granian
#
# granian gets one worker and one runtime thread, HTTP/1 only, no WebSocket: with the proxy
# pinned to one core, both servers get the same CPU budget. Under granian, overspill's
# connection limits (proxy/connection.py) do not apply: it is the app alone that is measured.
# SERVER_TARGETS="overspill overspill-granian" picks some of them. Extra arguments go to the
# harness, e.g. --quick --lat-duration 0. Needs the `granian` extra
# (in `dev`). The summary is copied to var/bench/servers-summary.md.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/bench_common.sh
granian="$PWD/.venv/bin/granian"
[ -x "$granian" ] || { echo "granian is not installed: pip install -e '.[granian]'" >&2; exit 1; }
gr_opts="--interface asgi --loop uvloop --http 1 --no-ws --workers 1 --runtime-threads 1 --no-access-log --log-level warning --host {host} --port {port}"
# The passthrough runs in the bench's own venv, with its granian if it has one (else ours).
pt_granian="${GWBENCH_VENV:-/tmp/gwbench-venv}/bin/granian"
[ -x "$pt_granian" ] || pt_granian=$granian
before=$(ls -1d /tmp/gwbench-results/*/ 2>/dev/null | sort | tail -1 || true)
declare -A spec=(
    [passthrough]=passthrough
    [passthrough-granian]="passthrough-granian=cmd:$pt_granian $gr_opts --working-dir {bench_dir} passthrough_proxy:app"
    [passthrough-aiohttp]=passthrough-aiohttp
    [passthrough-aiohttp-granian]="passthrough-aiohttp-granian=cmd:$pt_granian $gr_opts --working-dir {bench_dir} passthrough_aiohttp:app"
    [overspill]="overspill=cmd:env -C $PWD $python -m proxy serve --config $config --host {host} --port {port}"
    [overspill-granian]="overspill-granian=cmd:env -C $PWD OVERSPILL_CONFIG=$config $granian $gr_opts --factory proxy.server:app_from_env"
)
targets=()
for name in ${SERVER_TARGETS:-passthrough passthrough-granian passthrough-aiohttp passthrough-aiohttp-granian overspill overspill-granian}; do
    [ -n "${spec[$name]:-}" ] || { echo "unknown target $name (SERVER_TARGETS)" >&2; exit 1; }
    targets+=(--target "${spec[$name]}")
done
"$BENCH/run_gateway_bench.sh" "${targets[@]}" "$@"
latest=$(ls -1d /tmp/gwbench-results/*/ | sort | tail -1)
if [ "$latest" != "$before" ]; then
    cp "$latest/summary.md" var/bench/servers-summary.md
    cp "$latest/results.json" var/bench/servers-results.json
    echo "summary: var/bench/servers-summary.md (from $latest)"
fi
