#!/usr/bin/env bash
# Make sure Debian's redis-server is on PATH (the Redis store tests start their own on loopback).
# Installs it with apt-get when missing and running as root; says what it did; exits non-zero
# with the command to run when it cannot install it.
set -euo pipefail

log() { echo "ensure-redis: $*" >&2; }

if command -v redis-server >/dev/null 2>&1; then
    log "found $(command -v redis-server) ($(redis-server --version | cut -d' ' -f3))"
    exit 0
fi
if [ "$(id -u)" != 0 ]; then
    log "redis-server is not installed and this is not root; run: sudo apt-get install redis-server"
    exit 1
fi
if ! command -v apt-get >/dev/null 2>&1; then
    log "redis-server is not installed and apt-get is missing; install Redis 6.2+ by hand"
    exit 1
fi
log "installing Debian's redis-server"
if ! { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq redis-server >/dev/null; }; then
    log "apt-get could not install redis-server (see the messages above)"
    exit 1
fi
if ! command -v redis-server >/dev/null 2>&1; then
    log "apt-get finished but redis-server is still not on PATH"
    exit 1
fi
log "installed $(command -v redis-server) ($(redis-server --version | cut -d' ' -f3))"
