#!/bin/sh
# Issue 22 (unwind tables in BPF) on a machine with more CPUs, nothing built there: one qsortcb per
# CPU (-O2 without frame pointers through libc's qsort: every stack needs the unwind tables or a
# stack copy), under each binary's default `loupe daemon` (budget on) and at --max-overhead off,
# alternating: samples, records lost, daemon CPU per sample, RSS, stacks walked by the tables and
# walks stopped by reason. Run from the repository root with target/device/loupe-{before,after}
# (stripped) and target/bench-workloads carried; steady-state figures from the --stats intervals after 8 s (build: make -C testdata/workloads
# OUT=$PWD/target/bench-workloads). Usage: bench/device/unwind.sh OUTDIR [ROUNDS] [SECONDS]
set -u
out=${1:?outdir}; rounds=${2:-2}; secs=${3:-8}
n=$(nproc)
mkdir -p "$out"
f="$out/unwind-${n}cpu.txt"
echo "# $(date -u +%FT%TZ) $n CPUs: $n x qsortcb, daemon --stats, $secs s" >"$f"
for r in $(seq "$rounds"); do
  for mode in default off; do
    for b in before after; do
      db=$(mktemp -d)/db
      pids=""
      for i in $(seq "$n"); do
        target/bench-workloads/qsortcb --seconds $((secs + 30)) --out /dev/null >/dev/null &
        pids="$pids $!"
      done
      sleep 0.3
      if [ "$mode" = off ]; then extra="--max-overhead off"; else extra=""; fi
      target/device/loupe-$b daemon --db "$db" $extra --stats 4 >/dev/null 2>"$db.err" &
      d=$!
      sleep "$secs"
      kill -TERM $d; wait $d
      kill $pids; wait $pids 2>/dev/null
      echo "$b $mode round $r: $(grep -o '{.*}' "$db.err" | tail -1)" >>"$f"
      # Steady state: the interval reports after the first 8 s (tables built, first flush's clock reading done).
      grep -o '{.*}' "$db.err" | sed '$d' | tail -n +3 | sed "s/^/$b $mode round $r interval: /" >>"$f"
    done
  done
done
python3 - "$f" <<'PY'
import json, re, sys
steady = {}
for line in open(sys.argv[1]):
    m = re.match(r"(\w+) (\w+) round (\d+) interval: (\{.*\})", line)
    if m:
        d = json.loads(m.group(4)); k = steady.setdefault(m.group(1, 2, 3), [0, 0.0, 0])
        k[0] += d["stats"]["samples"]; k[1] += d["daemon_cpu_seconds"]; k[2] = max(k[2], d.get("rss_kib", 0))
for (b, mode, r), (n, cpu, rss) in sorted(steady.items()):
    print(f"{b} {mode} r{r} steady (after 8 s): daemon {cpu * 1e6 / max(n, 1):.3f} us/sample over {n} samples, RSS max {rss / 1024:.1f} MiB")
for line in open(sys.argv[1]):
    m = re.match(r"(\w+) (\w+) round (\d+): (\{.*\})", line)
    if not m:
        continue
    d = json.loads(m.group(4)); s = d.get("stats", {}); k = d.get("bpf_stacks") or {}
    stopped = {r: k.get(f"streamed_{r}", 0) for r in ("no_table", "expression", "read_fault")}
    print(f"{m.group(1)} {m.group(2)} r{m.group(3)}: backend {d.get('backend')}, samples {s.get('samples')}, lost {d.get('kernel_lost')}, "
          f"daemon {d.get('cpu_us_per_sample', 0):.3f} us/sample, RSS {d.get('rss_kib', 0) / 1024:.1f} MiB, "
          f"by tables {k.get('unwind_walked', 'n/a')} (depth limit {k.get('unwind_depth', 'n/a')}), stopped {stopped}, "
          f"stack copies {k.get('streamed_leaf', 0) + k.get('streamed_chain', 0)}, "
          f"BPF {d.get('bpf_handler_ns_per_sample', 0) / 1000:.2f} us/sample, start-up CPU {d.get('startup_cpu_seconds', 0):.2f} s, "
          f"tables evicted {sum(f.get('evicted', 0) for f in (d.get('stack_fallbacks') or {}).values())}")
PY
