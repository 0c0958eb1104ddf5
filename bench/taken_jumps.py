#!/usr/bin/env python3
"""Taken jumps of BOLTed binaries, counted exactly by valgrind's callgrind:
the deterministic side of Morph's Figure 3 (bench/optimize_realprogs.py),
free of this host's timing noise.

Block reordering and hot/cold splitting exist to turn taken branches into
fall-throughs; how many taken jumps (unconditional + taken conditional) a
binary executes on the test input is what a layout changed, counted, where
its run time also carries the layout's luck. The figure per profile is the
share of the complete (instrumented) profile's reduction it reaches:
(base - profile) / (base - instr).

Reads WORKDIR/prepared.json (from optimize_realprogs.py --prepare-only and
--runs); times nothing. Test inputs are the timed ones, made smaller for
callgrind's 50x slowdown. Runs are made repeatable: Lua seeds its string
hashes from time() and heap addresses, which moved the same binary's count
by 20% between runs (34-41 M), so time() is pinned by a preloaded shim,
address randomization is off (setarch -R) and the environment is fixed (its
size moves the stack addresses Lua also seeds from).

Jumps between a function and its split-off cold fragment (f, f.cold.0) are
taken jumps too, but callgrind books a jump into another symbol as a call;
they are counted from its call records (before 2026-11-26's twelfth pass
they were not, which hid the cost of cold code that the test runs: Lua's
complete profile counted 36.9 M instead of 52.4 M). CPython runs with the
environment optimize_realprogs.py gives it (its stdlib, PYTHONHASHSEED=0).

With --by-samples DB, each binary's excess over the complete profile is also
grouped by how many timer samples each function has in the Loupe database DB
(0, 1-99, 100-999, 1,000-9,999, 10,000 or more): where a sampled profile is
too thin to lay a function out (BENCHMARKS.md, tenth pass).

With --icache, callgrind also simulates the caches and each binary's I1 misses are reported: on SQLite the
complete profile missed 200 thousand times and Loupe's layouts 488-842 thousand (cachegrind, fourteenth pass),
a cost of code spread over more lines that taken jumps do not see.

Usage: bench/taken_jumps.py --workdir DIR [--binaries base-default,instr,r1-ratio,...] [--by-samples DIR/db-r1] [--icache] PROGRAM
Writes bench/results/taken-jumps-PROGRAM-DATE.json.
"""
import argparse, json, os, subprocess, sys, tempfile, time
from concurrent.futures import ThreadPoolExecutor
from optimize_realprogs import AWK, LOUPE, LUA, PROGRAMS, PY, ROOT
TEST = {"lua": [f"{LUA}/nbody.lua", "20000"], "sqlite-bench": ["query", "40"], "zstd-bench": ["3", "4", "2"],
        "cpython": ["-S", f"{PY}/raytrace.py", "80"], "gawk": ["-v", "n=30000", "-f", f"{AWK}/report.awk"],
        "mawk": ["-v", "n=100000", "-f", f"{AWK}/report_posix.awk"]}


# What the program runs with besides PATH and the time() shim (main sets it from PROGRAMS).
PROGRAM_ENV = {}

FIXED_TIME = "#include <time.h>\ntime_t time(time_t *t) { if (t) *t = 1000000000; return 1000000000; }\n"


def fixed_time_shim(d):
    """A shared object whose time() always returns the same second."""
    src, so = os.path.join(d, "fixtime.c"), os.path.join(d, "fixtime.so")
    with open(src, "w") as f:
        f.write(FIXED_TIME)
    subprocess.run(["gcc", "-shared", "-fPIC", "-O2", "-o", so, src], check=True)
    return so


def function_of(name):
    """A callgrind function name without its recursion depth (`f'2`) or BOLT fragment suffix (`f.cold.0`)."""
    return name.split("'")[0].split(".cold")[0]


