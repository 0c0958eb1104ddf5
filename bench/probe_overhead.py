#!/usr/bin/env python3
"""Cost of `loupe optimize probe` to the program probed: wall time of a
program alone and under the probe, alternating, at two duty cycles.

Every execution of an armed block traps (about 10 us in this VM), so a
window that arms a hot block costs about its whole length: the expected
slowdown is the duty cycle, window / mean period (1 ms / 50 ms = 2% by
default; 1 ms / 5 ms = 20%, the bench's training setting), plus the timer
samples taken between windows to weigh runs (2 kHz by default, about 14 us
each here: about 3%).

Workloads: `modes 10000 0` (testdata) and Lua 5.4 `fib.lua 32`
(scripts/realprogs.sh). Each probed run is `loupe optimize probe --db DB
[--period-ms P] BIN -- /usr/bin/time -f %e BIN ARGS`: the figure is the
program's own wall time as /usr/bin/time measured it, not the probe's
start-up. The database holds a profile of the program first (`loupe record`).

Usage: bench/probe_overhead.py [--rounds N]
Writes bench/results/probe-overhead-DATE.json.
"""
import argparse, json, os, statistics, subprocess, sys, tempfile, time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import LOUPE, ROOT, WL, build  # noqa: E402

LUA = os.path.join(ROOT, "testdata/realprogs")
WORKLOADS = {
    "modes": lambda: [os.path.join(WL, "modes"), "10000", "0"],
    "lua-fib": lambda: [os.path.join(LUA, "build/default/lua"), os.path.join(LUA, "lua/fib.lua"), "32"],
}
PERIODS_MS = [50, 5]


def wall(cmd):
    """The wall seconds /usr/bin/time printed on stderr (the last line that is a number: under the probe, loupe's
    summary follows it)."""
    r = subprocess.run(cmd, capture_output=True, text=True, check=True)
    for line in reversed(r.stderr.strip().splitlines()):
        try:
            return float(line)
        except ValueError:
            continue
    sys.exit(f"probe_overhead: no time in {cmd}'s output: {r.stderr}")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=10)
    a = ap.parse_args()
    build()
    results = {}
    for name, args in WORKLOADS.items():
        prog = args()
        if not os.path.exists(prog[0]):
            print(f"# {name}: {prog[0]} missing (scripts/realprogs.sh builds it); skipped")
            continue
        db = tempfile.mkdtemp(prefix="loupe-probe-bench-")
        subprocess.run([LOUPE, "record", "--db", db, "--freq", "1000", "--"] + prog, check=True, capture_output=True)
        timed = ["/usr/bin/time", "-f", "%e"] + prog
        runs = {"alone": []} | {f"probe-{p}ms": [] for p in PERIODS_MS}
        for r in range(a.rounds):
            order = list(runs)
            order = order[r % len(order):] + order[: r % len(order)]
            for k in order:
                if k == "alone":
                    runs[k].append(wall(timed))
                else:
                    p = k.split("-")[1][:-2]
                    runs[k].append(wall([LOUPE, "optimize", "probe", "--db", db, "--half-life", "0", "--period-ms", p, prog[0], "--"] + timed))
        base = statistics.median(runs["alone"])
        row = {k: {"median_s": statistics.median(v), "min_s": min(v), "max_s": max(v),
                   "slowdown_pct": 100 * (statistics.median(v) / base - 1)} for k, v in runs.items()}
        results[name] = row
        for k, v in row.items():
            print(f"{name:8s} {k:12s} median {v['median_s']:.3f} s ({v['min_s']:.3f}-{v['max_s']:.3f})  {v['slowdown_pct']:+.1f}%")
    os.makedirs(os.path.join(ROOT, "bench/results"), exist_ok=True)
    out = os.path.join(ROOT, "bench/results", time.strftime("probe-overhead-%Y%m%d-%H%M%S.json"))
    with open(out, "w") as f:
        json.dump({"rounds": a.rounds, "results": results}, f, indent=1)
    print(f"# written {out}")


if __name__ == "__main__":
    main()
