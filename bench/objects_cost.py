#!/usr/bin/env python3
"""Costs of DProf's collection in Loupe, beside the paper's figures:
allocation tracking per malloc/free pair (no tracking, the LD_PRELOAD shim,
eBPF uprobes), and object access histories per object set-up (the time the
process is stopped to arm the breakpoints) and per breakpoint hit (the
calibrated cost of one debug-register trap). Rounds alternate the variants;
prints medians and min-max. Cycles are ns x the nominal clock from
/proc/cpuinfo (no cycle counter on this VM).
Usage (root, from the repository root):
    cargo build --release -p loupe
    bench/objects_cost.py [ROUNDS]"""
import json, os, re, statistics, subprocess, sys, tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import LOUPE, WL, build

ROUNDS = int(sys.argv[1]) if len(sys.argv) > 1 else 10


def mhz():
    for line in open("/proc/cpuinfo"):
        if line.startswith("cpu MHz"):
            return float(line.split(":")[1])
    return float("nan")


def pair_ns(cmd):
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    return float(re.search(r"([\d.]+) ns/pair", out).group(1))


def alloc_round(tmp):
    bench = os.path.join(WL, "allocbench")
    return {
        "none": pair_ns([bench, "3000000"]),
        "preload": pair_ns([LOUPE, "data", "allocs", "--db", tempfile.mkdtemp(dir=tmp), "--preload", "--", bench, "3000000"]),
        "uprobes": pair_ns([LOUPE, "data", "allocs", "--db", tempfile.mkdtemp(dir=tmp), "--", bench, "200000"]),
    }


def history_round(tmp):
    db = tempfile.mkdtemp(dir=tmp)
    offs = [a for o in ("0:8", "8:8", "16:8", "24:8") for a in ("--offset", o)]
    cmd = [LOUPE, "data", "history", "--db", db, "--site", "make_msg", "--size", "64", *offs,
           "--objects", "20", "--budget", "0.5", "--format", "json", "--", os.path.join(WL, "queue"), "50000"]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    j = json.loads(out[out.index("{"):])
    setups = [h["setup_ns"] for h in j["histories"]]
    hits = sum(len(h["hits"]) for h in j["histories"])
    return j["hit_ns"], setups, hits, len(j["histories"])


def row(name, xs, unit, clock=None):
    med = statistics.median(xs)
    cyc = f" | {med * clock / 1000:,.0f}" if clock else ""
    return f"| {name} | {med:,.1f} {unit} | {min(xs):,.1f} | {max(xs):,.1f}{cyc} |"


def main():
    build()
    clock = mhz()
    tmp = tempfile.mkdtemp(prefix="loupe-objects-bench-")
    allocs = {"none": [], "preload": [], "uprobes": []}
    hit_ns, setup_ns, hits, objects = [], [], 0, 0
    for r in range(ROUNDS):
        for k, v in alloc_round(tmp).items():
            allocs[k].append(v)
        h, s, n, o = history_round(tmp)
        hit_ns.append(h)
        setup_ns += s
        hits += n
        objects += o
        print(f"round {r + 1}: {[(k, v[-1]) for k, v in allocs.items()]} hit {h} ns, set-up median {statistics.median(s) if s else 0:.0f} ns", file=sys.stderr)
    print(f"nominal clock {clock:.0f} MHz; {ROUNDS} rounds; {objects} objects watched, {hits} hits\n")
    print("| variant | median | min | max | cycles (median) |\n|---|---|---|---|---|")
    for k in ("none", "preload", "uprobes"):
        print(row(f"malloc+free pair, {k}", allocs[k], "ns", clock))
    print(row("history set-up per object (process stopped)", setup_ns, "ns", clock))
    print(row("breakpoint hit (calibrated trap)", hit_ns, "ns", clock))
    print("| DProf (paper): set-up per object | | | | 220,000 |\n| DProf (paper): debug-register interrupt | | | | ~1,000 |")


if __name__ == "__main__":
    main()
