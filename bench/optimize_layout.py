#!/usr/bin/env python3
"""Speedup of `loupe optimize` (Loupe's sampled profile -> llvm-bolt) on the
`layout` workload, judged against several differently laid-out builds of
the baseline, beside BOLT's own instrumented (complete) profile.

Builds (all gcc -O2 -fno-pie -no-pie -Wl,--emit-relocs):
  base-a0 .. base-a4  the baseline with -falign-functions/-falign-loops of
                      1, 8, 16, 32 and 64 bytes: five layouts of the same code
  loupe               base-a0 + llvm-bolt with the fdata `loupe optimize export`
                      wrote after `loupe record` of the training input
  loupe-edges         the same profile written as branch records (edge counts
                      synthesized from block counts, `--format bolt-edges`)
  instr               base-a0 + llvm-bolt with the profile of `llvm-bolt
                      -instrument` on the same training input (complete counts)

Training input: `layout TRAIN 1`; measured input: `layout TEST 2`. Each round
runs every binary once, in an order rotated per round; the figure is the
child's user+system CPU time (wait4 rusage: less disturbed than wall time by
the other tenants of this VM). Reports median and min-max per binary, and
each optimized binary against the median of the five baseline medians and
their spread.

Usage: bench/optimize_layout.py [--rounds N] [--train ITERS] [--test ITERS]
Environment: LOUPE (default target/release/loupe), BOLT (default /usr/lib/llvm-19/bin/llvm-bolt).
"""
import argparse, json, os, statistics, subprocess, sys, tempfile, time
from common import cpu_time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LOUPE = os.environ.get("LOUPE", os.path.join(ROOT, "target/release/loupe"))
BOLT = os.environ.get("BOLT", "/usr/lib/llvm-19/bin/llvm-bolt")
SRC = os.path.join(ROOT, "testdata/workloads/layout.c")
BOLT_OPTS = ["-reorder-blocks=ext-tsp", "-split-functions", "-split-all-cold", "-reorder-functions=hfsort"]


def sh(args, **kw):
    return subprocess.run(args, check=True, capture_output=True, text=True, **kw)


def build(out, align):
    sh(["gcc", "-O2", "-g", "-fno-omit-frame-pointer", "-fno-inline-functions", "-fno-pie", "-no-pie", "-Wl,--emit-relocs",
        f"-falign-functions={align}", f"-falign-loops={align}", "-o", out, SRC])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--train", default="20000")
    ap.add_argument("--test", default="15000")
    a = ap.parse_args()
    d = tempfile.mkdtemp(prefix="loupe-opt-")
    bins = {}
    for i, al in enumerate([1, 8, 16, 32, 64]):
        bins[f"base-a{i}"] = os.path.join(d, f"base-a{i}")
        build(bins[f"base-a{i}"], al)
    base = bins["base-a0"]
    db = os.path.join(d, "db")
    sh([LOUPE, "record", "--db", db, "--", base, a.train, "1"])
    fdata = os.path.join(d, "loupe.fdata")
    sh([LOUPE, "optimize", "export", "--format", "bolt", "--db", db, base, "-o", fdata])
    bins["loupe"] = os.path.join(d, "loupe-bolt")
    sh([BOLT, base, "-o", bins["loupe"], f"-data={fdata}"] + BOLT_OPTS)
    efd = os.path.join(d, "edges.fdata")
    sh([LOUPE, "optimize", "export", "--format", "bolt-edges", "--db", db, base, "-o", efd])
    bins["loupe-edges"] = os.path.join(d, "loupe-edges-bolt")
    sh([BOLT, base, "-o", bins["loupe-edges"], f"-data={efd}"] + BOLT_OPTS)
    inst, ifd = os.path.join(d, "instr-run"), os.path.join(d, "instr.fdata")
    sh([BOLT, base, "-instrument", f"-instrumentation-file={ifd}", "-o", inst])
    sh([inst, a.train, "1"])
    bins["instr"] = os.path.join(d, "instr-bolt")
    sh([BOLT, base, "-o", bins["instr"], f"-data={ifd}"] + BOLT_OPTS)

    names = list(bins)
    times = {n: [] for n in names}
    outputs = {}
    for r in range(a.rounds):
        order = names[r % len(names):] + names[:r % len(names)]
        for n in order:
            t, out = cpu_time([bins[n], a.test, "2"])
            times[n].append(t)
            outputs.setdefault(n, out)
    if len(set(outputs.values())) != 1:
        sys.exit(f"outputs differ: {outputs}")
    med = {n: statistics.median(v) for n, v in times.items()}
    base_meds = [med[n] for n in names if n.startswith("base")]
    bm = statistics.median(base_meds)
    print(f"# {a.rounds} rounds, train {a.train} iterations, test {a.test}; CPU seconds per run; output identical: {outputs[names[0]].strip()}")
    print(f"{'binary':<12} {'median':>8} {'min':>8} {'max':>8} {'vs baseline median':>19}")
    for n in names:
        v = times[n]
        print(f"{n:<12} {med[n]:8.3f} {min(v):8.3f} {max(v):8.3f} {100 * (med[n] / bm - 1):+18.1f}%")
    print(f"baseline layouts: median of medians {bm:.3f} s, spread {min(base_meds):.3f}-{max(base_meds):.3f} s "
          f"({100 * (max(base_meds) / min(base_meds) - 1):.1f}%)")
    for n in ["loupe", "loupe-edges", "instr"]:
        below = sum(1 for b in base_meds if med[n] < b)
        print(f"{n}: {100 * (1 - med[n] / bm):+.1f}% vs baseline median; faster than {below} of {len(base_meds)} baseline layouts")
    gi = bm - med["instr"]
    for n in ["loupe", "loupe-edges"]:
        if gi > 0:
            print(f"{n}: the sampled profile reaches {100 * (bm - med[n]) / gi:.0f}% of the instrumented profile's gain")
    os.makedirs(os.path.join(ROOT, "bench/results"), exist_ok=True)
    with open(os.path.join(ROOT, "bench/results", time.strftime("optimize-%Y%m%d-%H%M%S.json")), "w") as f:
        json.dump({"rounds": a.rounds, "train": a.train, "test": a.test, "times": times}, f)


if __name__ == "__main__":
    main()
