#!/usr/bin/env python3
"""How timer samples fall on a program's instructions, against exact counts: the basis of the
optimize export's block counts (BENCHMARKS.md, eleventh pass).

For every function with at least --min-samples samples in a Loupe database, each basic block's
samples (`loupe annotate`, per instruction) are set against its executions in the complete
profile (the instrumented `instr.fdata` of an `optimize_realprogs.py` workdir). Printed:

1. Per block length, for blocks run at least --min-count times: the samples per execution and
   instruction relative to the whole program (sum over blocks, and the median block), and how
   many of them, and what share of their executions, had no sample at all. One-instruction
   blocks that retire beside the branch before them go unsampled however often they run.
2. Per class of the instruction *before* a sampled one (instructions 2..n of a block: the timer
   reports the instruction after the one it waited on): samples per execution, relative.
   Instructions after a memory load draw several times those after register moves or stores.

Usage: bench/sample_yield.py --workdir DIR --db DIR/db-r1 [--min-samples 100] [--min-count 200000]
"""
import argparse, collections, json, os, re, statistics, subprocess
from optimize_realprogs import LOUPE

PREFIX = {"lock", "rep", "repz", "repnz", "repe", "repne", "cs", "ds", "notrack", "bnd", "data16", "addr32"}


def insn_class(text):
    """A coarse class of an AT&T instruction: what the timer waits on after it."""
    t = text.split()
    while t and t[0] in PREFIX:
        t = t[1:]
    if not t:
        return "other"
    m, ops = t[0], " ".join(t[1:])
    mem = "(" in ops
    if m.startswith("nop"):
        return "nop"
    for p in ("call", "push", "pop", "lea"):
        if m.startswith(p):
            return p
    if re.match(r"(i?mul|i?div)", m):
        return "mul/div"
    if m.startswith(("v", "cvt", "pxor", "movq", "movd", "movap", "movup", "ucomis", "comis")) or re.search(r"(sd|ss|pd|ps)$", m):
        return "fp, memory" if mem else "fp"
    if m.startswith(("mov", "cmov")):
        if mem:
            return "store" if "(" in ops.rsplit(",", 1)[-1] and "," in ops else "load"
        return "mov"
    if m.startswith(("cmp", "test")):
        return "compare, memory" if mem else "compare"
    return "alu, memory" if mem else "alu"


def block_counts(fdata):
    """Executions per (BOLT function name, block offset) from an instrumented profile's edge records."""
    cnt = collections.defaultdict(lambda: collections.defaultdict(float))
    for line in open(fdata):
        f = line.split()
        if len(f) == 8 and (f[1] == f[4] or int(f[5], 16) == 0):
            cnt[f[4]][int(f[5], 16)] += int(f[7])
    return cnt


def blocks_with_truth(workdir, db, min_samples):
    """(block's [(instruction text, samples)], executions) for the sampled functions' blocks."""
    base = json.load(open(os.path.join(workdir, "prepared.json")))[0]["base-default"]
    prof = json.loads(subprocess.run([LOUPE, "optimize", "export", "--db", db, "--no-probes", "--format", "json", base],
                                     capture_output=True, text=True, check=True).stdout)
    truth = block_counts(os.path.join(workdir, "instr.fdata"))
    out = []
    for fn in prof["functions"] if isinstance(prof, dict) else prof:
        counts = truth.get(fn.get("bolt_name", fn["name"]))
        if fn["samples"] < min_samples or not counts:
            continue
        r = subprocess.run([LOUPE, "annotate", "--db", db, "--image", base, "--procedure", fn["name"], "--epoch", "all",
                            "--format", "json"], capture_output=True, text=True)
        if r.returncode:
            continue
        insns = {int(i["address"], 16): (i["instruction"], i["samples"].get("cpu-clock", 0))
                 for i in json.loads(r.stdout)["instructions"]}
        addrs = sorted(insns)
        index = {a: k for k, a in enumerate(addrs)}
        for b in fn["blocks"]:
            k = index.get(fn["start"] + b["offset"])
            if k is not None:
                out.append(([insns[a] for a in addrs[k:k + b["insns"]]], counts.get(b["offset"], 0.0)))
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--workdir", required=True)
    ap.add_argument("--db", required=True)
    ap.add_argument("--min-samples", type=float, default=100)
    ap.add_argument("--min-count", type=float, default=2e5)
    a = ap.parse_args()
    rows = blocks_with_truth(a.workdir, a.db, a.min_samples)
    unit = sum(s for blk, _ in rows for _, s in blk) / sum(x * len(blk) for blk, x in rows)
    hot = [(blk, x) for blk, x in rows if x >= a.min_count]
    print(f"{len(rows)} blocks, {len(hot)} run at least {a.min_count:.0f} times")
    print("insns  blocks  samples/execution/insn (sum, median block)  unsampled blocks  their executions")
    by_len = collections.defaultdict(list)
    for blk, x in hot:
        by_len[min(len(blk), 12)].append((sum(s for _, s in blk), x, len(blk)))
    for n in sorted(by_len):
        g = by_len[n]
        zero = [x for s, x, _ in g if s == 0]
        print(f"{n:>5}{'+' if n == 12 else ' '} {len(g):6d}  {sum(s for s, _, _ in g) / sum(x * k for _, x, k in g) / unit:6.2f} "
              f"{statistics.median(s / (x * k) / unit for s, x, k in g):6.2f}  {len(zero):16d}  {sum(zero) / sum(x for _, x, _ in g):15.1%}")
    s, x = collections.Counter(), collections.Counter()
    for blk, n in hot:
        for j in range(1, len(blk)):
            c = insn_class(blk[j - 1][0])
            s[c] += blk[j][1]
            x[c] += n
    rel = sum(s.values()) / sum(x.values())
    print("instruction before          samples  per execution (relative)")
    for c in sorted(x, key=lambda c: -s[c]):
        print(f"{c:<26}{s[c]:9.0f}  {s[c] / x[c] / rel:6.2f}")


if __name__ == "__main__":
    main()
