#!/usr/bin/env bash
# Run a command while a noisy neighbour keeps one CPU busy (and, with --disk, writes and fsyncs a file),
# the way a shared CI machine behaves; the load is stopped when the command ends, whatever happens.
#
#   scripts/noisy-neighbour.sh [--cpu N] [--disk] [--] command args...
#
# --cpu N   the CPU the busy loop is pinned to (default: the last one; on 2 cores, one of the two)
# --disk    also a writer: 64 MiB with fsync, again and again, under $TMPDIR (a loaded disk)
# Exit status: the command's. Used by 'make test-noisy'; the flakes it found are in tests/FLAKES.md.
set -euo pipefail

cpu=$(( $(nproc) - 1 ))
disk=0
while [ $# -gt 0 ]; do
    case "$1" in
        --cpu) cpu="$2"; shift 2 ;;
        --disk) disk=1; shift ;;
        --) shift; break ;;
        -*) echo "noisy-neighbour: unknown option $1" >&2; exit 2 ;;
        *) break ;;
    esac
done
[ $# -gt 0 ] || { echo "usage: $0 [--cpu N] [--disk] [--] command args..." >&2; exit 2; }

pids=()
scratch=""
stop_load() {
    # only the processes this script started: each in a session of its own, stopped by its group id
    for pid in "${pids[@]}"; do kill -TERM -- "-$pid" 2>/dev/null || true; done
    for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
    [ -z "$scratch" ] || rm -rf "$scratch"
    echo "noisy-neighbour: load stopped" >&2
}
trap stop_load EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

setsid taskset -c "$cpu" sh -c 'while :; do :; done' &
pids+=("$!")
if [ "$disk" = 1 ]; then
    scratch=$(mktemp -d "${TMPDIR:-/tmp}/noisy-neighbour.XXXXXX")
    setsid sh -c 'while :; do dd if=/dev/zero of="$1/noise" bs=1M count=64 conv=fsync status=none; done' \
        sh "$scratch" &
    pids+=("$!")
fi
echo "noisy-neighbour: busy loop on CPU $cpu (pid ${pids[0]})$([ "$disk" = 1 ] && echo ", disk writer in $scratch")" >&2

status=0
"$@" || status=$?
exit "$status"
