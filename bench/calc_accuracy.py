#!/usr/bin/env python3
"""Accuracy of `loupe calc` execution counts against exact counts (DCPI §6.2,
Figures 8 and 9), over a suite of programs:
  * calcwork (testdata/workloads): insertion sort, run-length coding, a
    bytecode interpreter, a matrix multiply, a hash-table probe, a random
    branch, a divide chain, a pointer chase; each procedure runs alone
    (`--only`), exact counts from callgrind runs of 1 and 2 repetitions
    (every repetition is identical: count(R) = c1 + (R-1)(c2-c1));
  * real programs built from source by scripts/realprogs.sh: zstd
    (compression), SQLite (database engine), Lua 5.4 (an interpreter running
    sort and n-body scripts). Each is recorded over K identical runs of one
    input; exact counts are K x one callgrind run of that input. The
    procedures judged are the hottest ones with enough samples.
For each (program, procedure) it runs `loupe calc --format json` and prints:
  * the error histogram of instruction execution counts weighted by samples
    (Figure 8), overall, per confidence label and per procedure;
  * the error histogram of edge execution counts weighted by exact edge
    executions (Figure 9).
Run as root from the repository root after `cargo build --release`:
  bench/calc_accuracy.py --seconds 4 --freq 10000 [--cases calcwork,zstd] [--json out.json]
  bench/calc_accuracy.py --keep DIR ...   # keep recordings and exact counts in DIR
  bench/calc_accuracy.py --reuse DIR ...  # re-run only `loupe calc` on them
  bench/calc_accuracy.py --reuse DIR --calc-args '--solver global'  # with other calc options
  bench/calc_accuracy.py --count ...  # also record with `record --count PROC` (issue 30): before/after
                                        # side by side, the share of samples counted and the slowdown
With --count each case is recorded twice, plain and with its procedures
counted (a real program's hottest procedures, as PROC@IMAGE: the runs are
the recorded shell's children) (exact class counts from breakpoint windows over whole calls and an
entry uprobe); the case `counted` (testdata/workloads/counted.c, known counts
by construction) is added. Slowdown = wall time of the counted recording over
the plain one.
"""
import argparse, collections, json, os, shlex, subprocess, sys, tempfile, time

PROCS = ["isort", "rle", "interp", "matmul", "hashprobe", "branchy", "divchain", "chase"]
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LOUPE = os.environ.get("LOUPE_BIN") or os.path.join(ROOT, "target/release/loupe")
REALPROGS = os.environ.get("REALPROGS_SH") or os.path.join(ROOT, "scripts/realprogs.sh")
# Real programs: case -> (binary, arguments of one run); one run takes about 0.5 s of CPU.
# Lua's string hash seed is fixed (luai_makeseed) so that every run hashes alike.
REAL = {
    "zstd": ("zstd-bench", ["3", "32"]),
    "sqlite": ("sqlite-bench", ["query", "150"]),
    "lua-sort": ("lua", ["{lua}/sort.lua", "200000"]),
    "lua-nbody": ("lua", ["{lua}/nbody.lua", "300000"]),
}
REAL_CFLAGS = "-O2 -g -Dluai_makeseed=0u+sizeof"  # expands to 0u+sizeof(L): no shell metacharacters
# A procedure of a real program is judged when it has at least this share of the program's samples.
MIN_SHARE = 0.08


def build(out):
    subprocess.run(["make", "-s", "-C", os.path.join(ROOT, "testdata/workloads"), f"OUT={out}", f"{out}/calcwork"], check=True)
    return os.path.join(out, "calcwork")


def build_real(out):
    r = subprocess.run([REALPROGS, "--out", out, "--cflags", REAL_CFLAGS], check=True, capture_output=True, text=True)
    return r.stdout.strip().splitlines()[-1]


def callgrind(argv, tmp, tag):
    """Per-address execution counts and per-(source, target) jump counts in the main executable argv[0]."""
    out = os.path.join(tmp, f"cg-{tag}.out")
    for attempt in range(6):
        r = subprocess.run(["valgrind", "--tool=callgrind", "--dump-instr=yes", "--dump-line=no", "--collect-jumps=yes",
                            f"--callgrind-out-file={out}"] + argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        # valgrind 3.19 sometimes dies of SIGTRAP in _dl_fini after main has
        # returned (the counts are dumped all the same), and now and then
        # before main returns (SIGTRAP in malloc, in bursts on the loaded VM):
        # such a partial count is taken again.
        died_early = "Process terminating" in r.stderr and "_dl_fini" not in r.stderr
        if os.path.exists(out) and not died_early:
            break
        print(f"callgrind of {argv} ended early ({r.returncode}); again", file=sys.stderr)
        time.sleep(5)
    else:
        sys.exit(f"callgrind did not complete {argv}: {r.stderr[-2000:]}")
    counts, jumps = parse_callgrind(out, os.path.realpath(argv[0]))
    if not counts:
        sys.exit(f"callgrind counted nothing in {argv[0]}: {r.stderr[-2000:]}")
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


def cpu_seconds(argv, env=None):
    r0 = os.times().children_user + os.times().children_system
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, env=env)
    return os.times().children_user + os.times().children_system - r0


