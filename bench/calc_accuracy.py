#!/usr/bin/env python3
"""Accuracy of `loupe calc` execution counts against exact counts (DCPI §6.2,
Figures 8 and 9).

Runs testdata/workloads/calcwork under `valgrind --tool=callgrind
--dump-instr=yes --collect-jumps=yes` with 1 and 2 repetitions (every
repetition does identical work, so exact counts for R repetitions are
c1 + (R-1)(c2-c1)), records R repetitions with `loupe record`, runs
`loupe calc --format json` on each procedure, and prints:
  * the error histogram of instruction execution counts weighted by samples
    (Figure 8), overall and per confidence label;
  * the error histogram of edge execution counts weighted by exact edge
    executions (Figure 9).
Run as root from the repository root after `cargo build --release`:
  bench/calc_accuracy.py --seconds 4 --freq 10000 [--procs isort,rle] [--json out.json]
"""
import argparse, collections, json, os, subprocess, sys, tempfile, time

PROCS = ["isort", "rle", "interp", "matmul", "hashprobe", "branchy", "divchain", "chase"]
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LOUPE = os.environ.get("LOUPE_BIN") or os.path.join(ROOT, "target/release/loupe")


def build(out):
    subprocess.run(["make", "-s", "-C", os.path.join(ROOT, "testdata/workloads"), f"OUT={out}", f"{out}/calcwork"], check=True)
    return os.path.join(out, "calcwork")


