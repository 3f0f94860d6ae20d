#!/usr/bin/env bash
# Make sure Debian's redis-server and redis-cli are on PATH: the Redis store tests start their
# own servers on loopback (one server; a 3+3 Redis Cluster formed with `redis-cli --cluster
# create`; a Sentinel set, `redis-server <conf> --sentinel`). Installs them with apt-get when
# missing and running as root; says what it did; exits non-zero with the command to run when it
# cannot install them.
set -euo pipefail

log() { echo "ensure-redis: $*" >&2; }

missing() { ! command -v redis-server >/dev/null 2>&1 || ! command -v redis-cli >/dev/null 2>&1; }

if ! missing; then
    log "found $(command -v redis-server) ($(redis-server --version | cut -d' ' -f3)) and $(command -v redis-cli)"
    exit 0
fi
if [ "$(id -u)" != 0 ]; then
    log "redis-server or redis-cli is not installed and this is not root; run: sudo apt-get install redis-server redis-tools"
    exit 1
fi
if ! command -v apt-get >/dev/null 2>&1; then
    log "redis-server or redis-cli is not installed and apt-get is missing; install Redis 7.0+ by hand"
    exit 1
fi
log "installing Debian's redis-server and redis-tools"
if ! { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq redis-server redis-tools >/dev/null; }; then
    log "apt-get could not install redis-server (see the messages above)"
    exit 1
fi
if missing; then
    log "apt-get finished but redis-server or redis-cli is still not on PATH"
    exit 1
fi
log "installed $(command -v redis-server) ($(redis-server --version | cut -d' ' -f3)) and $(command -v redis-cli)"
