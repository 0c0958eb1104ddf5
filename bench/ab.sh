#!/usr/bin/env bash
# Quick side-by-side A/B at one rate: none, perf record -a, loupe daemon and
# loupe record (whole machine), one after another per round.
#   bench/ab.sh [RATE] [ROUNDS]      prints one line per round (burn's elapsed s)
set -euo pipefail
cd "$(dirname "$0")/.."
rate=${1:-250}; rounds=${2:-6}
make -s -C testdata/workloads OUT="$PWD/target/bench-workloads"
B=target/bench-workloads/burn; L=${LOUPE:-target/release/loupe}; tmp=$(mktemp -d)
burn() { $B --threads "$(nproc)" | cut -d= -f2; }
for i in $(seq "$rounds"); do
  n=$(burn)
  perf record -a -q -F "$rate" -o "$tmp/perf.data" 2>/dev/null & p=$!; sleep 1.5
  tp=$(burn); kill -INT $p; wait $p || true
  rm -rf "$tmp/db"; $L daemon --db "$tmp/db" --freq "$rate" 2>/dev/null & p=$!; sleep 1.5
  tl=$(burn); kill -TERM $p; wait $p || true
  rm -rf "$tmp/db"; $L record --db "$tmp/db" --freq "$rate" --duration 30 2>/dev/null & p=$!; sleep 1.5
  tr=$(burn); kill -INT $p; wait $p || true
  echo "none $n perf $tp daemon $tl record $tr"
done
rm -rf "$tmp"
