#!/bin/sh
# Cost of `record --off-cpu` on a context-switch-heavy load: two threads
# passing a byte over pipes (offcpu --pingpong N, every pass a switch out
# and in), timed by the workload itself, under `loupe record` with and
# without --off-cpu, alternating, ROUNDS times. Prints the context switches
# the program handled (its own count), the extra time per switch, and the
# program's own run time per switch (the kernel's BPF stats, read with
# bpftool while it runs; the user chains are walked by unwind tables, as
# `record` prints).
# Usage: bench/offcpu_cost.sh LOUPE [ROUNDS] [PASSES]
set -eu
LOUPE=${1:?usage: offcpu_cost.sh LOUPE [ROUNDS] [PASSES]}
ROUNDS=${2:-5}
N=${3:-100000}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT
sysctl -qw kernel.bpf_stats_enabled=1 2>/dev/null || true
make -s -C "$ROOT/testdata/workloads" OUT="$OUT/w" "$OUT/w/offcpu"
for r in $(seq "$ROUNDS"); do
  for mode in plain offcpu; do
    flag=""; [ "$mode" = offcpu ] && flag=--off-cpu
    rm -rf "$OUT/db"
    "$LOUPE" record $flag --db "$OUT/db" -- "$OUT/w/offcpu" --pingpong "$N" >"$OUT/t" 2>"$OUT/err" &
    pid=$!
    prog=""
    while kill -0 $pid 2>/dev/null; do
      j=$(bpftool prog show name on_switch -j 2>/dev/null || true)
      [ -n "$j" ] && [ "$j" != "[]" ] && prog=$j
      sleep 0.2
    done
    wait $pid
    ns=$(printf '%s' "$prog" | sed -n 's/.*"run_time_ns":\([0-9]*\).*"run_cnt":\([0-9]*\).*/\1 \2/p' | awk '{ if ($2) printf "%.0f", $1 / $2 }')
    sw=$(sed -n 's/.*off-CPU: \([0-9]*\) context switches.*/\1/p' "$OUT/err")
    echo "round $r $mode seconds $(cat "$OUT/t") switches ${sw:-0} prog_ns ${ns:-0}"
  done
done | awk '
  { print; s[$3] += $5; n[$3]++; if ($3 == "offcpu") { sw += $7; pn += $9 } }
  END {
    p = s["plain"] / n["plain"]; o = s["offcpu"] / n["offcpu"]; k = sw / n["offcpu"]
    printf "mean: plain %.3f s, --off-cpu %.3f s (%+.1f%%), %d switches/run = %.0f switches/s; %.2f us extra per switch; program %.2f us per switch\n",
      p, o, 100 * (o - p) / p, k, k / o, 1e6 * (o - p) / k, pn / n["offcpu"] / 1000
  }'
