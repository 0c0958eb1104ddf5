#!/bin/sh
# Cost of `record --off-cpu` on a context-switch-heavy load: two threads
# passing a byte over pipes (offcpu --pingpong N, every pass a switch out
# and in), timed by the workload itself, under `loupe record` with and
# without --off-cpu, alternating, ROUNDS times. Prints the context switches
# the program handled (its own count) and the extra time per switch.
# Usage: bench/offcpu_cost.sh LOUPE [ROUNDS] [PASSES]
set -eu
LOUPE=${1:?usage: offcpu_cost.sh LOUPE [ROUNDS] [PASSES]}
ROUNDS=${2:-5}
N=${3:-100000}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT
make -s -C "$ROOT/testdata/workloads" OUT="$OUT/w" "$OUT/w/offcpu"
for r in $(seq "$ROUNDS"); do
  for mode in plain offcpu; do
    flag=""; [ "$mode" = offcpu ] && flag=--off-cpu
    rm -rf "$OUT/db"
    t=$("$LOUPE" record $flag --db "$OUT/db" -- "$OUT/w/offcpu" --pingpong "$N" 2>"$OUT/err")
    sw=$(sed -n 's/.*off-CPU: \([0-9]*\) context switches.*/\1/p' "$OUT/err")
    echo "round $r $mode seconds $t switches ${sw:-0}"
  done
done | awk '
  { print; s[$3] += $5; n[$3]++; if ($3 == "offcpu") sw += $7 }
  END {
    p = s["plain"] / n["plain"]; o = s["offcpu"] / n["offcpu"]; k = sw / n["offcpu"]
    printf "mean: plain %.3f s, --off-cpu %.3f s (%+.1f%%), %d switches/run = %.0f switches/s; %.2f us extra per switch\n",
      p, o, 100 * (o - p) / p, k, k / o, 1e6 * (o - p) / k
  }'
