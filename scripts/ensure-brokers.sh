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
set -euo pipefail

RABBIT_BIN=/usr/lib/rabbitmq/bin/rabbitmq-server

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
