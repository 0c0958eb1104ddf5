#!/usr/bin/env python3
"""Morph's Figure 3 on real programs built from source (Lua 5.4, SQLite,
zstd, CPython 3.11, gawk 5.2, mawk 1.3.4; scripts/realprogs.sh): speedup of the test input after
llvm-bolt with Loupe's sampled profile of the training inputs, beside
llvm-bolt with BOLT's own instrumented (complete) profile of the same
training inputs, judged against five differently laid-out baseline builds.

Builds (gcc 12 -O2 -g -fno-pie, linked -no-pie -Wl,--emit-relocs: BOLT 19
needs relocations to move functions, and cannot rewrite switch dispatch in
a PIE build):
  base-default        gcc's default alignment: the binary that is optimized
  base-a1 .. base-a64 -falign-functions=N -falign-loops=N, N = 1, 8, 32, 64
                      (cpython, gawk, mawk: five full builds too, each with -fno-reorder-blocks-and-partition:
                      gcc's .cold fragments make BOLT 19 ignore _PyEval_EvalFrameDefault; gawk's two
                      interpreters, r_interpret and h_interpret, each have an ambiguous r_interpret.cold/1)
  loupe-Nk            base-default + llvm-bolt, profile = `loupe optimize export
                      --format bolt-edges` after `loupe record` (cpu-clock, 1000 Hz, Morph's
                      rate) of training passes into one database (runs combined directly),
                      taken when the profile first holds N thousand samples (--densities):
                      passes over the training inputs repeat until the largest density
  loupe-Nk-noskid     the largest density's profile without the skid correction (--no-skid)
  instr               base-default + llvm-bolt, profile = `llvm-bolt -instrument`
                      runs of the same training inputs, merged with merge-fdata
  P@V                 with --bolt-layouts P: profile P's BOLT run again in layout variant V
                      (a16/a32: hot functions aligned at 16/32 bytes instead of 64; b16/b32:
                      hot blocks aligned at 16/32, see BOLT_VARIANTS): five layouts of the
                      same optimization, reported as one median

Each round runs every binary once on the test input, order rotated per
round; the figure is the child's user+system CPU time (wait4 rusage).
Also reported per Loupe profile, deterministic: its branch agreement with
the complete profile (see `agreement`). `--rounds 0` builds the profiles
and reports only that (no timing: usable on a loaded machine).

Usage: bench/optimize_realprogs.py [--rounds N] [--repeat R] [--densities 2000,10000,30000] [--workdir DIR] [PROGRAM...]
       bench/optimize_realprogs.py --prepare-only --workdir DIR PROGRAM   (then, on a quiet machine:)
       bench/optimize_realprogs.py --measure-only --rounds 30 --workdir DIR PROGRAM
       bench/optimize_realprogs.py --measure-only --densify 300000 --train-hz 10000 --rounds 0 --workdir DIR PROGRAM
       bench/optimize_realprogs.py --measure-only --bolt-layouts loupe-30k,instr \
           --binaries base-default,base-a1,base-a8,base-a32,base-a64,loupe-30k,instr --rounds 20 --workdir DIR PROGRAM
       bench/optimize_realprogs.py --measure-only --runs 3 --train-hz 10000 --rounds 0 --workdir DIR PROGRAM   (then time
           --binaries base-default,base-a1,base-a8,base-a32,base-a64,instr,r1-ratio,r1-infer,... on a quiet machine;
           --paired when the host's speed drifts: each binary against a base-default run right before it;
           --fixed-env to pin the runs to a CPU, without ASLR, time() fixed)
       bench/optimize_realprogs.py --measure-only --runs 3 --train-hz 10000 --rounds 0 --probe-seconds 60 \
           --probe-functions 48 --probe-more 180 --workdir DIR PROGRAM   (adds rR-probe, and rR-more: 180 s more probing)
Every timing ends with 95% intervals from resampling rounds: per profile over its layouts, and per export
method over every independent run's layouts (all-ratio, all-infer, all-probe).
       bench/optimize_realprogs.py --measure-only --hybrids loupe-300k --rounds 0 --workdir DIR PROGRAM
Environment: LOUPE (default target/release/loupe), BOLT (default /usr/lib/llvm-19/bin/llvm-bolt).
"""
import argparse, json, os, re, shutil, statistics, subprocess, sys, tempfile, time
from common import cpu_time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LOUPE = os.environ.get("LOUPE", os.path.join(ROOT, "target/release/loupe"))
BOLT = os.environ.get("BOLT", "/usr/lib/llvm-19/bin/llvm-bolt")
MERGE = "/usr/lib/llvm-19/bin/merge-fdata"
LUA = os.path.join(ROOT, "testdata/realprogs/lua")
PY = os.path.join(ROOT, "testdata/realprogs/python")
AWK = os.path.join(ROOT, "testdata/realprogs/awk")
# CPython's binaries run away from their build tree (BOLT writes them into the workdir), so the stdlib comes
# from the unpacked source tree realprogs.sh keeps: PYTHONHOME there (no prefix search, no warnings) and its
# Lib on PYTHONPATH; -S (in the arguments) skips site. The workloads use only built-in modules. A fixed
# hash seed and no .pyc writes make every run do the same work.
CPYTHON_SRC = os.path.join(ROOT, "testdata/realprogs/build/Python-3.11.2")
CPYTHON_ENV = {"PYTHONHOME": CPYTHON_SRC, "PYTHONPATH": os.path.join(CPYTHON_SRC, "Lib"), "PYTHONHASHSEED": "0",
               "PYTHONDONTWRITEBYTECODE": "1"}
