#!/usr/bin/env bash
# Samples lost by the default daemon with every CPU busy (issue 22's goal: 0).
# For each loupe binary given, alternating, ROUNDS times: start `burn` with one
# thread per CPU, run `loupe daemon` with its defaults for SECONDS, stop it
# with SIGTERM and print its closing statistics (samples, lost records,
# daemon CPU per sample, start-up CPU, RSS) as one JSON line per run.
# Usage: bench/loss_check.sh [--rounds N] [--seconds S] [--burn PATH] LOUPE... 
set -euo pipefail
rounds=2 seconds=10 burn=
while [[ $# -gt 0 && $1 == --* ]]; do
  case $1 in
    --rounds) rounds=$2; shift 2 ;;
    --seconds) seconds=$2; shift 2 ;;
    --burn) burn=$2; shift 2 ;;
    *) echo "unknown flag $1" >&2; exit 2 ;;
  esac
done
(($# > 0)) || { echo "usage: $0 [--rounds N] [--seconds S] [--burn PATH] LOUPE..." >&2; exit 2; }
cpus=$(nproc)
if [[ -z $burn ]]; then
  burn=$(mktemp -d)/burn
  make -s -C "$(dirname "$0")/../testdata/workloads" OUT="$(dirname "$burn")" "$(dirname "$burn")/burn" >/dev/null
fi
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
for r in $(seq "$rounds"); do
  for loupe in "$@"; do
    db=$work/db-$r-$(basename "$loupe")
    "$burn" --threads "$cpus" --iterations 100000000000 >/dev/null 2>&1 &
    bp=$!
    sleep 0.5
    "$loupe" daemon --db "$db" >"$work/out" 2>"$work/err" &
    dp=$!
    sleep "$seconds"
    kill -TERM "$dp"; wait "$dp" || true
    kill "$bp"; wait "$bp" 2>/dev/null || true
    stats=$(grep -o '{.*}' "$work/err" | tail -1)
    python3 - "$loupe" "$r" "$cpus" "$stats" <<'PY'
import json, sys
loupe, r, cpus, stats = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
d = json.loads(stats); s = d.get("stats", {})
lost = s.get("lost_records", 0) + d.get("bpf_dropped", 0)
samples = s.get("samples", 0) + d.get("bpf_samples", 0)
print(json.dumps({"loupe": loupe, "round": r, "cpus": cpus, "seconds": d.get("seconds"), "samples": samples,
                  "lost": lost, "lost_share": round(lost / max(1, lost + samples), 4), "rate_hz": d.get("rate_hz"),
                  "cpu_us_per_sample": d.get("cpu_us_per_sample"), "startup_cpu_seconds": d.get("startup_cpu_seconds"),
                  "rss_kib": d.get("rss_kib"), "backend": d.get("backend")}))
PY
  done
done
