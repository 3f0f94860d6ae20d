#!/usr/bin/env bash
# Claude Code, the npm package pinned below, in var/node (the project's own copy, cached):
# npm comes from scripts/ensure-npm.sh (Debian's, when missing and this is root).
# Prints CLAUDE=<path of the claude binary> on stdout; says what it did on stderr.
set -euo pipefail

VERSION="${CLAUDE_CODE_VERSION:-2.1.332}"
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
PREFIX="$ROOT/var/node"
BIN="$PREFIX/node_modules/.bin/claude"
STAMP="$PREFIX/.installed-claude-code-$VERSION"

log() { echo "claude-code: $*" >&2; }

"$ROOT/scripts/ensure-npm.sh"
if [ ! -x "$BIN" ] || [ ! -f "$STAMP" ]; then
    log "installing @anthropic-ai/claude-code@$VERSION into $PREFIX"
    mkdir -p "$PREFIX"
    # the package's postinstall puts its platform's native binary in place of bin/claude.exe
    npm install --prefix "$PREFIX" --no-audit --no-fund --no-save --loglevel=error \
        "@anthropic-ai/claude-code@$VERSION" >&2
    rm -f "$PREFIX"/.installed-claude-code-*
    touch "$STAMP"
fi
found="$("$BIN" --version 2>/dev/null || true)"
case "$found" in
    "$VERSION "*) log "found $BIN ($found)" ;;
    *) log "$BIN does not run as Claude Code $VERSION (it says: ${found:-nothing})"; exit 1 ;;
esac
echo "CLAUDE=$BIN"
