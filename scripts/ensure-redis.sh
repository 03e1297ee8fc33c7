#!/usr/bin/env bash
# Make sure redis-server, redis-sentinel and redis-cli (Redis >= 7.0) are on PATH.
# As root on Debian/Ubuntu, install them with apt-get; otherwise say in one line what to do.
set -euo pipefail

have_redis() {
  for bin in redis-server redis-sentinel redis-cli; do
    command -v "$bin" >/dev/null 2>&1 || return 1
  done
  local major
  major=$(redis-server --version | sed -n 's/.*v=\([0-9]*\)\..*/\1/p')
  [ -n "$major" ] && [ "$major" -ge 7 ]
}

if have_redis; then
  exit 0
fi

if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  echo "installing redis-server, redis-sentinel and redis-tools with apt-get ..."
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >/dev/null
  apt-get install -y -qq redis-server redis-sentinel redis-tools >/dev/null
  have_redis && exit 0
  echo "error: apt-get installed Redis, but it is older than 7.0 ($(redis-server --version)); use 'conda env create -f environment.yml'" >&2
  exit 1
fi

case "$(uname -s)" in
  Darwin) hint="brew install redis" ;;
  Linux) hint="sudo apt-get install redis-server redis-sentinel redis-tools (or your distribution's redis >= 7.0)" ;;
  *) hint="install Redis >= 7.0" ;;
esac
echo "error: redis-server, redis-sentinel and redis-cli (Redis >= 7.0) are needed: $hint, or 'conda env create -f environment.yml'" >&2
exit 1
