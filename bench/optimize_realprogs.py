#!/usr/bin/env python3
"""Morph's Figure 3 on three real programs built from source (Lua 5.4,
SQLite, zstd; scripts/realprogs.sh): speedup of the test input after
llvm-bolt with Loupe's sampled profile of the training inputs, beside
llvm-bolt with BOLT's own instrumented (complete) profile of the same
training inputs, judged against five differently laid-out baseline builds.

Builds (gcc 12 -O2 -g -fno-pie, linked -no-pie -Wl,--emit-relocs: BOLT 19
needs relocations to move functions, and cannot rewrite switch dispatch in
a PIE build):
  base-default        gcc's default alignment: the binary that is optimized
  base-a1 .. base-a64 -falign-functions=N -falign-loops=N, N = 1, 8, 32, 64
  loupe               base-default + llvm-bolt, profile = `loupe optimize export
                      --format bolt-edges` after `loupe record` of every training run
                      (one database: runs combined directly)
  instr               base-default + llvm-bolt, profile = `llvm-bolt -instrument`
                      runs of the same training inputs, merged with merge-fdata

Each round runs every binary once on the test input, order rotated per
round; the figure is the child's user+system CPU time (wait4 rusage).

Usage: bench/optimize_realprogs.py [--rounds N] [--repeat R] [--workdir DIR] [PROGRAM...]
Environment: LOUPE (default target/release/loupe), BOLT (default /usr/lib/llvm-19/bin/llvm-bolt).
"""
import argparse, json, os, shutil, statistics, subprocess, sys, tempfile, time
from common import cpu_time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LOUPE = os.environ.get("LOUPE", os.path.join(ROOT, "target/release/loupe"))
BOLT = os.environ.get("BOLT", "/usr/lib/llvm-19/bin/llvm-bolt")
MERGE = "/usr/lib/llvm-19/bin/merge-fdata"
LUA = os.path.join(ROOT, "testdata/realprogs/lua")
BOLT_OPTS = ["-reorder-blocks=ext-tsp", "-split-functions", "-split-all-cold", "-reorder-functions=hfsort"]

# Training inputs and a different test input per program.
PROGRAMS = {
    "lua": {
        "train": [[f"{LUA}/fib.lua", "35"], [f"{LUA}/sort.lua", "300000"], [f"{LUA}/strings.lua", "300000"]],
        "test": [f"{LUA}/nbody.lua", "300000"],
    },
    "sqlite-bench": {"train": [["insert", "800"], ["mixed", "600"], ["query", "60"]], "test": ["query", "150"]},
    "zstd-bench": {"train": [["3", "48", "1"], ["3", "48", "3"], ["1", "48", "5"]], "test": ["3", "32", "2"]},
}
# Each training input runs this many times (Morph repeated its training inputs too): runs are combined directly.
TRAIN_REPEAT = 2  # --repeat
LAYOUTS = {"base-default": "", "base-a1": "1", "base-a8": "8", "base-a32": "32", "base-a64": "64"}


def sh(args, **kw):
    return subprocess.run(args, check=True, capture_output=True, text=True, **kw)


def build(prog, out, align):
    cflags = "-O2 -g -fno-pie" + (f" -falign-functions={align} -falign-loops={align}" if align else "")
    sh([os.path.join(ROOT, "scripts/realprogs.sh"), "--out", out, "--cflags", cflags, "--ldflags", "-no-pie -Wl,--emit-relocs", prog])
    return os.path.join(out, prog)


def bolt(base, fdata, out):
    log = sh([BOLT, base, "-o", out, f"-data={fdata}"] + BOLT_OPTS)
    return next((l.strip() for l in (log.stdout + log.stderr).splitlines() if "have non-empty execution profile" in l), "")


