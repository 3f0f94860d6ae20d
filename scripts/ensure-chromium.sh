#!/usr/bin/env bash
# Make sure Debian's Chromium is on PATH: the browser end-to-end test (tests/e2e/test_browser.py)
# loads a page in it that calls overspill, as a web app or a hostile site would. Installs it
# with apt-get when missing and running as root; says what it did; exits non-zero with the
# command to run when it cannot install it.
set -euo pipefail

log() { echo "ensure-chromium: $*" >&2; }

if command -v chromium >/dev/null 2>&1; then
    log "found $(command -v chromium) ($(chromium --version 2>/dev/null | head -1))"
    exit 0
fi
if [ "$(id -u)" != 0 ]; then
    log "chromium is not installed and this is not root; run: sudo apt-get install chromium"
    exit 1
fi
if ! command -v apt-get >/dev/null 2>&1; then
    log "chromium is not installed and apt-get is missing; install Chromium by hand"
    exit 1
fi
log "installing Debian's chromium"
if ! { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; }; then
    log "apt-get could not install chromium (see the messages above)"
    exit 1
fi
if ! command -v chromium >/dev/null 2>&1; then
    log "apt-get finished but chromium is still not on PATH"
    exit 1
fi
log "installed $(command -v chromium) ($(chromium --version 2>/dev/null | head -1))"
