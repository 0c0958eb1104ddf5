#!/bin/bash
# Loupe's own CPU per sample on the drain path, outside the clock readings for `calc` (a fixed 0.1-0.2 s each):
# `loupe record -F RATE` of two copies of a workload (one per CPU of the 2-CPU VM), perf's cpu-clock at 10 kHz on
# the loupe process only for 10 s from 2 s in; a daemon on this shared VM sees every other session's processes,
# `record` sees only its workload. Usage: bench/record_cpu.sh LOUPE [RATE] [WORKLOAD ARGS...]
# (default workload: target/bench-workloads/qsortcb, deep random recursion through libc's qsort, no frame pointers:
# its (pc, callers) keys hardly repeat, the worst case for aggregation in the kernel). Alternate binaries yourself.
set -eu
loupe=$(realpath "$1"); rate=${2:-8000}; shift $(( $# >= 2 ? 2 : $# ))
[ $# -gt 0 ] || set -- "$(dirname "$0")/../target/bench-workloads/qsortcb" --seconds 13 --out /dev/null
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
"$loupe" record --db "$tmp/db" -F "$rate" -- sh -c '"$@" & "$@"; wait' sh "$@" >/dev/null 2>"$tmp/err" & p=$!
sleep 2
perf record -q -F 10000 -e cpu-clock -g -p $p -o "$tmp/perf.data" -- sleep 10 >/dev/null 2>&1
wait $p
perf script -i "$tmp/perf.data" -F ip,sym 2>/dev/null | python3 -c '
import re, sys
err = open(sys.argv[1]).read()
m = re.search(r"loupe: ([0-9,]+) samples in ([0-9.]+) s", err)
n = int(m.group(1).replace(",", "")) * 10 / float(m.group(2))
s = [x for x in sys.stdin.read().split("\n\n") if x.strip()]
clock = sum("record_clock" in x for x in s)
other = len(s) - clock
print(f"{sys.argv[2]}: {other * 0.1:.0f} ms outside the clock readings ({clock * 0.1:.0f} ms in them) over ~{n:.0f} samples -> {other * 100 / n:.3f} us/sample")
' "$tmp/err" "$loupe"
