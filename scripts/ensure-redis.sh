#!/usr/bin/env bash
# Debian's redis-server and redis-cli, for the Redis store tests: they start their own servers
# on loopback (one server; a 3+3 Redis Cluster formed with `redis-cli --cluster create`; a
# Sentinel set, `redis-server <conf> --sentinel`).
exec "$(dirname "$0")/ensure-debian.sh" redis redis-server redis-tools -- redis-server redis-cli