BOLT_OPTS = ["-reorder-blocks=ext-tsp", "-split-functions", "-split-all-cold", "-reorder-functions=hfsort"]

# Training inputs and a different test input per program.
PROGRAMS = {
    "lua": {
        "train": [[f"{LUA}/fib.lua", "35"], [f"{LUA}/sort.lua", "300000"], [f"{LUA}/strings.lua", "300000"]],
        "test": [f"{LUA}/nbody.lua", "300000"],
        "loop": "luaV_execute",  # the interpreter loop, for --hybrids
        # Lua seeds its string hashes from time(), a heap and a stack address and &lua_newstate, so every layout
        # (BOLT moves lua_newstate), and even the environment's size, hashed differently: the same binary counted
        # 47.0 or 52.4 M taken jumps on the test input by the environment alone (bench/taken_jumps.py). A fixed
        # seed leaves the layout's own effect.
        "cflags": f"-include {ROOT}/testdata/realprogs/lua_fixed_seed.h",
    },
    "sqlite-bench": {"train": [["insert", "800"], ["mixed", "600"], ["query", "60"]], "test": ["query", "150"], "loop": "sqlite3VdbeExec"},
    "zstd-bench": {"train": [["3", "48", "1"], ["3", "48", "3"], ["1", "48", "5"]], "test": ["3", "32", "2"]},
    "cpython": {
        "train": [["-S", f"{PY}/sched.py", "12000"], ["-S", f"{PY}/text.py", "40000"], ["-S", f"{PY}/recur.py", "9"]],
        "test": ["-S", f"{PY}/raytrace.py", "240"],
        "loop": "_PyEval_EvalFrameDefault",
        "cflags": "-fno-reorder-blocks-and-partition",
        "env": CPYTHON_ENV,
    },
    # The test script parses records with a field separator, sorts keys and formats a report; training
    # exercises arrays, string functions and whitespace field splitting, each on its own.
    "gawk": {
        "train": [["-v", "n=1000000", "-f", f"{AWK}/arrays.awk"], ["-v", "n=300000", "-f", f"{AWK}/strings.awk"],
                  ["-v", "n=300000", "-f", f"{AWK}/fields.awk"]],
        "test": ["-v", "n=300000", "-f", f"{AWK}/report.awk"],
        "loop": "r_interpret",
        "cflags": "-fno-reorder-blocks-and-partition",
    },
    # Debian's own awk, a bytecode interpreter: the same training scripts (more iterations: it is 3x faster
    # than gawk) and report.awk's portable twin (its own quicksort, as mawk has no asorti).
    "mawk": {
        "train": [["-v", "n=2000000", "-f", f"{AWK}/arrays.awk"], ["-v", "n=1000000", "-f", f"{AWK}/strings.awk"],
                  ["-v", "n=500000", "-f", f"{AWK}/fields.awk"]],
        "test": ["-v", "n=1000000", "-f", f"{AWK}/report_posix.awk"],
        "loop": "execute",
        "cflags": "-fno-reorder-blocks-and-partition",
    },
}
# Each training input runs this many times for the instrumented profile (Morph repeated its training inputs too).
TRAIN_REPEAT = 2  # --repeat
# Sample counts at which Loupe's profile is taken: the density curve (Morph's and AutoFDO's argument).
DENSITIES = [2000, 10000, 30000]  # --densities
LAYOUTS = {"base-default": "", "base-a1": "1", "base-a8": "8", "base-a32": "32", "base-a64": "64"}


def sh(args, **kw):
    return subprocess.run(args, check=True, capture_output=True, text=True, **kw)


def build(prog, out, align):
    cflags = " ".join(filter(None, ["-O2 -g -fno-pie", PROGRAMS[prog].get("cflags", "")]))
    cflags += f" -falign-functions={align} -falign-loops={align}" if align else ""
    sh([os.path.join(ROOT, "scripts/realprogs.sh"), "--out", out, "--cflags", cflags, "--ldflags", "-no-pie -Wl,--emit-relocs", prog])
    return os.path.join(out, prog)


