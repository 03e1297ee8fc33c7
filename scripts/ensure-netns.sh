#!/usr/bin/env bash
# Make sure `ip` (iproute2) and `nft` (nftables) exist for the partition experiments
# (labs/launcher/netns.py: network namespaces, veth pairs, nftables drop rules; notebooks 03 and 09,
# lab 3's MODE=partition). As root on Debian/Ubuntu, install them with apt-get; otherwise say in one
# line what to do. Never fatal: without them (or without root) the partition tests are skipped
# with the reason that labs.launcher.netns.unavailable_reason() gives.
# The nftables package ships a service that loads /etc/nftables.conf; the workbook never uses it:
# its rules live only inside the network namespaces it creates.
set -uo pipefail

if command -v ip >/dev/null 2>&1 && command -v nft >/dev/null 2>&1; then
  exit 0
fi

if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  echo "installing iproute2 and nftables with apt-get (for the partition experiments) ..."
  export DEBIAN_FRONTEND=noninteractive
  if apt-get -o DPkg::Lock::Timeout=600 update -qq >/dev/null \
    && apt-get -o DPkg::Lock::Timeout=600 install -y -qq --no-install-recommends iproute2 nftables >/dev/null \
    && command -v nft >/dev/null 2>&1; then
    exit 0
  fi
  echo "note: apt-get could not install iproute2/nftables; the partition experiments will be skipped" >&2
  exit 0
fi

echo "note: no 'ip' or 'nft' (install Debian's iproute2 and nftables as root); the partition experiments will be skipped" >&2
exit 0
