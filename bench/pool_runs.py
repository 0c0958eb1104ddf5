#!/usr/bin/env python3
"""Pools the rounds of several timed runs of the same binaries (bench/optimize_realprogs.py's
`-times-` files) into one estimate of each profile's gain and its share of the complete profile's.

On this VM one run of 15 rounds moved the share of the same 15 binaries from 64% to 133% (SQLite,
fourteenth pass in BENCHMARKS.md): a run's round-to-round noise is not the whole noise. Every figure
in a `-times-` file is a paired ratio, a binary's time over base-default's in the same round, so
rounds of different runs can be pooled; the gains and the 95% intervals are then computed exactly as
optimize_realprogs.py computes them for one run (bootstrap over rounds, now of all runs).

A binary named differently in another run (the same profile exported again under a new name) is
renamed with --rename OLD=NEW; check first that the code is the same (e.g. `cmp` of the `.text`
sections). Only binaries present in every file are pooled.

Usage: bench/pool_runs.py [--rename r1-p48x4=r1-mzmore ...] TIMES.json TIMES.json ...
"""
import argparse, json, statistics
from optimize_realprogs import BOLT_VARIANTS, LAYOUTS, bootstrap, layout_groups, print_bootstrap


def pooled(files, renames):
    """Per binary, the paired ratios of all runs, rounds in file order; binaries missing from a file are left out."""
    runs = []
    for f in files:
        t = json.load(open(f))["times"]
        runs.append({renames.get(n, n): v for n, v in t.items()})
    names = [n for n in runs[0] if all(n in r for r in runs)]
    return {n: [x for r in runs for x in r[n]] for n in names}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rename", action="append", default=[], help="OLD=NEW: a binary's name in some files (and its @ layouts)")
    ap.add_argument("files", nargs="+")
    a = ap.parse_args()
    renames = {}
    for r in a.rename:
        old, new = r.split("=", 1)
        renames[old] = new
        for v in BOLT_VARIANTS:
            renames[f"{old}@{v}"] = f"{new}@{v}"
    times = pooled(a.files, renames)
    missing = [n for n in LAYOUTS if n not in times]
    if missing:
        raise SystemExit(f"pool_runs: baseline layouts missing from some file: {missing}")
    rounds = min(len(v) for v in times.values())
    med = {n: statistics.median(v) for n, v in times.items()}
    bm = statistics.median(med[n] for n in LAYOUTS)
    print(f"{len(a.files)} runs, {rounds} rounds pooled; baseline layouts' median {bm:.3f} of base-default "
          f"(spread {100 * (max(med[n] for n in LAYOUTS) / min(med[n] for n in LAYOUTS) - 1):.1f}%)")
    boot = bootstrap(times, layout_groups(list(times)))
    print_bootstrap("", boot)
    print(json.dumps({"files": a.files, "rounds": rounds, "bootstrap": boot}))


if __name__ == "__main__":
    main()