def bolt(base, fdata, out, extra=()):
    log = sh([BOLT, base, "-o", out, f"-data={fdata}"] + BOLT_OPTS + list(extra))
    # Profiles BOLT drops (a branch it cannot match: "stale") or cannot use (functions it cannot rewrite): say so.
    keep = ("have non-empty execution profile", "objects was ignored", "splitting separates", "invalid (possibly stale) profile",
            "with profile could not be optimized")
    return "; ".join(l.strip().replace("BOLT-INFO: ", "") for l in (log.stdout + log.stderr).splitlines() if any(k in l for k in keep))


def branches(fdata):
    """Intra-function branch records of an fdata file: (function, branch offset) -> {target offset: count}."""
    d = {}
    for line in open(fdata):
        f = line.split()
        if len(f) == 8 and f[1] == f[4]:
            t = d.setdefault((f[1], int(f[2], 16)), {})
            t[int(f[5], 16)] = t.get(int(f[5], 16), 0) + int(f[7])
    return d


def agreement(ref_fdata, fdata, conditional_only=False):
    """Share of the complete profile's branch executions (branches with two or more targets) whose most
    frequent target the sampled profile also ranks first: a deterministic measure of the profile's accuracy.
    `conditional_only`: two-target branches only (indirect jumps, whose most frequent target rarely matters to
    the layout and is often a near tie, left out)."""
    ref, ours = branches(ref_fdata), branches(fdata)
    total = agree = 0
    for k, t in ref.items():
        if len(t) < 2 or (conditional_only and len(t) != 2):
            continue
        total += sum(t.values())
        o = ours.get(k)
        if o and max(o, key=o.get) == max(t, key=t.get):
            agree += sum(t.values())
    return 100 * agree / total if total else 0.0


def density_name(n):
    return f"loupe-{n // 1000}k" if n % 1000 == 0 else f"loupe-{n}"


def train_loupe(spec, d, base):
    """Training passes under `loupe record` until each density is reached; a BOLT build per density."""
    db = os.path.join(d, "db")
    bins, matched, info = {}, {}, {}
    samples, passes, curve = 0, 0, []
    for target in DENSITIES:
        while samples < target:
            for args in spec["train"]:
                sh([LOUPE, "record", "--db", db, "--freq", "1000", "--", base] + args)
            passes += 1
            prof = exported(db, base)
            samples = prof["raw_samples"]
            curve.append((samples, len(prof["functions"])))
        name = density_name(target)
        fdata = os.path.join(d, f"{name}.fdata")
        sh([LOUPE, "optimize", "export", "--format", "bolt-edges", "--db", db, base, "-o", fdata])
        bins[name] = os.path.join(d, f"{name}-bolt")
        matched[name] = bolt(base, fdata, bins[name])
        info[name] = {"samples": samples, "passes": passes, "functions": len(prof["functions"]), "fdata": fdata}
    # The densest profile once more without the skid correction (`--no-skid`), to measure that choice.
    name = density_name(DENSITIES[-1]) + "-noskid"
    fdata = os.path.join(d, f"{name}.fdata")
    sh([LOUPE, "optimize", "export", "--format", "bolt-edges", "--no-skid", "--db", db, base, "-o", fdata])
    bins[name] = os.path.join(d, f"{name}-bolt")
    matched[name] = bolt(base, fdata, bins[name])
    info[name] = dict(info[density_name(DENSITIES[-1])], fdata=fdata)
    # Coverage plateau: the first pass after which the next added fewer than 5% more sampled functions.
    plateau = next((a[0] for a, b in zip(curve, curve[1:]) if b[1] < 1.05 * a[1]), None)
    print(f"#   coverage per training pass (samples, sampled functions): {curve}; plateau from {plateau} samples")
    return bins, matched, info


def densify(prog, d, bins, info, matched, target, freq):
    """More training passes into the prepared database until it holds `target` samples (at `freq` Hz: the
    same profile a daemon at Morph's 1000 Hz collects over target/1000 s of the program's CPU, in less wall
    time), then that profile's BOLT build, as `densities` does."""
    base, db = bins["base-default"], os.path.join(d, "db")
    name = density_name(target)
    # The main database's densest profile so far (--runs profiles come from databases of their own).
    last = max((v for v in info.values() if "passes" in v), key=lambda v: v["samples"])
    prof, more = train_to(prog, db, base, target, freq)
    samples, passes = prof["raw_samples"], last["passes"] + more
    fdata = os.path.join(d, f"{name}.fdata")
    sh([LOUPE, "optimize", "export", "--format", "bolt-edges", "--db", db, base, "-o", fdata])
    bins[name] = os.path.join(d, f"{name}-bolt")
    matched[name] = bolt(base, fdata, bins[name])
    info[name] = {"samples": samples, "passes": passes, "functions": len(prof["functions"]), "train_hz": freq,
                  "branch_agreement_pct": agreement(os.path.join(d, "instr.fdata"), fdata)}
    print(f"# {prog}: {name}: {info[name]}")