def prepare(prog, d):
    spec = PROGRAMS[prog]
    bins = {name: build(prog, os.path.join(d, "builds", name), al) for name, al in LAYOUTS.items()}
    base = bins["base-default"]
    db = os.path.join(d, "db")
    for _ in range(TRAIN_REPEAT):
        for args in spec["train"]:
            sh([LOUPE, "record", "--db", db, "--", base] + args)
    fdata = os.path.join(d, "loupe.fdata")
    sh([LOUPE, "optimize", "export", "--format", "bolt-edges", "--db", db, base, "-o", fdata])
    prof = json.loads(sh([LOUPE, "optimize", "export", "--format", "json", "--db", db, base]).stdout)
    bins["loupe"] = os.path.join(d, "loupe-bolt")
    matched = {"loupe": bolt(base, fdata, bins["loupe"])}
    inst, idir = os.path.join(d, "instr-run"), os.path.join(d, "instr")
    os.makedirs(idir, exist_ok=True)
    sh([BOLT, base, "-instrument", f"-instrumentation-file={idir}/prof", "-instrumentation-file-append-pid", "-o", inst])
    for _ in range(TRAIN_REPEAT):
        for args in spec["train"]:
            sh([inst] + args)
    parts = [os.path.join(idir, f) for f in os.listdir(idir)]
    ifd = os.path.join(d, "instr.fdata")
    with open(ifd, "w") as f:
        subprocess.run([MERGE] + parts, check=True, stdout=f, stderr=subprocess.DEVNULL)
    bins["instr"] = os.path.join(d, "instr-bolt")
    matched["instr"] = bolt(base, ifd, bins["instr"])
    return bins, prof["raw_samples"], matched


def measure(prog, bins, rounds):
    test = PROGRAMS[prog]["test"]
    names = list(bins)
    times = {n: [] for n in names}
    outputs = {}
    for r in range(rounds):
        for n in names[r % len(names):] + names[:r % len(names)]:
            t, out = cpu_time([bins[n]] + test)
            times[n].append(t)
            outputs.setdefault(n, out)
    if len(set(outputs.values())) != 1:
        sys.exit(f"{prog}: outputs differ: {outputs}")
    return times


def report(prog, times, samples, matched):
    med = {n: statistics.median(v) for n, v in times.items()}
    base_meds = [med[n] for n in LAYOUTS]
    bm = statistics.median(base_meds)
    spread = 100 * (max(base_meds) / min(base_meds) - 1)
    print(f"## {prog}: test {' '.join(os.path.basename(a) for a in PROGRAMS[prog]['test'])}; Loupe profile {samples} samples")
    for k, v in matched.items():
        print(f"#   {k}: {v}")
    print(f"{'binary':<14} {'median':>8} {'min':>8} {'max':>8} {'vs baseline median':>19}")
    for n, v in times.items():
        print(f"{n:<14} {med[n]:8.3f} {min(v):8.3f} {max(v):8.3f} {100 * (med[n] / bm - 1):+18.1f}%")
    print(f"baseline layouts: median of medians {bm:.3f} s, spread {min(base_meds):.3f}-{max(base_meds):.3f} s ({spread:.1f}%)")
    gain = {n: 100 * (1 - med[n] / bm) for n in ["loupe", "instr"]}
    for n in ["loupe", "instr"]:
        below = sum(1 for b in base_meds if med[n] < b)
        print(f"{n}: {gain[n]:+.1f}% vs baseline median; faster than {below} of {len(base_meds)} layouts")
    if gain["instr"] > 0:
        print(f"{prog}: Loupe's sampled profile reaches {100 * gain['loupe'] / gain['instr']:.0f}% of the instrumented profile's gain")
    return {"median": med, "baseline_median": bm, "spread_pct": spread, "gain_pct": gain, "samples": samples}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--repeat", type=int, default=2, help="runs of each training input")
    ap.add_argument("--workdir", help="reuse this directory (its builds are kept when their flags match)")
    ap.add_argument("programs", nargs="*", default=list(PROGRAMS))
    a = ap.parse_args()
    global TRAIN_REPEAT
    TRAIN_REPEAT = a.repeat
    results = {}
    for prog in a.programs:
        if a.workdir:
            d = a.workdir
            for sub in ["db", "instr"]:
                shutil.rmtree(os.path.join(d, sub), ignore_errors=True)
        else:
            d = tempfile.mkdtemp(prefix=f"loupe-fig3-{prog}-")
        bins, samples, matched = prepare(prog, d)
        times = measure(prog, bins, a.rounds)
        results[prog] = dict(report(prog, times, samples, matched), times=times)
        sys.stdout.flush()
    os.makedirs(os.path.join(ROOT, "bench/results"), exist_ok=True)
    with open(os.path.join(ROOT, "bench/results", time.strftime("optimize-realprogs-%Y%m%d-%H%M%S.json")), "w") as f:
        json.dump({"rounds": a.rounds, "results": results}, f)


if __name__ == "__main__":
    main()