def callgrind(binary, reps, only, tmp):
    """Per-address execution counts and per-(source, target) jump counts in the main executable."""
    out = os.path.join(tmp, f"cg-{reps}.out")
    args = [binary, "--reps", str(reps)] + (["--only", only] if only else [])
    r = subprocess.run(["valgrind", "--tool=callgrind", "--dump-instr=yes", "--dump-line=no", "--collect-jumps=yes",
                    f"--callgrind-out-file={out}"] + args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    # valgrind 3.19 sometimes dies of SIGTRAP in _dl_fini after main has
    # returned; the counts are dumped all the same.
    if not os.path.exists(out):
        sys.exit(f"callgrind wrote no {out}")
    counts, jumps = parse_callgrind(out, os.path.realpath(binary))
    if not counts:
        sys.exit(f"callgrind counted nothing in {binary}: {r.stderr[-2000:]}")
    return counts, jumps


def parse_callgrind(path, binary):
    counts, jumps = collections.Counter(), collections.Counter()
    names = {}
    ob, pos, skip = None, 0, False
    pending = None

    def addr(tok, cur):
        if tok == "*":
            return cur
        if tok[0] in "+-":
            return cur + int(tok, 0)
        return int(tok, 16)

    for line in open(path):
        line = line.rstrip("\n")
        if not line or line.startswith("#"):
            continue
        if line.startswith(("ob=", "cob=")):
            # ob= and cob= share one table of compressed names.
            rest = line.split("=", 1)[1]
            k, _, name = rest.partition(" ")
            if name:
                names[k] = name
            if line.startswith("ob="):
                ob = names.get(k, rest)
            continue
        if line.startswith("calls="):
            skip = True  # the next cost line is the call's inclusive cost
            continue
        if line.startswith(("jump=", "jcnd=")):
            kind, _, rest = line.partition("=")
            c, target = rest.split()[:2]
            taken = int(c.split("/")[0])
            pending = (kind, taken, addr(target, pos))
            continue
        if "=" in line.split(" ")[0]:
            continue
        toks = line.split()
        if not toks or not (toks[0][0] in "+-*0123456789"):
            continue
        pos = addr(toks[0], pos)
        if pending:
            if os.path.realpath(ob or "") == binary:
                jumps[(pos, pending[2])] += pending[1]
            pending = None
            continue
        if skip:
            skip = False
            continue
        if os.path.realpath(ob or "") == binary and len(toks) > 1:
            counts[pos] += int(toks[1])
    return counts, jumps


def repetitions(binary, proc, seconds):
    """Repetitions of `proc` that run about `seconds` of CPU time (doubling until a run takes 0.3 s)."""
    def cpu(n):
        r0 = os.times().children_user
        subprocess.run([binary, "--reps", str(n), "--only", proc], check=True, stdout=subprocess.DEVNULL)
        return os.times().children_user - r0
    n = 20
    while True:
        t = cpu(n)
        if t >= 0.3:
            return max(2, int(seconds * n / t))
        n *= 4


def exact(c1, c2, reps):
    keys = set(c1) | set(c2)
    return {k: c1.get(k, 0) + (reps - 1) * (c2.get(k, 0) - c1.get(k, 0)) for k in keys}


def exact_edge(e, counts, jumps):
    """Executions of a CFG edge: a jump's count, or what falls through."""
    src, dst = int(e["from"], 16), int(e["to"], 16)
    taken_total = sum(n for (s, _), n in jumps.items() if s == src)
    if (src, dst) in jumps:
        return jumps[(src, dst)]
    return counts.get(src, 0) - taken_total


BUCKETS = [-45 + 5 * i for i in range(19)]  # bucket k holds errors in [b, b+5)


def bucket(err_pct):
    if err_pct < -45:
        return "<-45"
    if err_pct >= 45:
        return ">=45"
    b = 5 * int((err_pct + 45) // 5) - 45
    return f"{b:+d}"


def histogram(pairs):
    """pairs: (error %, weight) -> {bucket: percent of weight}."""
    tot = sum(w for _, w in pairs) or 1
    h = collections.OrderedDict((k, 0.0) for k in ["<-45"] + [f"{b:+d}" for b in BUCKETS[:-1]] + [">=45"])
    for err, w in pairs:
        h[bucket(err)] += 100.0 * w / tot
    return h


def within(pairs, pct):
    tot = sum(w for _, w in pairs) or 1
    return 100.0 * sum(w for e, w in pairs if abs(e) <= pct) / tot


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=4.0, help="run time of each procedure under loupe record")
    ap.add_argument("--freq", type=int, default=10000)
    ap.add_argument("--procs", default=",".join(PROCS))
    ap.add_argument("--json")
    ap.add_argument("--quiet", action="store_true")
    a = ap.parse_args()
    procs = a.procs.split(",")
    insn_pairs, edge_pairs, per_conf, per_proc = [], [], collections.defaultdict(list), {}
    with tempfile.TemporaryDirectory() as tmp:
        binary = build(os.path.join(tmp, "w"))
        for p in procs:
            reps = repetitions(binary, p, a.seconds)
            c1, j1 = callgrind(binary, 1, p, tmp)
            c2, j2 = callgrind(binary, 2, p, tmp)
            counts, jumps = exact(c1, c2, reps), exact(j1, j2, reps)
            db = os.path.join(tmp, "db-" + p)
            subprocess.run([LOUPE, "record", "--freq", str(a.freq), "--db", db, "--", binary, "--reps", str(reps), "--only", p],
                           check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            out = subprocess.run([LOUPE, "calc", "--db", db, "--image", binary, "--procedure", p, "--format", "json"],
                                 check=True, capture_output=True, text=True)
            r = json.loads(out.stdout)
            if not a.quiet:
                hot = sum(x["samples"] for x in r["instructions"])
                known = sum(1 for x in r["instructions"] if counts.get(int(x["address"], 16)))
                print(f"{p}: {hot} samples, {known} of {len(r['instructions'])} instructions with exact counts", file=sys.stderr)
            pp = []
            for x in r["instructions"]:
                n = counts.get(int(x["address"], 16), 0)
                if x["samples"] == 0 or x["executions"] is None or n == 0:
                    continue
                err = 100.0 * (x["executions"] / n - 1)
                pp.append((err, x["samples"]))
                per_conf[x["confidence"]].append((err, x["samples"]))
            insn_pairs += pp
            for e in r["edges"]:
                n = exact_edge(e, counts, jumps)
                if n > 0 and e["executions"] is not None:
                    edge_pairs.append((100.0 * (e["executions"] / n - 1), n))
            per_proc[p] = {"reps": reps, "samples": sum(w for _, w in pp), "within5": within(pp, 5), "within10": within(pp, 10),
                           "within15": within(pp, 15), "period_cycles": r["period_cycles"], "clock": r["clock"]}
            if not a.quiet:
                print(f"{p}: {per_proc[p]}", file=sys.stderr)
    total = sum(w for _, w in insn_pairs) or 1
    off15 = [(e, w) for e, w in insn_pairs if abs(e) > 15]
    off15_low = sum(w for e, w in per_conf["low"] if abs(e) > 15)
    res = {
        "seconds": a.seconds, "freq": a.freq, "samples": total,
        "within5": within(insn_pairs, 5), "within10": within(insn_pairs, 10), "within15": within(insn_pairs, 15),
        "off15_labelled_low": 100.0 * off15_low / (sum(w for _, w in off15) or 1),
        "confidence": {c: {"share": 100.0 * sum(w for _, w in v) / total, "within5": within(v, 5),
                           "within10": within(v, 10), "within15": within(v, 15)} for c, v in per_conf.items()},
        "histogram": histogram(insn_pairs), "edges_within10": within(edge_pairs, 10),
        "edge_histogram": histogram(edge_pairs), "procedures": per_proc,
    }
    if a.json:
        json.dump(res, open(a.json, "w"), indent=1)
    if not a.quiet:
        report(res, sys.stderr)
    if not a.quiet:
        print(file=sys.stderr)
    keys = ["within5", "within10", "within15", "off15_labelled_low", "edges_within10", "procedures"]
    json.dump({k: res[k] for k in keys}, sys.stdout)
    print()


def report(r, f):
    def out(*x):
        print(*x, file=f)

    out(f"calcwork, {r['seconds']} s per procedure, {r['freq']} samples/s, {r['samples']} samples in the procedures")
    out(f"samples within 5%: {r['within5']:.1f}%  10%: {r['within10']:.1f}%  15%: {r['within15']:.1f}%; "
          f"of samples off by >15%, labelled low: {r['off15_labelled_low']:.1f}%")
    out("\n| confidence | share of samples | within 5% | within 10% | within 15% |\n|---|---|---|---|---|")
    for c, v in sorted(r["confidence"].items()):
        out(f"| {c} | {v['share']:.1f}% | {v['within5']:.1f}% | {v['within10']:.1f}% | {v['within15']:.1f}% |")
    out("\n| procedure | repetitions | samples | within 5% | within 10% | within 15% |\n|---|---|---|---|---|---|")
    for p, v in r["procedures"].items():
        out(f"| {p} | {v['reps']} | {v['samples']} | {v['within5']:.1f}% | {v['within10']:.1f}% | {v['within15']:.1f}% |")
    out("\n| error bucket | % of samples (instructions) | % of executions (edges) |\n|---|---|---|")
    for k in r["histogram"]:
        out(f"| {k}% | {r['histogram'][k]:.1f} | {r['edge_histogram'][k]:.1f} |")
    out(f"\nedges within 10%: {r['edges_within10']:.1f}% of edge executions")


if __name__ == "__main__":
    main()