def prepare(prog, d):
    spec = PROGRAMS[prog]
    bins = {name: build(prog, os.path.join(d, "builds", name), al) for name, al in LAYOUTS.items()}
    base = bins["base-default"]
    lbins, matched, info = train_loupe(spec, d, base)
    bins.update(lbins)
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
    for v in info.values():
        v["branch_agreement_pct"] = agreement(ifd, v.pop("fdata"))
    return bins, info, matched


# BOLT's own layout varied without changing what the profile decides: each optimized binary is one draw
# of layout luck, like each baseline layout; five draws per profile let its median be compared with the
# baselines' median instead of one lucky or unlucky binary. Hot functions aligned at 16 or 32 bytes instead
# of BOLT's 64 move every function's code within its cache lines; aligning hot blocks (BOLT's
# -align-blocks, at 16 or 32) moves the code inside functions, as -falign-loops does for the baselines.
# (Alignments of 128 or 256 bytes, used before 2026-11-23 06:50, leave every function where 64 does modulo
# 64 bytes: three of those five draws were nearly one.)
BOLT_VARIANTS = {
    "a16": ["-align-functions=16", "-align-functions-max-bytes=16"],
    "a32": ["-align-functions=32", "-align-functions-max-bytes=32"],
    "b16": ["-align-blocks", "-block-alignment=16"],
    "b32": ["-align-blocks", "-block-alignment=32"],
}


def bolt_layouts(d, bins, matched, profiles):
    base = bins["base-default"]
    for p in profiles:
        fdata = os.path.join(d, f"{p}.fdata")
        for v, opts in BOLT_VARIANTS.items():
            name, out = f"{p}@{v}", os.path.join(d, f"{p}-{v}-bolt")
            if name not in bins or not os.path.exists(out):
                matched[name] = bolt(base, fdata, out, opts)
                bins[name] = out


def exported(db, base, check=True):
    """`loupe optimize export --format json` of `base`'s profile in `db`; None when there is none and not `check`."""
    r = subprocess.run([LOUPE, "optimize", "export", "--format", "json", "--db", db, base], capture_output=True, text=True, check=check)
    return json.loads(r.stdout) if r.returncode == 0 else None


def train_to(prog, db, base, target, freq):
    """Training passes at `freq` Hz into `db` until it holds `target` samples (none when it already does);
    returns its exported profile and the passes run."""
    prof = exported(db, base, check=False) if os.path.isdir(db) else None
    passes = 0
    while (prof["raw_samples"] if prof else 0) < target:
        for args in PROGRAMS[prog]["train"]:
            sh([LOUPE, "record", "--db", db, "--freq", str(freq), "--", base] + args)
        passes += 1
        prof = exported(db, base)
    return prof, passes


# Export methods compared over independent training runs (--runs): name -> extra `optimize export` options.
METHODS = {"ratio": ["--no-probes"], "infer": ["--infer", "--no-probes"]}
# With --probe-seconds: the profile with the blocks `loupe optimize probe` counted (execute breakpoints).
PROBE_METHOD = {"probe": []}


def probe_to(prog, db, base, seconds, period_ms, functions):
    """`loupe optimize probe` over the training inputs, repeated until `seconds` of probing; none when the
    database already has probe counts. Returns the seconds probed."""
    if os.path.isdir(os.path.join(db, "probes")):
        return 0.0
    return probe_for(prog, db, base, seconds, period_ms, functions)


def probe_for(prog, db, base, seconds, period_ms, functions):
    """`loupe optimize probe` over the training inputs into `db`, repeated until `seconds` of probing (counts add
    to any already there). Returns the seconds probed."""
    t0 = time.time()
    while time.time() - t0 < seconds:
        for args in PROGRAMS[prog]["train"]:
            sh([LOUPE, "optimize", "probe", "--db", db, "--half-life", "0", "--period-ms", str(period_ms), "--functions",
                str(functions), base, "--", base] + args)
    return time.time() - t0


