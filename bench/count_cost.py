#!/usr/bin/env python3
"""The cost of `record --count` (issue 30): how much slower a program runs
while its procedures' counting windows are armed than under the same
recording without them. Each case (a program and the procedures counted) is
recorded plain and counted in turns (A B A B ..., MEASURING.md), `--rounds`
times; the program's run is timed from inside the recorded shell (the
recorder's start and end are not in it), and the figure is the median ratio
counted / plain with its min-max, beside the share of the run armed and the
traps loupe reports for the counted run.
Run as root from the repository root after `cargo build --release`:
  bench/count_cost.py --rounds 6 --freq 4000 [--cases counted,zstd,sqlite] [--real DIR]
`--real DIR`: the directory scripts/realprogs.sh printed (built if absent, as bench/calc_accuracy.py builds it).
"""
import argparse, os, re, shlex, statistics, subprocess, sys, tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LOUPE = os.environ.get("LOUPE_BIN") or os.path.join(ROOT, "target/release/loupe")
REAL_CFLAGS = "-O2 -g -Dluai_makeseed=0u+sizeof"
# case -> (program, arguments of one run, runs in a recording, procedures counted: each alone and all together)
CASES = {
    "counted": ("counted", ["60000", "400", "100"], 1, ["count_loop"]),
    "zstd": ("zstd-bench", ["3", "32"], 4, ["ZSTD_decompressSequences_bmi2.constprop.0", "ZSTD_compressBlock_doubleFast"]),
    "sqlite": ("sqlite-bench", ["query", "150"], 4, ["sqlite3VdbeExec", "sqlite3BtreeTableMoveto"]),
}


def timed_record(db, freq, argv, runs, count, stamp):
    """Records `runs` runs of argv (counting `count`); returns the runs' wall seconds, timed inside the shell, and loupe's
    `counted` lines."""
    loop = f"t0=$(date +%s%N); for i in $(seq {runs}); do {shlex.join(argv)} >/dev/null; done; echo $(( $(date +%s%N) - t0 )) > {stamp}"
    extra = ["--count", ",".join(count)] if count else []
    r = subprocess.run([LOUPE, "record", "--no-stacks", "--freq", str(freq), "--db", db] + extra + ["--", "/bin/sh", "-c", loop],
                       check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    return int(open(stamp).read()) / 1e9, [l for l in r.stderr.splitlines() if l.startswith("loupe: counted")]


def armed_share(lines):
    """(armed %, breakpoint traps, uprobe hits) summed over loupe's `counted` lines."""
    armed = sum(float(m.group(1)) for l in lines for m in [re.search(r"armed ([\d.]+) s of", l)] if m)
    wall = max((float(m.group(1)) for l in lines for m in [re.search(r"of ([\d.]+) s \(", l)] if m), default=0.0)
    traps = sum(int(m.group(1)) for l in lines for m in [re.search(r"(\d+) breakpoint traps", l)] if m)
    uprobe = sum(int(m.group(1)) for l in lines for m in [re.search(r"\+ (\d+) uprobe hits", l)] if m)
    return 100.0 * armed / max(wall, 1e-9), traps, uprobe


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--freq", type=int, default=4000)
    ap.add_argument("--cases", default=",".join(CASES))
    ap.add_argument("--real", help="directory of the real programs (scripts/realprogs.sh --out)")
    a = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="count-cost-")
    work = os.path.join(tmp, "w")
    subprocess.run(["make", "-s", "-C", os.path.join(ROOT, "testdata/workloads"), f"OUT={work}", f"{work}/counted"], check=True)
    real = a.real or os.path.join(tmp, "real")
    if any(c != "counted" for c in a.cases.split(",")) and not os.path.exists(os.path.join(real, "zstd-bench")):
        subprocess.run([os.path.join(ROOT, "scripts/realprogs.sh"), "--out", real, "--cflags", REAL_CFLAGS], check=True,
                       stdout=subprocess.DEVNULL)
    rows = []
    for case in a.cases.split(","):
        prog, args, runs, procs = CASES[case]
        binary = os.path.join(work if case == "counted" else real, prog)
        argv = [binary] + args
        own = binary if case == "counted" else None
        # Each procedure alone, then all together (their windows take turns on the debug registers).
        variants = [[p] for p in procs] + ([procs] if len(procs) > 1 else [])
        ratios = {tuple(v): [] for v in variants}
        costs = {tuple(v): [] for v in variants}
        for r in range(a.rounds):
            for v in variants:
                spec = [p if own else f"{p}@{binary}" for p in v]
                stamp = os.path.join(tmp, "stamp")
                plain, _ = timed_record(os.path.join(tmp, f"db-{case}-{r}-p"), a.freq, argv, runs, [], stamp)
                counted, lines = timed_record(os.path.join(tmp, f"db-{case}-{r}-c"), a.freq, argv, runs, spec, stamp)
                ratios[tuple(v)].append(counted / plain)
                costs[tuple(v)].append(armed_share(lines))
                print(f"{case} {'+'.join(v)} round {r}: plain {plain:.2f} s, counted {counted:.2f} s ({counted / plain:.2f}x)",
                      file=sys.stderr)
        for v in variants:
            x = ratios[tuple(v)]
            c = costs[tuple(v)]
            rows.append((case, "+".join(v), statistics.median(x), min(x), max(x), statistics.median(y[0] for y in c),
                         statistics.median(y[1] for y in c), statistics.median(y[2] for y in c)))
    print(f"\n{a.rounds} rounds, plain and counted in turns, {a.freq} samples/s, run timed inside the recorded shell")
    print("| case | procedures counted | counted / plain, median (min-max) | armed share | breakpoint traps | uprobe hits |")
    print("|---|---|---|---|---|---|")
    for case, v, med, lo, hi, armed, traps, up in rows:
        print(f"| {case} | {v} | {med:.2f}x ({lo:.2f}-{hi:.2f}) | {armed:.0f}% | {traps:,.0f} | {up:,.0f} |")


if __name__ == "__main__":
    main()