def fragment_jump(caller, callee):
    """Whether a callgrind call record is a jump between two fragments of one function (`f` and `f.cold.0`).
    Callgrind books any jump into another symbol as a call, so the jumps into a split-off cold fragment and back
    (`f.cold.0` -> `f'2`) appear only among the calls; they are taken jumps all the same. (A real recursive call
    made from a cold fragment would be counted too; none of the measured programs makes one.)"""
    return function_of(caller) == function_of(callee) and (".cold" in caller or ".cold" in callee)


# With --icache: callgrind's cache simulation, 32 KiB 8-way L1s with 64-byte lines (this host's), a 8 MiB LL.
ICACHE = ["--cache-sim=yes", "--I1=32768,8,64", "--D1=32768,8,64", "--LL=8388608,16,64"]


def taken_jumps(binary, args, shim, icache=False):
    """(taken jumps, per function, simulated I1 misses or None) of one run under callgrind, from its
    --collect-jumps records: `jump=N` is an unconditional jump taken N times, `jcnd=T/E` a conditional one
    taken T times of E; plus the call records that are jumps between a function's fragments
    (`fragment_jump`). I1 misses (with `icache`) come from the run's `summary:` line."""
    with tempfile.NamedTemporaryFile(suffix=".cg") as out:
        # A fixed, minimal environment: its size moves the stack, and with it the address Lua mixes into its
        # string hash seed (the complete profile's binary counted 47.0 or 52.4 M by whether the calling shell
        # had set OLDPWD, the difference all in luaH_getshortstr).
        # The locale stays (gawk converts strings to wide characters under C.UTF-8, not under C).
        env = ["env", "-i", f"PATH={os.environ.get('PATH', '/usr/bin:/bin')}", f"LD_PRELOAD={shim}"]
        env += [f"{k}={v}" for k, v in sorted(os.environ.items()) if k == "LANG" or k.startswith("LC_")]
        env += [f"{k}={v}" for k, v in sorted(PROGRAM_ENV.items())]
        subprocess.run(["setarch", "-R"] + env + ["valgrind", "--tool=callgrind", "--collect-jumps=yes", "--dump-instr=yes",
                        *(ICACHE if icache else []), f"--callgrind-out-file={out.name}", binary] + args,
                       check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        total, per_fn, fn, names, raw, callee = 0, {}, "?", {}, "?", "?"
        events, i1_misses = [], None
        for line in open(out.name, errors="replace"):
            if line.startswith("events:"):
                events = line.split()[1:]
            elif line.startswith("summary:") and "I1mr" in events:
                i1_misses = int(line.split()[1:][events.index("I1mr")])
            elif line.startswith(("fn=", "cfn=")):
                # Compressed names: "fn=(12) name" defines id 12 (so may a call's "cfn="), "fn=(12)" refers to it.
                ref = line.split("=", 1)[1].strip()
                if ref.startswith("("):
                    key, _, name = ref.partition(")")
                    ref = names.setdefault(key, name.strip() or key)
                if line.startswith("fn="):
                    fn, raw = function_of(ref), ref
                else:
                    callee = ref
            elif line.startswith(("jump=", "jcnd=")) or (line.startswith("calls=") and fragment_jump(raw, callee)):
                # "jump=N ...", "jcnd=T/E ...", "calls=N ...": the taken count leads.
                n = int(line.split("=", 1)[1].split()[0].split("/")[0])
                total += n
                per_fn[fn] = per_fn.get(fn, 0) + n
        return total, per_fn, i1_misses


BUCKETS = [(0, "0"), (1, "1-99"), (100, "100-999"), (1000, "1000-9999"), (10000, ">=10000")]


def samples_per_function(db, binary):
    """Timer samples per function of `binary` in Loupe database `db` (`loupe top --by procedure`)."""
    out = subprocess.run([LOUPE, "top", "--db", db, "--by", "procedure", "--limit", "1000000", "--format", "json"],
                         capture_output=True, text=True, check=True).stdout
    rows = json.loads(out)["rows"]
    return {r["procedure"]: r["samples"] for r in rows if os.path.realpath(r["image"]) == os.path.realpath(binary)}


def by_samples(per_fn, instr, samples):
    """Taken jumps over the complete profile's, summed per bucket of the functions' sample counts."""
    out = {name: 0 for _, name in BUCKETS}
    for f in set(per_fn) | set(instr):
        n = samples.get(f, 0)
        name = [b for lo, b in BUCKETS if n >= lo][-1]
        out[name] += per_fn.get(f, 0) - instr.get(f, 0)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--workdir", required=True)
    ap.add_argument("--binaries", default="", help="comma-separated names from prepared.json (default: every binary at BOLT's own layout)")
    ap.add_argument("--top", type=int, default=5, help="functions listed per binary where it differs most from the complete profile")
    ap.add_argument("--by-samples", metavar="DB", help="group each binary's excess by its functions' samples in this Loupe database")
    ap.add_argument("--icache", action="store_true", help="also simulate the instruction cache (callgrind --cache-sim, 32 KiB "
                    "8-way, 64-byte lines) and report each binary's I1 misses: what a layout costs in code spread, "
                    "which taken jumps do not see (about twice as slow)")
    ap.add_argument("program", choices=sorted(TEST))
    a = ap.parse_args()
    PROGRAM_ENV.update(PROGRAMS[a.program].get("env", {}))  # CPython's stdlib and hash seed
    with open(os.path.join(a.workdir, "prepared.json")) as f:
        bins = json.load(f)[0]
    names = a.binaries.split(",") if a.binaries else [n for n in bins if "@" not in n]
    missing = [n for n in names if n not in bins]
    if missing:
        sys.exit(f"taken_jumps: not in {a.workdir}/prepared.json: {', '.join(missing)}")
    for need in ["base-default", "instr"]:
        if need not in names:
            names.insert(0, need)
    with tempfile.TemporaryDirectory() as d, ThreadPoolExecutor(os.cpu_count()) as ex:
        shim = fixed_time_shim(d)
        res = dict(zip(names, ex.map(lambda n: taken_jumps(bins[n], TEST[a.program], shim, a.icache), names)))
    base, full = res["base-default"][0], res["instr"][0]
    print(f"## {a.program}: taken jumps (millions) of {' '.join(os.path.basename(x) for x in TEST[a.program])}; "
          f"share of the complete profile's reduction ({base / 1e6:.1f} -> {full / 1e6:.1f} M)")
    samples = samples_per_function(a.by_samples, bins["base-default"]) if a.by_samples else None
    rows = {}
    for n in names:
        t, per_fn, i1 = res[n]
        share = 100 * (base - t) / (base - full) if base != full else float("nan")
        rows[n] = {"taken_jumps": t, "share_pct": share}
        if i1 is not None:
            rows[n]["i1_misses"] = i1
        worst = sorted(per_fn, key=lambda f: per_fn[f] - res["instr"][1].get(f, 0), reverse=True)[: a.top]
        extra = "" if n in ("base-default", "instr") else "  most over the complete profile: " + ", ".join(
            f"{f} +{(per_fn[f] - res['instr'][1].get(f, 0)) / 1e6:.1f}" for f in worst)
        icache = f"  I1 misses {i1 / 1e3:8.1f} k" if i1 is not None else ""
        print(f"{n:<16} {t / 1e6:8.1f} {share:7.0f}%{icache}{extra}")
        if samples is not None and n != "instr":
            rows[n]["over_complete_by_samples"] = b = by_samples(per_fn, res["instr"][1], samples)
            print(" " * 17 + "over the complete profile by the function's samples: "
                  + ", ".join(f"{k} {v / 1e6:+.2f} M" for k, v in b.items()))
    os.makedirs(os.path.join(ROOT, "bench/results"), exist_ok=True)
    out = os.path.join(ROOT, "bench/results", time.strftime(f"taken-jumps-{a.program}-%Y%m%d-%H%M%S.json"))
    with open(out, "w") as f:
        json.dump({"program": a.program, "test": TEST[a.program], "by_samples_db": a.by_samples, "binaries": rows}, f, indent=1)
    print(f"# written {out}")


if __name__ == "__main__":
    main()
