#!/bin/bash
# The collector's memory and CPU on as many samples as 16 CPUs at 1,000/s give, on this 2-CPU VM: `loupe record
# -F 8000 --flush-every 60` of 16 copies of qsortcb (no frame pointers, deep random recursion: stacks that hardly
# repeat, the worst case for the stack caches). Prints the largest RSS before the recorder's exit and at it, its CPU
# (utime+stime, clock readings included), samples and records lost. Usage: bench/record_rss16.sh LOUPE [SECONDS] [RATE]
# (75 s covers one 60-s flush; alternate binaries yourself).
set -u
loupe=$(realpath "$1"); secs=${2:-75}; rate=${3:-8000}
q=$(realpath "$(dirname "$0")/../target/bench-workloads/qsortcb")
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
"$loupe" record --flush-every 60 --db "$tmp/db" -F "$rate" -- sh -c "for i in \$(seq 16); do $q --seconds $secs --out /dev/null & done; wait" >/dev/null 2>"$tmp/err" & p=$!
max=0; cpu=0; t0=$(date +%s); before=0
while kill -0 $p 2>/dev/null; do
  r=$(awk '/VmRSS/{print $2}' /proc/$p/status 2>/dev/null); [ -n "$r" ] && [ "$r" -gt "$max" ] && max=$r
  s=$(awk '{print $14+$15}' /proc/$p/stat 2>/dev/null); [ -n "$s" ] && cpu=$s
  [ $(( $(date +%s) - t0 )) -le $(( secs - 2 )) ] && before=$max
  sleep 0.5
done
echo "$loupe: RSS max before exit $((before / 1024)) MiB, at exit $((max / 1024)) MiB, CPU $(echo "scale=2; $cpu / 100" | bc) s," \
  "$(grep -o '[0-9,]* samples in [0-9.]* s' "$tmp/err" | head -1), $(grep -o '[0-9,]* lost' "$tmp/err" | head -1)," \
  "$(grep -o '[0-9]* with no room' "$tmp/err" | head -1) (stack copies)"
