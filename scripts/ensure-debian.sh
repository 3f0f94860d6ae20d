#!/usr/bin/env bash
# Make sure COMMANDS are on PATH, installing Debian's PACKAGES with apt-get when one is missing
# and this is root; says what it found or did; exits non-zero with the command to run when it
# cannot install them. Usage: ensure-debian.sh NAME PACKAGE... -- COMMAND...
# (scripts/ensure-redis.sh, ensure-npm.sh and ensure-chromium.sh are its uses).
set -euo pipefail

name=$1
shift
packages=()
while [ "$#" -gt 0 ] && [ "$1" != "--" ]; do packages+=("$1"); shift; done
shift
commands=("$@")

log() { echo "ensure-$name: $*" >&2; }
missing() {
    local command
    for command in "${commands[@]}"; do
        command -v "$command" >/dev/null 2>&1 || return 0
    done
    return 1
}
found() {
    local command
    for command in "${commands[@]}"; do command -v "$command"; done | paste -sd' '
}

if ! missing; then
    log "found $(found)"
    exit 0
fi
if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1; then
    log "${commands[*]} not all on PATH; install them: sudo apt-get install ${packages[*]}"
    exit 1
fi
log "installing Debian's ${packages[*]}"
if ! { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${packages[@]}" >/dev/null; }; then
    log "apt-get could not install ${packages[*]} (see the messages above)"
    exit 1
fi
if missing; then
    log "apt-get finished but ${commands[*]} are still not all on PATH"
    exit 1
fi
log "installed $(found)"
