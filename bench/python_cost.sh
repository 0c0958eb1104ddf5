#!/bin/sh
# Cost of reading CPython frames in the BPF program at sample time: the
# same workload (testdata/python/selftime.py, CPU-bound Python) recorded
# with the BPF backend at 1000 Hz, alternating ROUNDS times between
# a CPython (PYTHON, default Debian's python3.11: its frames are read at
# every sample) and a copy of it under a name Loupe does not take for
# CPython (no frames read; the same code runs). For a CPython built with
# a shared libpython (pyenv's 3.12, 3.13) the library is copied too, under
# another name, found through LD_LIBRARY_PATH with PYTHONHOME at its
# prefix. The program's mean run time per sample is the kernel's
# own count (run_time_ns / run_cnt from /proc/PID/fdinfo of the recording
# loupe's perf_event program, read until it exits); the workload's wall
# time is its own. Prints each round and the medians.
# Usage: [PYTHON=/path/to/python3.x] bench/python_cost.sh LOUPE [ROUNDS] [CPU_SECONDS]
set -eu
LOUPE=${1:?usage: python_cost.sh LOUPE [ROUNDS] [CPU_SECONDS]}
ROUNDS=${2:-10}
SECS=${3:-2}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT
PY=${PYTHON:-/usr/bin/python3.11}
cp "$PY" "$OUT/xpy"
# The libpython it loads, if any: copied as xlib.so, found by its soname.
LIB=$(ldd "$PY" | awk '/libpython/ { print $3 }')
if [ -n "$LIB" ]; then
  mkdir "$OUT/lib"
  cp "$LIB" "$OUT/lib/xlib.so"
  ln -s xlib.so "$OUT/lib/$(basename "$LIB")"
  export PYTHONHOME
  PYTHONHOME=$(dirname "$(dirname "$LIB")")
fi

# The last "run_time_ns run_cnt" of PID's perf_event (type 7) program.
prog_stats() {
  for f in /proc/"$1"/fdinfo/*; do
    awk '/^prog_type:/ { t = $2 } /^run_time_ns:/ { ns = $2 } /^run_cnt:/ { n = $2 }
         END { if (t == 7 && n > 0) print ns, n }' "$f" 2>/dev/null
  done | tail -1
}

for r in $(seq "$ROUNDS"); do
  for mode in python plain; do
    py=$PY libs=""
    [ "$mode" = plain ] && py="$OUT/xpy" libs="$OUT/lib"
    rm -rf "$OUT/db"
    start=$(date +%s.%N)
    LD_LIBRARY_PATH=$libs "$LOUPE" record --freq 1000 --backend bpf --db "$OUT/db" -- "$py" "$ROOT/testdata/python/selftime.py" "$SECS" "$OUT/t.json" 2>"$OUT/err" &
    lp=$!
    last=""
    while kill -0 "$lp" 2>/dev/null; do
      s=$(prog_stats "$lp" || true)
      [ -n "$s" ] && last=$s
      sleep 0.2
    done
    wait "$lp"
    wall=$(echo "$(date +%s.%N) - $start" | bc)
    stacks=$(sed -n 's/^loupe: \([0-9]*\) stacks with Python frames.*/\1/p' "$OUT/err")
    echo "round $r $mode ns_per_sample $(echo "$last" | awk '{ printf "%.0f", $1 / $2 }') samples $(echo "$last" | awk '{ print $2 }') python_stacks ${stacks:-0} wall $wall"
  done
done | awk '
  { print; v[$3, ++n[$3]] = $5 }
  function median(m,   i, j, t, k) {
    k = n[m]; for (i = 1; i <= k; i++) a[i] = v[m, i]
    for (i = 1; i <= k; i++) for (j = i + 1; j <= k; j++) if (a[j] < a[i]) { t = a[i]; a[i] = a[j]; a[j] = t }
    return k % 2 ? a[(k + 1) / 2] : (a[k / 2] + a[k / 2 + 1]) / 2
  }
  END {
    p = median("python"); q = median("plain")
    printf "median BPF handler per sample: with Python frames %.2f us, without %.2f us: %.2f us for the frames\n", p / 1000, q / 1000, (p - q) / 1000
  }'
