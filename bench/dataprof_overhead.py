#!/usr/bin/env python3
"""Cost of access sampling (`loupe record --data`) at the default rate, with
and without allocation tracking, beside `perf record` sampling cpu-clock with
the same user registers at the same rate.

`burn` (CPU-bound, one thread per CPU) times itself from inside, so the
profilers' start-up (BPF load, uprobes for allocation tracking) is outside the
figure. Rounds alternate baseline / loupe / perf; medians and min-max of the
ratio to the neighbouring baseline are printed.

Usage: bench/dataprof_overhead.py [ROUNDS] [ITERATIONS]
"""
import os, statistics, subprocess, sys, tempfile
from common import LOUPE, WL, build

ROUNDS = int(sys.argv[1]) if len(sys.argv) > 1 else 10
ITER = sys.argv[2] if len(sys.argv) > 2 else "300000000"
REGS = "ax,bx,cx,dx,si,di,bp,sp,ip,r8,r9,r10,r11,r12,r13,r14,r15"


def elapsed(out):
    return float(next(l for l in out.splitlines() if l.startswith("elapsed_s=")).split("=")[1])


def run(prefix):
    burn = [os.path.join(WL, "burn"), "--threads", str(os.cpu_count()), "--iterations", ITER]
    # perf 6.1 on this 6.18 kernel sometimes aborts on its way out ("stack smashing detected") after burn
    # has printed its time: the figure is still good; a run with no figure is retried.
    for _ in range(3):
        out = subprocess.run(prefix + burn, capture_output=True, text=True).stdout
        if "elapsed_s=" in out:
            return elapsed(out)
    raise RuntimeError(f"no elapsed_s from {prefix[:1]}")


def main():
    build()
    tmp = tempfile.mkdtemp(prefix="dprof-overhead-")
    loupe = [LOUPE, "record", "--data", "--db", os.path.join(tmp, "db"), "--"]
    sampling = [LOUPE, "record", "--data", "--allocs", "off", "--db", os.path.join(tmp, "db2"), "--"]
    perf = ["perf", "record", "-q", "-e", "cpu-clock", "-c", "1000000", f"--user-regs={REGS}", "-o", os.path.join(tmp, "perf.data"), "--"]
    rows = {"baseline": [], "loupe": [], "loupe-allocs-off": [], "perf": []}
    for r in range(ROUNDS):
        for name, prefix in (("baseline", []), ("loupe", loupe), ("loupe-allocs-off", sampling), ("perf", perf)):
            rows[name].append(run(prefix))
        print(f"round {r + 1}: " + ", ".join(f"{k} {v[-1]:.3f}s" for k, v in rows.items()), file=sys.stderr)
    base = statistics.median(rows["baseline"])
    print(f"burn --threads {os.cpu_count()} --iterations {ITER}, {ROUNDS} rounds; medians of elapsed_s, ratio to the same round's baseline")
    for name in rows:
        ratios = [x / b for x, b in zip(rows[name], rows["baseline"])]
        print(f"{name:15} median {statistics.median(rows[name]):.3f}s  ratio median {statistics.median(ratios):.4f}  "
              f"min {min(ratios):.4f} max {max(ratios):.4f}")
    print(f"(baseline median {base:.3f}s)")


if __name__ == "__main__":
    main()