def independent_runs(prog, d, bins, info, matched, runs, target, freq, probe=None, more=0):
    """`runs` databases, each trained from empty to `target` samples (kept and reused by later calls), each
    exported by every method in METHODS and BOLTed at the five layouts: rR-METHOD. One database is one draw of
    which samples the profile happened to get; a method is judged over several draws (BENCHMARKS.md, sixth pass:
    the default export of six 300k Lua databases reached 0-76% of the complete profile's gain)."""
    base = bins["base-default"]
    for r in range(1, runs + 1):
        db = os.path.join(d, f"db-r{r}")
        samples = train_to(prog, db, base, target, freq)[0]["raw_samples"]
        methods = dict(METHODS)
        if probe:
            probed = probe_to(prog, db, base, *probe)
            print(f"# {prog}: db-r{r}: probed {probed:.0f} s", flush=True)
            methods.update(PROBE_METHOD)
        exports = [(f"r{r}-{m}", db, extra, {}) for m, extra in methods.items()]
        if probe and more:
            # More probing on a copy (db-rR-more, kept and reused): the same samples, the probe's counts of
            # more functions for longer (BENCHMARKS.md, thirteenth pass: gawk's and mawk's probe exports went
            # from 68-87% of the complete profile's taken-jump reduction to 92-100% with 48 functions, 240 s).
            more_db = db + "-more"
            if not os.path.isdir(more_db):
                shutil.copytree(db, more_db + ".part")
                probed = probe_for(prog, more_db + ".part", base, more, *probe[1:])
                os.rename(more_db + ".part", more_db)
                print(f"# {prog}: db-r{r}-more: probed {probed:.0f} s more", flush=True)
            exports.append((f"r{r}-more", more_db, [], {"probe_more_s": more, "probe_functions": probe[2]}))
        for name, source, extra, note in exports:
            fdata = os.path.join(d, f"{name}.fdata")
            sh([LOUPE, "optimize", "export", "--format", "bolt-edges", "--db", source, base, "-o", fdata] + extra)
            bins[name] = os.path.join(d, f"{name}-bolt")
            matched[name] = bolt(base, fdata, bins[name])
            info[name] = {"samples": samples, "train_hz": freq, **note,
                          "branch_agreement_pct": agreement(os.path.join(d, "instr.fdata"), fdata),
                          "conditional_agreement_pct": agreement(os.path.join(d, "instr.fdata"), fdata, conditional_only=True)}
            bolt_layouts(d, bins, matched, [name])
            print(f"# {prog}: {name}: {info[name]}", flush=True)


def hybrids(prog, d, bins, matched, profile):
    """Record-level mixtures of Loupe's profile `profile` and the complete one, to locate what the sampled
    profile gets wrong: hcov = the complete profile cut to the functions `profile` has; hvm / hivm = one
    profile with the interpreter loop's records of the other; hintraI / hintraL = one profile's records inside
    functions with the other's calls between them."""
    def recs(name):
        with open(os.path.join(d, f"{name}.fdata")) as f:
            return [l.split() for l in f if len(l.split()) == 8]
    L, I = recs(profile), recs("instr")
    have = {r[1] for r in L} | {r[4] for r in L}
    intra = lambda r: r[1] == r[4]
    mix = {"hcov": [r for r in I if r[1] in have and r[4] in have],
           "hintraI": [r for r in I if intra(r)] + [r for r in L if not intra(r)],
           "hintraL": [r for r in L if intra(r)] + [r for r in I if not intra(r)]}
    loop = PROGRAMS[prog].get("loop")
    if loop:
        mix["hvm"] = [r for r in L if r[1] != loop] + [r for r in I if r[1] == loop]
        mix["hivm"] = [r for r in I if r[1] != loop] + [r for r in L if r[1] == loop]
    for name, rs in mix.items():
        fdata = os.path.join(d, f"{name}.fdata")
        with open(fdata, "w") as f:
            f.writelines(" ".join(r) + "\n" for r in rs)
        bins[name] = os.path.join(d, f"{name}-bolt")
        matched[name] = bolt(bins["base-default"], fdata, bins[name])
    bolt_layouts(d, bins, matched, list(mix))


# How timed runs are made (--fixed-env sets it): cpu_time's cpu and no_aslr, and a time() shim to preload.
RUN = {}


def fixed_env(d):
    """Timed runs made repeatable: the child pinned to the last CPU (this script to the first), no address
    randomization, time() pinned by a preloaded shim (Lua seeds its string hashes from time() and heap
    addresses: the same binary's taken jumps moved 34-41 M between runs, bench/taken_jumps.py). What is left
    between runs of one binary is the host; between binaries, the code's layout."""
    from taken_jumps import fixed_time_shim
    last = max(os.sched_getaffinity(0))
    os.sched_setaffinity(0, {min(os.sched_getaffinity(0))} if last > 0 else {last})
    return {"cpu": last, "no_aslr": True, "preload": fixed_time_shim(d)}


def run_args():
    """cpu_time's keyword arguments for a timed run: RUN's, with the environment taken now (each program sets its own)."""
    kw = {k: v for k, v in RUN.items() if k != "preload"}
    if "preload" in RUN:
        kw["env"] = dict(os.environ, LD_PRELOAD=RUN["preload"])
    return kw