def repetitions(binary, proc, seconds):
    """Repetitions of `proc` that run about `seconds` of CPU time (doubling until a run takes 0.3 s)."""
    n = 20
    while True:
        t = cpu_seconds([binary, "--reps", str(n), "--only", proc])
        if t >= 0.3:
            return max(2, int(seconds * n / t))
        n *= 4


def record(db, freq, argv, count=()):
    """Records argv into db (counting the procedures in `count`); returns the wall seconds it took."""
    extra = ["--count", ",".join(count)] if count else []
    t = time.time()
    r = subprocess.run([LOUPE, "record", "--no-stacks", "--freq", str(freq), "--db", db] + extra + ["--"] + argv, check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    took = time.time() - t
    for line in r.stderr.splitlines():
        if line.startswith("loupe: counted"):
            print(line, file=sys.stderr)
    return took


def record_both(a, db, argv, procs):
    """The plain recording, and with --count the counted one beside it: {db, db_count, slowdown}."""
    plain = record(db, a.freq, argv)
    if not a.count:
        return {"db": db}
    counted = record(db + "-count", a.freq, argv, procs)
    return {"db": db, "db_count": db + "-count", "slowdown": counted / max(plain, 1e-9)}


def hottest(db, binary, seconds, freq):
    """Procedures of `binary` with at least MIN_SHARE of its samples."""
    out = subprocess.run([LOUPE, "top", "--db", db, "--image", os.path.basename(binary), "--format", "json", "--limit", "30"],
                         check=True, capture_output=True, text=True).stdout
    rows = [r for r in json.loads(out)["rows"] if os.path.realpath(r["image"]) == os.path.realpath(binary)]
    total = sum(r["samples"] for r in rows) or 1
    return [r["procedure"] for r in rows if r["samples"] >= MIN_SHARE * total]


def prepare(a, keep):
    """Records every case and takes its exact counts; returns [(case, binary, db, procs, counts, jumps)] as saved in keep."""
    cases = []
    want = a.cases.split(",")
    if "calcwork" in want:
        binary = build(os.path.join(keep, "w"))
        for p in a.procs.split(","):
            reps = repetitions(binary, p, a.seconds)
            c1, j1 = callgrind([binary, "--reps", "1", "--only", p], keep, p + "-1")
            c2, j2 = callgrind([binary, "--reps", "2", "--only", p], keep, p + "-2")
            dbs = record_both(a, os.path.join(keep, "db-" + p), [binary, "--reps", str(reps), "--only", p], [p])
            cases.append({"case": "calcwork", "binary": binary, **dbs, "procs": [p], "runs": reps,
                          "counts": exact(c1, c2, reps), "jumps": exact(j1, j2, reps)})
    if "counted" in want:
        # Known counts by construction: count_loop called M times, its loop N times a call, its if taken K of N.
        subprocess.run(["make", "-s", "-C", os.path.join(ROOT, "testdata/workloads"), f"OUT={keep}/w", f"{keep}/w/counted"], check=True)
        binary = os.path.join(keep, "w", "counted")
        argv = [binary, "60000", "400", "100"]
        c1, j1 = callgrind(argv, keep, "counted")
        dbs = record_both(a, os.path.join(keep, "db-counted"), argv, ["count_loop"])
        cases.append({"case": "counted", "binary": binary, **dbs, "procs": ["count_loop"], "runs": 1, "counts": c1, "jumps": j1})
    real = [c for c in want if c in REAL]
    if real:
        bindir = build_real(os.path.join(keep, "real"))
        lua_dir = os.path.join(os.path.dirname(os.path.abspath(REALPROGS)), "../testdata/realprogs/lua")
        for c in real:
            prog, args = REAL[c]
            argv = [os.path.join(bindir, prog)] + [x.format(lua=lua_dir) for x in args]
            one = cpu_seconds(argv)
            runs = max(2, round(a.seconds * 3 / max(one, 0.01)))
            c1, j1 = callgrind(argv, keep, c)
            db = os.path.join(keep, "db-" + c)
            loop = f"for i in $(seq {runs}); do {shlex.join(argv)} >/dev/null; done"
            plain = record(db, a.freq, ["/bin/sh", "-c", loop])
            procs = hottest(db, argv[0], a.seconds, a.freq)
            dbs = {"db": db}
            if a.count and procs:
                # The runs are the shell's children: their procedures are named by image (PROC@IMAGE).
                counted = record(db + "-count", a.freq, ["/bin/sh", "-c", loop], [f"{p}@{argv[0]}" for p in procs])
                dbs.update(db_count=db + "-count", slowdown=counted / max(plain, 1e-9))
            cases.append({"case": c, "binary": argv[0], **dbs, "procs": procs, "runs": runs,
                          "counts": {k: runs * v for k, v in c1.items()}, "jumps": {k: runs * v for k, v in j1.items()}})
    return cases


def save(cases, keep):
    def enc(d):
        return {f"{k[0]:x}>{k[1]:x}" if isinstance(k, tuple) else f"{k:x}": v for k, v in d.items()}
    json.dump([dict(c, counts=enc(c["counts"]), jumps=enc(c["jumps"])) for c in cases], open(os.path.join(keep, "cases.json"), "w"))


def load(keep):
    def dec(d, pair):
        if pair:
            return {tuple(int(x, 16) for x in k.split(">")): v for k, v in d.items()}
        return {int(k, 16): v for k, v in d.items()}
    return [dict(c, counts=dec(c["counts"], False), jumps=dec(c["jumps"], True)) for c in json.load(open(os.path.join(keep, "cases.json")))]


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
    ap.add_argument("--seconds", type=float, default=4.0, help="CPU seconds per calcwork procedure (real programs: 3x)")
    ap.add_argument("--freq", type=int, default=10000)
    ap.add_argument("--procs", default=",".join(PROCS), help="calcwork procedures")
    ap.add_argument("--cases", default=",".join(["calcwork"] + list(REAL)), help="calcwork and/or " + ",".join(REAL))
    ap.add_argument("--keep", help="keep recordings and exact counts in this directory")
    ap.add_argument("--reuse", help="re-run only `loupe calc` over --keep directories (comma-separated)")
    ap.add_argument("--calc-args", default="", help="extra `loupe calc` arguments, e.g. '--solver global'")
    ap.add_argument("--count", action="store_true", help="also record with --count and compare (issue 30)")
    ap.add_argument("--json")
    ap.add_argument("--quiet", action="store_true")
    a = ap.parse_args()
    if a.count and "counted" not in a.cases.split(","):
        a.cases += ",counted"
    with tempfile.TemporaryDirectory() as tmp:
        if a.reuse:
            cases = [c for d in a.reuse.split(",") for c in load(d) if c["case"] in a.cases.split(",")]
        else:
            keep = a.keep or tmp
            os.makedirs(keep, exist_ok=True)
            cases = prepare(a, keep)
            save(cases, keep)
        res = evaluate(cases, a.quiet, shlex.split(a.calc_args))
        if any("db_count" in c for c in cases):
            counted = [dict(c, db=c["db_count"]) for c in cases if "db_count" in c]
            after = evaluate(counted, a.quiet, shlex.split(a.calc_args))
            for c in counted:
                for p in c["procs"]:
                    name = p if c["case"] == "calcwork" else f"{c['case']}/{p}"
                    if name in after["procedures"]:
                        after["procedures"][name]["slowdown"] = c["slowdown"]
            res["after_count"] = after
    res.update({"seconds": a.seconds, "freq": a.freq})
    if a.json:
        json.dump(res, open(a.json, "w"), indent=1)
    if not a.quiet:
        report(res, sys.stderr)
        print(file=sys.stderr)
        if "after_count" in res:
            print("\n=== with record --count ===", file=sys.stderr)
            report(dict(res["after_count"], seconds=a.seconds, freq=a.freq), sys.stderr)
            print(file=sys.stderr)
    keys = ["within5", "within10", "within15", "off15_labelled_low", "edges_within10", "procedures"]
    summary = {k: res[k] for k in keys}
    if "after_count" in res:
        summary["after_count"] = {k: res["after_count"][k] for k in keys + ["counted_share", "counted_within5", "counted_within10", "counted_within15"]}
    json.dump(summary, sys.stdout)
    print()


def evaluate(cases, quiet, calc_args=()):
    insn_pairs, edge_pairs, per_conf, per_proc, counted_pairs = [], [], collections.defaultdict(list), {}, []
    for c in cases:
        counts, jumps = c["counts"], c["jumps"]
        for p in c["procs"]:
            out = subprocess.run([LOUPE, "calc", "--db", c["db"], "--image", c["binary"], "--procedure", p, "--format", "json", *calc_args],
                                 capture_output=True, text=True)
            if out.returncode != 0:
                print(f"{c['case']}/{p}: loupe calc failed: {out.stderr.strip()}", file=sys.stderr)
                continue
            r = json.loads(out.stdout)
            pp, counted_samples = [], 0
            for x in r["instructions"]:
                n = counts.get(int(x["address"], 16), 0)
                if x["samples"] == 0 or x["executions"] is None or n == 0:
                    continue
                err = 100.0 * (x["executions"] / n - 1)
                pp.append((err, x["samples"]))
                counted_samples += x["samples"] if x.get("how") == "counted" else 0
                if x.get("how") == "counted":
                    counted_pairs.append((err, x["samples"]))
                per_conf[x["confidence"]].append((err, x["samples"]))
            insn_pairs += pp
            for e in r["edges"]:
                n = exact_edge(e, counts, jumps)
                if n > 0 and e["executions"] is not None:
                    edge_pairs.append((100.0 * (e["executions"] / n - 1), n))
            name = p if c["case"] == "calcwork" else f"{c['case']}/{p}"
            per_proc[name] = {"runs": c["runs"], "samples": sum(w for _, w in pp), "within5": within(pp, 5),
                              "within10": within(pp, 10), "within15": within(pp, 15), "period_cycles": r["period_cycles"],
                              "clock": r["clock"], "counted": 100.0 * counted_samples / (sum(w for _, w in pp) or 1)}
            if not quiet:
                print(f"{name}: {per_proc[name]}", file=sys.stderr)
    total = sum(w for _, w in insn_pairs) or 1
    off15 = [(e, w) for e, w in insn_pairs if abs(e) > 15]
    off15_low = sum(w for e, w in per_conf["low"] if abs(e) > 15)
    return {
        "samples": total,
        "within5": within(insn_pairs, 5), "within10": within(insn_pairs, 10), "within15": within(insn_pairs, 15),
        "off15_labelled_low": 100.0 * off15_low / (sum(w for _, w in off15) or 1),
        "confidence": {c: {"share": 100.0 * sum(w for _, w in v) / total, "within5": within(v, 5),
                           "within10": within(v, 10), "within15": within(v, 15)} for c, v in per_conf.items()},
        "histogram": histogram(insn_pairs), "edges_within10": within(edge_pairs, 10),
        "edge_histogram": histogram(edge_pairs), "procedures": per_proc,
        "counted_share": 100.0 * sum(v["samples"] * v["counted"] / 100.0 for v in per_proc.values()) / total,
        # Of the counted samples alone (issue 30's goal: DCPI's 73 / 87% within 5 / 10%).
        "counted_within5": within(counted_pairs, 5), "counted_within10": within(counted_pairs, 10),
        "counted_within15": within(counted_pairs, 15),
    }


def report(r, f):
    def out(*x):
        print(*x, file=f)

    out(f"{r['seconds']} s per calcwork procedure, {r['freq']} samples/s, {r['samples']} samples in the procedures")
    out(f"samples within 5%: {r['within5']:.1f}%  10%: {r['within10']:.1f}%  15%: {r['within15']:.1f}%; "
          f"of samples off by >15%, labelled low: {r['off15_labelled_low']:.1f}%")
    if r.get("counted_share"):
        out(f"counted: {r['counted_share']:.1f}% of samples, of them within 5%: {r['counted_within5']:.1f}%  "
            f"10%: {r['counted_within10']:.1f}%  15%: {r['counted_within15']:.1f}%")
    out("\n| confidence | share of samples | within 5% | within 10% | within 15% |\n|---|---|---|---|---|")
    for c, v in sorted(r["confidence"].items()):
        out(f"| {c} | {v['share']:.1f}% | {v['within5']:.1f}% | {v['within10']:.1f}% | {v['within15']:.1f}% |")
    out("\n| procedure | runs | samples | within 5% | within 10% | within 15% | counted | slowdown |\n|---|---|---|---|---|---|---|---|")
    for p, v in r["procedures"].items():
        slow = f"{v['slowdown']:.2f}x" if "slowdown" in v else "-"
        out(f"| {p} | {v['runs']} | {v['samples']} | {v['within5']:.1f}% | {v['within10']:.1f}% | {v['within15']:.1f}% "
            f"| {v.get('counted', 0):.0f}% | {slow} |")
    out("\n| error bucket | % of samples (instructions) | % of executions (edges) |\n|---|---|---|")
    for k in r["histogram"]:
        out(f"| {k}% | {r['histogram'][k]:.1f} | {r['edge_histogram'][k]:.1f} |")
    out(f"\nedges within 10%: {r['edges_within10']:.1f}% of edge executions")


if __name__ == "__main__":
    main()
