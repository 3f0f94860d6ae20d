#!/usr/bin/env bash
# npm (and Node.js) for the agent clients the end-to-end tests install (scripts/claude-code.sh,
# scripts/codex.sh): Debian's nodejs and npm.
exec "$(dirname "$0")/ensure-debian.sh" npm nodejs npm -- node npm