def measure(prog, bins, rounds):
    test = PROGRAMS[prog]["test"]
    names = list(bins)
    times = {n: [] for n in names}
    outputs = {}
    # One untimed run of each binary first: the first run after a build or BOLT pays for page-cache misses.
    for n in names:
        cpu_time([bins[n]] + test, **run_args())
    for r in range(rounds):
        for n in names[r % len(names):] + names[:r % len(names)]:
            t, out = cpu_time([bins[n]] + test, **run_args())
            times[n].append(t)
            outputs.setdefault(n, out)
    if len(set(outputs.values())) != 1:
        sys.exit(f"{prog}: outputs differ: {outputs}")
    return times


def measure_paired(prog, bins, rounds):
    """Like `measure`, but every binary's figure is its CPU time over base-default's in a run right before it
    (base-default's own figure is 1.0): the host's speed here drifts between phases up to 1.7x apart (0.51 and
    0.86 s for the same Lua run within minutes, BENCHMARKS.md seventh pass), slower than one pair but faster
    than one round over every binary, so only adjacent runs compare."""
    test = PROGRAMS[prog]["test"]
    names = [n for n in bins if n != "base-default"]
    ratios = {n: [] for n in ["base-default"] + names}
    outputs = {}
    for n in ["base-default"] + names:
        cpu_time([bins[n]] + test, **run_args())
    for r in range(rounds):
        for n in names[r % len(names):] + names[:r % len(names)]:
            b, bout = cpu_time([bins["base-default"]] + test, **run_args())
            t, out = cpu_time([bins[n]] + test, **run_args())
            ratios[n].append(t / b)
            ratios["base-default"].append(1.0)
            outputs.setdefault(n, out)
            outputs.setdefault("base-default", bout)
    if len(set(outputs.values())) != 1:
        sys.exit(f"{prog}: outputs differ: {outputs}")
    return ratios


def report(prog, times, info, matched):
    med = {n: statistics.median(v) for n, v in times.items()}
    base_meds = [med[n] for n in LAYOUTS]
    bm = statistics.median(base_meds)
    spread = 100 * (max(base_meds) / min(base_meds) - 1)
    print(f"## {prog}: test {' '.join(os.path.basename(a) for a in PROGRAMS[prog]['test'])}")
    for k, v in matched.items():
        extra = ""
        if k in info:
            i = info[k]
            passes = f", {i['passes']} training passes" if "passes" in i else ""
            samples = f"{i['samples']} samples" if "samples" in i else "samples not recorded"
            extra = f" [{samples}{passes}, branch agreement {i.get('branch_agreement_pct', float('nan')):.1f}%]"
        print(f"#   {k}{extra}: {v}")
    print(f"{'binary':<17} {'median':>8} {'min':>8} {'max':>8} {'vs baseline median':>19}")
    for n, v in times.items():
        print(f"{n:<17} {med[n]:8.3f} {min(v):8.3f} {max(v):8.3f} {100 * (med[n] / bm - 1):+18.1f}%")
    print(f"baseline layouts: median of medians {bm:.3f} s, spread {min(base_meds):.3f}-{max(base_meds):.3f} s ({spread:.1f}%)")
    # Every optimized binary timed: Loupe's densities, the complete profile, and any other profile
    # BOLTed into this workdir by hand (e.g. an export with other options).
    every = layout_groups(list(med))
    opt = list(every)
    gain = {n: 100 * (1 - med[n] / bm) for n in opt}
    vs_default = {n: 100 * (1 - med[n] / med["base-default"]) for n in opt}
    for n in opt:
        below = sum(1 for b in base_meds if med[n] < b)
        print(f"{n}: {gain[n]:+.1f}% vs baseline median, {vs_default[n]:+.1f}% vs base-default; faster than {below} of {len(base_meds)} layouts")
    if "instr" in gain and gain["instr"] > 0:
        for n in opt:
            if n != "instr":
                print(f"{prog}: {n} reaches {100 * gain[n] / gain['instr']:.0f}% of the instrumented profile's gain")
    # Profiles BOLTed at several layouts: the median over their layouts against the baselines' median.
    groups = {n: g for n, g in every.items() if len(g) > 1}
    layout_gain = {}
    for n, g in groups.items():
        ms = [med[m] for m in g]
        gm = statistics.median(ms)
        layout_gain[n] = 100 * (1 - gm / bm)
        below = sum(1 for b in base_meds if gm < b)
        print(f"{n} over {len(g)} BOLT layouts: median of medians {gm:.3f} s ({min(ms):.3f}-{max(ms):.3f}, "
              f"{100 * (max(ms) / min(ms) - 1):.1f}%), {layout_gain[n]:+.1f}% vs baseline median; faster than {below} of {len(base_meds)} layouts")
    if layout_gain.get("instr", 0) > 0:
        for n in layout_gain:
            if n != "instr":
                print(f"{prog}: {n} over its layouts reaches {100 * layout_gain[n] / layout_gain['instr']:.0f}% of the instrumented profile's gain over its layouts")
    boot = bootstrap(times, every)
    print_bootstrap(f"{prog}: ", boot)
    return {"bootstrap": boot, "median": med, "baseline_median": bm, "spread_pct": spread, "gain_pct": gain, "gain_vs_default_pct": vs_default,
            "layout_gain_pct": layout_gain, "loupe": info}


