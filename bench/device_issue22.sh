#!/bin/sh
# Issue 22's checks on a machine with more CPUs, nothing built there: records lost by the default
# daemon with every CPU busy (bench/loss.py, both binaries alternating), then each binary's daemon
# CPU per sample and RSS at --max-overhead off (the full 1000 samples/s per CPU), side by side.
# Run from the repository root with target/device/loupe-{before,after} (stripped) and
# target/bench-workloads carried. Usage: bench/device_issue22.sh OUTDIR [ROUNDS] [SECONDS]
set -u
out=${1:?outdir}; rounds=${2:-2}; secs=${3:-8}
n=$(nproc)
sh bench/loss_device.sh "$out" "$rounds" "$secs"
f="$out/cost-${n}cpu.txt"
echo "# $(date -u +%FT%TZ) $n CPUs: daemon --max-overhead off --stats, every CPU busy, $secs s" >"$f"
for r in $(seq "$rounds"); do
  for b in before after; do
    db=$(mktemp -d)/db
    target/bench-workloads/selftime --seconds $((secs + 30)) --threads "$n" --out /dev/null >/dev/null &
    busy=$!
    sleep 0.3
    target/device/loupe-$b daemon --db "$db" --max-overhead off --stats >/dev/null 2>"$db.err" &
    d=$!
    sleep "$secs"
    kill -TERM $d; wait $d
    kill $busy; wait $busy 2>/dev/null
    echo "$b round $r: $(grep -o '{.*}' "$db.err" | tail -1)" >>"$f"
  done
done
python3 - "$f" <<'PY'
import json, re, sys
for line in open(sys.argv[1]):
    m = re.match(r"(\w+) round (\d+): (\{.*\})", line)
    if not m:
        continue
    d = json.loads(m.group(3)); s = d.get("stats", {})
    print(f"{m.group(1)} r{m.group(2)}: backend {d.get('backend')}, samples {s.get('samples')}, lost {d.get('kernel_lost')}, "
          f"daemon {d.get('cpu_us_per_sample', 0):.3f} us/sample, RSS {d.get('rss_kib', 0) / 1024:.1f} MiB, "
          f"start-up CPU {d.get('startup_cpu_seconds')} s")
PY
