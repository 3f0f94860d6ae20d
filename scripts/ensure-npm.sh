#!/usr/bin/env bash
# Make sure npm (and Node.js) are on PATH for the agent clients the end-to-end tests install
# (scripts/claude-code.sh, scripts/codex.sh): Debian's nodejs and npm are installed with
# apt-get when npm is missing and this is root; exits non-zero with what to run otherwise.
set -euo pipefail

log() { echo "ensure-npm: $*" >&2; }

command -v npm >/dev/null 2>&1 && exit 0
if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1; then
    log "npm is missing; install Node.js and npm (Debian: sudo apt-get install nodejs npm)"
    exit 1
fi
log "installing Debian's nodejs and npm"
apt-get update -qq
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nodejs npm >/dev/null