def layout_groups(names):
    """Each optimized binary among `names` (not a baseline layout, not one of its BOLT layouts `NAME@V`) with
    its BOLT layouts, in the order of `names`."""
    opt = [n for n in names if n not in LAYOUTS and "@" not in n]
    return {n: [n] + [m for m in names if m.startswith(n + "@")] for n in opt}


def print_bootstrap(prefix, boot):
    """One line per group of `bootstrap`'s result: its gain and share of the complete gain, with intervals."""
    for g, b in boot.items():
        share = f", share of the complete gain {b['share_pct']:.0f}% (95% CI {b['share_ci'][0]:.0f} to {b['share_ci'][1]:.0f}%)" if "share_pct" in b else ""
        print(f"{prefix}{g} ({b['binaries']} binaries): gain {b['gain_pct']:+.1f}% (95% CI {b['gain_ci'][0]:+.1f} to {b['gain_ci'][1]:+.1f}%){share}")


def bootstrap(times, groups, resamples=2000, seed=1):
    """Gains of each profile over its layouts, and of each export method over all its independent training runs'
    layouts (`all-METHOD` = every rN-METHOD binary), against the baselines' median of medians, with 95%
    intervals from resampling whole rounds (a round's runs share the host's state, so they are drawn
    together); shares of the complete profile's gain the same way. Deterministic (fixed seed)."""
    import random
    rounds = min(len(v) for v in times.values())
    groups = dict(groups)
    for n in list(groups):
        if (m := re.fullmatch(r"r\d+-(\w+)", n)):
            groups.setdefault(f"all-{m.group(1)}", []).extend(groups[n])

    def gains(idx):
        # base-default's paired figures are all 1.0, one per pair, not per round.
        med = {n: statistics.median([v[i] for i in idx] if len(v) == rounds else v) for n, v in times.items()}
        bm = statistics.median(med[n] for n in LAYOUTS)
        return {g: 100 * (1 - statistics.median(med[m] for m in ms) / bm) for g, ms in groups.items()}

    rng = random.Random(seed)
    point = gains(range(rounds))
    draws = [gains([rng.randrange(rounds) for _ in range(rounds)]) for _ in range(resamples)]
    def ci(xs):
        xs = sorted(x for x in xs if x == x)  # a draw whose complete profile gained nothing has no share
        return (xs[int(0.025 * len(xs))], xs[int(0.975 * len(xs)) - 1]) if xs else (float("nan"), float("nan"))

    out = {}
    for g in groups:
        out[g] = {"binaries": len(groups[g]), "gain_pct": point[g], "gain_ci": ci([d[g] for d in draws])}
        if "instr" in groups and g != "instr" and point["instr"] > 0:
            out[g]["share_pct"] = 100 * point[g] / point["instr"]
            out[g]["share_ci"] = ci([100 * d[g] / d["instr"] if d["instr"] > 0 else float("nan") for d in draws])
    return out


