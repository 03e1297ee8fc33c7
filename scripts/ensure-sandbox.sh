#!/usr/bin/env bash
# Make sure `bwrap` (Debian's bubblewrap, the sandbox Flatpak uses), `setpriv` and `prlimit` (util-linux) exist
# for `make grade`: every submission's notebooks and labs run in a bubblewrap sandbox of their own
# (labs/grading/bwrap.py, docs/grading.md). As root on Debian/Ubuntu, install bubblewrap with apt-get;
# otherwise say in one line what to do. Never fatal here: without bwrap, `make grade` stops with one line
# (and runs unsandboxed only with GRADE_ARGS=--unsafe-no-sandbox), and the sandbox tests fail as root.
set -uo pipefail

if command -v bwrap >/dev/null 2>&1 && command -v setpriv >/dev/null 2>&1 && command -v prlimit >/dev/null 2>&1; then
  exit 0
fi

if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  echo "installing bubblewrap with apt-get (the grading sandbox) ..."
  export DEBIAN_FRONTEND=noninteractive
  if apt-get -o DPkg::Lock::Timeout=600 update -qq >/dev/null \
    && apt-get -o DPkg::Lock::Timeout=600 install -y -qq --no-install-recommends bubblewrap util-linux >/dev/null \
    && command -v bwrap >/dev/null 2>&1; then
    exit 0
  fi
  echo "note: apt-get could not install bubblewrap; make grade will refuse to run without it" >&2
  exit 0
fi

echo "note: no bwrap (install Debian's 'bubblewrap' package as root); make grade will refuse to run without it" >&2
exit 0
