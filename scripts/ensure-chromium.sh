#!/usr/bin/env bash
# Make sure a Chromium binary exists for the browser test (tests/test_browser.py).
# As root on Debian/Ubuntu, install Debian's `chromium` package with apt-get; otherwise say in
# one line what to do. Never fatal: without Chromium the browser test is skipped, and says why.
set -uo pipefail

CHROMIUM="${CHROMIUM:-/usr/bin/chromium}"

if [ -x "$CHROMIUM" ]; then
  exit 0
fi

if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  echo "installing chromium with apt-get (for the browser test) ..."
  export DEBIAN_FRONTEND=noninteractive
  if apt-get update -qq >/dev/null && apt-get install -y -qq --no-install-recommends chromium >/dev/null \
    && [ -x "$CHROMIUM" ]; then
    exit 0
  fi
  echo "note: apt-get could not install chromium; the browser test will be skipped" >&2
  exit 0
fi

echo "note: no $CHROMIUM (install Debian's 'chromium' package as root); the browser test will be skipped" >&2
exit 0