def main():
    global TRAIN_REPEAT, DENSITIES
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--repeat", type=int, default=2, help="runs of each training input for the instrumented profile")
    ap.add_argument("--densities", default=",".join(map(str, DENSITIES)), help="Loupe profile sample counts to build at")
    ap.add_argument("--workdir", help="reuse this directory (its builds are kept when their flags match)")
    ap.add_argument("--prepare-only", action="store_true", help="build, train and BOLT, save the list in WORKDIR/prepared.json, do not time")
    ap.add_argument("--measure-only", action="store_true", help="time the binaries listed in WORKDIR/prepared.json (from --prepare-only)")
    ap.add_argument("--bolt-layouts", default="", help="profiles (e.g. loupe-30k,instr) also BOLTed in the layout variants "
                    + ", ".join(BOLT_VARIANTS) + " (see BOLT_VARIANTS), reported as one median over the layouts")
    ap.add_argument("--densify", type=int, default=0, help="with --measure-only: train the prepared database on to this many samples first")
    ap.add_argument("--train-hz", type=int, default=1000, help="sampling rate of --densify's training passes")
    ap.add_argument("--runs", type=int, default=0, help="with --measure-only: N independent databases, each trained from empty to "
                    "--densify samples (default 300000) at --train-hz and exported by every method (rR-ratio, rR-infer), five layouts each")
    ap.add_argument("--hybrids", default="", help="with --measure-only: mixtures of this Loupe profile (e.g. loupe-300k) and the complete one "
                    "(hcov, hvm, hivm, hintraI, hintraL; see `hybrids`), five layouts each")
    ap.add_argument("--probe-seconds", type=float, default=0, help="with --runs: also probe each database's blocks "
                    "(`loupe optimize probe`, execute breakpoints) over the training inputs for this long, and export rR-probe")
    ap.add_argument("--probe-period-ms", type=int, default=5, help="mean time between 1 ms probe windows (training: the slowdown does not matter)")
    ap.add_argument("--probe-functions", type=int, default=24, help="hottest functions probed")
    ap.add_argument("--probe-more", type=float, default=0, help="with --probe-seconds: then probe a copy of each database "
                    "(db-rR-more) this many seconds more, at --probe-functions, and export rR-more (the thirteenth pass: databases "
                    "probed 60 s at 24 functions, then --probe-functions 48 --probe-more 180)")
    ap.add_argument("--paired", action="store_true", help="time each binary right after a run of base-default and "
                    "report the ratios (figures in the table are then ratios to base-default, not seconds)")
    ap.add_argument("--fixed-env", action="store_true", help="timed runs pinned to the last CPU, without address "
                    "randomization, time() pinned (see fixed_env)")
    ap.add_argument("--binaries", default="", help="time only these (comma-separated names; NAME also selects NAME@V for V in BOLT_VARIANTS)")
    ap.add_argument("programs", nargs="*", default=list(PROGRAMS))
    a = ap.parse_args()
    TRAIN_REPEAT = a.repeat
    DENSITIES = sorted(int(x) for x in a.densities.split(","))
    results = {}
    if a.fixed_env:
        RUN.update(fixed_env(tempfile.mkdtemp(prefix="loupe-fixed-env-")))
    if (a.prepare_only or a.measure_only) and not a.workdir:
        sys.exit("--prepare-only and --measure-only need --workdir")
    for prog in a.programs:
        # Every child (loupe record and probe, the instrumented runs, the timed runs) inherits the program's environment.
        for k in set().union(*(p.get("env", {}) for p in PROGRAMS.values())):
            os.environ.pop(k, None)
        os.environ.update(PROGRAMS[prog].get("env", {}))
        d = a.workdir or tempfile.mkdtemp(prefix=f"loupe-fig3-{prog}-")
        saved = os.path.join(d, "prepared.json")
        if a.measure_only:
            with open(saved) as f:
                bins, info, matched = json.load(f)
        else:
            for sub in ["db", "instr"]:
                shutil.rmtree(os.path.join(d, sub), ignore_errors=True)
            bins, info, matched = prepare(prog, d)
            with open(saved, "w") as f:
                json.dump([bins, info, matched], f)
        if a.densify and not a.runs:
            densify(prog, d, bins, info, matched, a.densify, a.train_hz)
            with open(saved, "w") as f:
                json.dump([bins, info, matched], f)
        if a.bolt_layouts:
            bolt_layouts(d, bins, matched, a.bolt_layouts.split(","))
            with open(saved, "w") as f:
                json.dump([bins, info, matched], f)
        if a.runs:
            probe = (a.probe_seconds, a.probe_period_ms, a.probe_functions) if a.probe_seconds else None
            independent_runs(prog, d, bins, info, matched, a.runs, a.densify or 300000, a.train_hz, probe, a.probe_more)
            with open(saved, "w") as f:
                json.dump([bins, info, matched], f)
        if a.hybrids:
            hybrids(prog, d, bins, matched, a.hybrids)
            with open(saved, "w") as f:
                json.dump([bins, info, matched], f)
        if a.binaries:
            keep = set(a.binaries.split(","))
            bins = {n: b for n, b in bins.items() if n in keep or (n.split("@")[0] in keep and n.split("@")[1] in BOLT_VARIANTS)}
        if a.prepare_only:
            print(f"## {prog}: prepared in {d}: " + json.dumps(info))
            continue
        if a.rounds == 0:
            print(f"## {prog}: " + json.dumps({"profiles": info, "bolt": matched}))
            results[prog] = {"loupe": info, "bolt": matched}
            continue
        times = (measure_paired if a.paired else measure)(prog, bins, a.rounds)
        # The raw times first: a report that fails must not lose a quarter of an hour of timing.
        os.makedirs(os.path.join(ROOT, "bench/results"), exist_ok=True)
        with open(os.path.join(ROOT, "bench/results", time.strftime(f"optimize-realprogs-{prog}-times-%Y%m%d-%H%M%S.json")), "w") as f:
            json.dump({"rounds": a.rounds, "times": times, "profiles": info}, f)
        results[prog] = dict(report(prog, times, info, matched), times=times)
        sys.stdout.flush()
    if a.prepare_only:
        return
    os.makedirs(os.path.join(ROOT, "bench/results"), exist_ok=True)
    with open(os.path.join(ROOT, "bench/results", time.strftime("optimize-realprogs-%Y%m%d-%H%M%S.json")), "w") as f:
        json.dump({"rounds": a.rounds, "results": results}, f)


if __name__ == "__main__":
    main()
