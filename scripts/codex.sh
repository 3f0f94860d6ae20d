#!/usr/bin/env bash
# OpenAI's Codex CLI, the npm package pinned below, in var/codex (its own prefix: an
# `npm install --no-save` into var/node would prune Claude Code, and the other way round).
# npm comes from scripts/ensure-npm.sh (Debian's, when missing and this is root).
# The package is a launcher; the Rust binary comes as the optional dependency for this
# platform (@openai/codex-linux-x64 on x86-64 Linux), checked by running `codex --version`.
# Prints CODEX=<path of the codex launcher> on stdout; says what it did on stderr.
set -euo pipefail

VERSION="${CODEX_VERSION:-0.171.0}"
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
PREFIX="$ROOT/var/codex"
BIN="$PREFIX/node_modules/.bin/codex"
STAMP="$PREFIX/.installed-codex-$VERSION"

log() { echo "codex: $*" >&2; }

"$ROOT/scripts/ensure-npm.sh"
runs() { [ "$("$BIN" --version 2>/dev/null || true)" = "codex-cli $VERSION" ]; }
# a stamp with a launcher that no longer runs (its native binary pruned or deleted) reinstalls
if [ ! -x "$BIN" ] || [ ! -f "$STAMP" ] || ! runs; then
    log "installing @openai/codex@$VERSION into $PREFIX"
    mkdir -p "$PREFIX"
    # --include=optional: the native binary is an optional dependency, which an npm
    # configured with omit=optional would silently leave out
    npm install --prefix "$PREFIX" --no-audit --no-fund --no-save --loglevel=error \
        --include=optional "@openai/codex@$VERSION" >&2
    rm -f "$PREFIX"/.installed-codex-*
    touch "$STAMP"
fi
found="$("$BIN" --version 2>/dev/null || true)"
case "$found" in
    "codex-cli $VERSION") log "found $BIN ($found)" ;;
    *) log "$BIN does not run as Codex $VERSION (it says: ${found:-nothing})"; exit 1 ;;
esac
echo "CODEX=$BIN"
