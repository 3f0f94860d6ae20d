#!/usr/bin/env bash
# Debian's Chromium, for the browser end-to-end test (tests/e2e/test_browser.py): it loads a
# page that calls overspill, as a web app or a hostile site would.
exec "$(dirname "$0")/ensure-debian.sh" chromium chromium -- chromium
