#!/usr/bin/env bash
# Make sure prometheus, promtool and prometheus-redis-exporter are on PATH (monitoring add-on,
# notebook 10, the rule tests). As root on Debian/Ubuntu, install them with apt-get; otherwise say
# in one line what to do. Never fatal: the tests that need them are skipped with that line.
#
# Debian's packages ship system services (prometheus on :9090, the exporter on :9121, on all
# interfaces). The workbook never uses them: it runs its own processes on 127.0.0.1 with its own
# configs (ports 9390, 9391+). Where policy-rc.d forbids starting services (containers) they never
# start; on a systemd machine they do, and nothing here depends on them.
set -euo pipefail

have_monitoring() {
  command -v prometheus >/dev/null 2>&1 \
    && command -v promtool >/dev/null 2>&1 \
    && { command -v prometheus-redis-exporter >/dev/null 2>&1 || command -v redis_exporter >/dev/null 2>&1; }
}

if have_monitoring; then
  exit 0
fi

if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  echo "installing prometheus and prometheus-redis-exporter with apt-get ..."
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >/dev/null
  if apt-get install -y -qq --no-install-recommends prometheus prometheus-redis-exporter >/dev/null; then
    have_monitoring && exit 0
  fi
fi

case "$(uname -s)" in
  Darwin) hint="brew install prometheus redis_exporter" ;;
  Linux) hint="sudo apt-get install --no-install-recommends prometheus prometheus-redis-exporter" ;;
  *) hint="install Prometheus >= 2.42 (with promtool) and redis_exporter >= 1.45" ;;
esac
echo "warning: prometheus, promtool and prometheus-redis-exporter are not installed: $hint (the monitoring add-on, notebook 10 and the rule tests are skipped until then)" >&2
exit 0
