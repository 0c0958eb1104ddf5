#!/bin/sh
# bench/loss.py on a bigger machine with nothing to build there: run from the repository root with the
# stripped binaries and the workloads carried in target/device and target/bench-workloads.
# Usage: bench/loss_device.sh OUTDIR [ROUNDS] [SECONDS]
set -u
out=${1:?outdir}; rounds=${2:-2}; secs=${3:-8}
{ echo "# $(date -u +%FT%TZ) $(nproc) CPUs, kernel $(uname -r), perf_event_paranoid $(cat /proc/sys/kernel/perf_event_paranoid), uid $(id -u)"
  python3 bench/loss.py --rounds "$rounds" --seconds "$secs" target/device/loupe-before target/device/loupe-after
} >"$out/loss-$(nproc)cpu.txt" 2>&1
tail -5 "$out/loss-$(nproc)cpu.txt"
