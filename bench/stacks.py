#!/usr/bin/env python3
"""The cost and reach of call stacks.

  overhead  slowdown of `burn --threads $(nproc)` at RATE/s per CPU, and the
            daemon's CPU per sample over the workload, configs in rotating
            order each round: none, perf record -a -g (frame pointers), loupe
            daemon --no-stacks (flat, in the kernel), --stack-bytes 0 (frame
            pointers) with --backend stream and in the kernel, and stacks
            with stack copies (the default) with --backend stream and in the
            kernel (walked there, copies only for code without frame pointers).
  size      database bytes of the flat profiles vs the stack tables, one
            system-wide recording while a mix runs.
  truth     callstack's self-measured inclusive/self shares beside loupe's and
            perf's (--call-graph fp for the frame-pointer build, dwarf for the
            build whose library has none).
  reach     share of a program's samples whose stack reaches its root
            (_start for the main thread, clone3/start_thread for others), loupe
            vs `perf record --call-graph dwarf,16384` on the same program.

Usage: bench/stacks.py [truth|overhead|size|reach ...] [--rounds N] [--rate HZ]
Environment: LOUPE (default target/release/loupe). Run as root.
"""
import argparse, json, os, signal, socket, statistics, subprocess, sys, tempfile, time

from common import LOUPE, WL, build, burn, proc_cpu, start_daemon, stop_daemon
# A stack reaches its root when it holds the thread's entry: _start or libc's
# frames that call main (stripped programs have no _start symbol), or the
# thread-start frames.
ROOTS = {"_start", "__libc_start_main", "__libc_start_call_main", "clone3", "__clone3", "clone", "__clone", "start_thread"}








def with_perf(args, tmp):
    p = subprocess.Popen(["perf", "record", "-a", "-q", *args, "-o", os.path.join(tmp, "perf.data")], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(1.5)
    t = burn()
    cpu = proc_cpu(p.pid)
    p.send_signal(signal.SIGINT)
    p.wait(timeout=120)
    return t, {"profiler_cpu_s": cpu}


def daemon_samples(db):
    """Samples the running daemon has attributed since it started (its `stats` answer)."""
    s = socket.socket(socket.AF_UNIX)
    s.connect(os.path.join(db, "daemon.sock"))
    s.sendall(b"stats\n")
    line = s.makefile().readline()
    s.close()
    return json.loads(line)["stats"]["samples"]


def with_loupe(args, tmp):
    db = os.path.join(tmp, f"db-{time.time_ns()}")
    # The rate is the benchmark's, not the overhead budget's.
    p = start_daemon(db, ["--max-overhead", "off", *args])
    time.sleep(1.0)
    # The daemon's CPU and samples over the workload alone: start-up (the
    # BPF load, the /proc scan) is not the cost per sample.
    cpu0, n0 = proc_cpu(p.pid), daemon_samples(db)
    t = burn()
    cpu, n = proc_cpu(p.pid) - cpu0, daemon_samples(db) - n0
    rep = stop_daemon(p)[0] or {}
    return t, {"profiler_cpu_s": cpu, "samples": n, "lost": rep.get("kernel_lost", 0), "backend": rep.get("backend")}


def overhead(rounds, rate):
    configs = {
        "none": lambda tmp: (burn(), {}),
        "perf -g": lambda tmp: with_perf(["-g", "-F", str(rate)], tmp),
        "loupe flat": lambda tmp: with_loupe(["--freq", str(rate), "--no-stacks"], tmp),
        "loupe fp stream": lambda tmp: with_loupe(["--freq", str(rate), "--stack-bytes", "0", "--backend", "stream"], tmp),
        "loupe fp": lambda tmp: with_loupe(["--freq", str(rate), "--stack-bytes", "0"], tmp),
        "loupe stacks stream": lambda tmp: with_loupe(["--freq", str(rate), "--backend", "stream"], tmp),
        "loupe stacks": lambda tmp: with_loupe(["--freq", str(rate)], tmp),
    }
    names = list(configs)
    res = {n: [] for n in names}
    extra = {n: [] for n in names}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(rounds):
            order = names[r % len(names):] + names[: r % len(names)]
            for n in order:
                t, x = configs[n](tmp)
                res[n].append(t)
                extra[n].append(x)
                print(f"round {r} {n}: {t:.3f} s {x}", file=sys.stderr)
    ratios = {n: statistics.median([res[n][i] / res["none"][i] for i in range(rounds)]) for n in names}
    print(f"| config | median s | min-max s | slowdown vs none | profiler CPU s (median) | daemon µs per sample (median) |")
    print("|---|---|---|---|---|---|")
    for n in names:
        cpu = [x.get("profiler_cpu_s", 0) for x in extra[n]]
        per = [1e6 * x["profiler_cpu_s"] / x["samples"] for x in extra[n] if x.get("samples")]
        per_s = f"{statistics.median(per):.3f}" if per else "-"
        print(f"| {n} | {statistics.median(res[n]):.3f} | {min(res[n]):.3f}-{max(res[n]):.3f} | {100 * (ratios[n] - 1):+.2f}% | {statistics.median(cpu):.2f} | {per_s} |")


def du(path, pred):
    total = 0
    for d, _, files in os.walk(path):
        total += sum(os.path.getsize(os.path.join(d, f)) for f in files if pred(f))
    return total


def mix():
    """A few seconds of varied work: compression, Python, the callstack workload."""
    blob = "/tmp/loupe-bench-blob"
    if not os.path.exists(blob):
        # 4 MiB of executables: xz -6 takes a few seconds on it.
        with open(blob, "wb") as f:
            for name in sorted(os.listdir("/usr/bin")):
                if f.tell() > 4 << 20:
                    break
                try:
                    f.write(open(os.path.join("/usr/bin", name), "rb").read()[: (4 << 20) - f.tell()])
                except OSError:
                    pass
    return [
        ["xz", "-6", "-T1", "-c", blob],
        ["gzip", "-9", "-c", blob],
        ["python3", "-c", "import json,re\nfor i in range(1500): json.dumps([re.sub('a','b',str(x)) for x in range(300)])"],
        [os.path.join(WL, "burn"), "--threads", "2"],
        [os.path.join(WL, "nofp/callstack"), "--seconds", "2"],
        [os.path.join(WL, "qsortcb"), "--seconds", "2"],
    ]


def size(seconds):
    with tempfile.TemporaryDirectory() as tmp:
        db = os.path.join(tmp, "db")
        rec = subprocess.Popen([LOUPE, "record", "--db", db, "--duration", str(seconds)], stderr=subprocess.PIPE, text=True)
        time.sleep(1)
        for cmd in mix():
            subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        _, err = rec.communicate()
        flat = du(db, lambda f: f.endswith(".prof"))
        stacks = du(db, lambda f: f.endswith(".stacks"))
        print(err.strip())
        print(f"| flat profile bytes | stack table bytes | growth |")
        print("|---|---|---|")
        print(f"| {flat:,} | {stacks:,} | {100 * stacks / max(flat, 1):.0f}% |")


def loupe_reach(cmd, tmp, backend="auto"):
    db = os.path.join(tmp, f"db-{time.time_ns()}")
    subprocess.run([LOUPE, "record", "--db", db, "--freq", "1000", "--backend", backend, "--", *cmd], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    folded = subprocess.run([LOUPE, "export", "--db", db, "--format", "collapsed"], capture_output=True, text=True, check=True).stdout
    ok = tot = 0
    for line in folded.splitlines():
        stack, n = line.rsplit(" ", 1)
        frames = stack.split(";")
        tot += int(n)
        ok += int(n) * any(f in ROOTS for f in frames)
    return ok, tot


def perf_reach(cmd, tmp):
    data = os.path.join(tmp, "perf.data")
    # perf 6.x aborts on some programs (gzip here): counted as no samples.
    subprocess.run(["perf", "record", "-q", "-F", "1000", "--call-graph", "dwarf,16384", "-o", data, "--", *cmd], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    out = subprocess.run(["perf", "script", "-i", data, "-F", "ip,sym"], capture_output=True, text=True).stdout
    ok = tot = 0
    for block in out.split("\n\n"):
        lines = [l.split() for l in block.strip().splitlines() if l.strip()]
        if not lines:
            continue
        tot += 1
        ok += any(len(l) > 1 and l[1].split("+")[0] in ROOTS for l in lines)
    return ok, tot


def reach():
    print("| program | loupe samples | loupe reach root (in the kernel: frame pointers, unwind tables) | loupe --backend stream (DWARF stack copies) | perf samples | perf reach root |")
    print("|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        for cmd in mix():
            lo, lt = loupe_reach(cmd, tmp)
            so, st = loupe_reach(cmd, tmp, "stream")
            po, pt = perf_reach(cmd, tmp)
            name = " ".join(os.path.basename(c) if i == 0 else c for i, c in enumerate(cmd))[:40].replace("\n", " ")
            print(f"| `{name}` | {lt} | {100 * lo / max(lt, 1):.1f}% | {100 * so / max(st, 1):.1f}% of {st} | {pt} | {100 * po / max(pt, 1):.1f}% |")


def perf_stacks(cmd, tmp, mode):
    """(stack root-first list of symbols, 1) per perf sample."""
    data = os.path.join(tmp, "perf.data")
    subprocess.run(["perf", "record", "-q", "-F", "2000", "--call-graph", mode, "-o", data, "--", *cmd], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    out = subprocess.run(["perf", "script", "-i", data, "-F", "ip,sym"], capture_output=True, text=True).stdout
    stacks = []
    for block in out.split("\n\n"):
        # Inlined frames (perf shows them in dwarf mode) would shadow the outer procedure's self time.
        syms = [l.split()[1].split("+")[0] for l in block.strip().splitlines() if len(l.split()) > 1 and "(inlined)" not in l]
        if syms:
            stacks.append(list(reversed(syms)))
    return stacks


def shares(stacks, truth):
    """Inclusive/self shares of a's inclusive samples, as the test computes them."""
    inc, slf = {}, {}
    for st, n in stacks:
        for f in set(st):
            inc[f] = inc.get(f, 0) + n
        slf[st[-1]] = slf.get(st[-1], 0) + n
    base = inc.get("a", 0) or 1
    return {
        "a self": 100 * slf.get("a", 0) / base, "b self": 100 * slf.get("b", 0) / base, "d self": 100 * slf.get("d", 0) / base,
        "b inclusive": 100 * inc.get("b", 0) / base, "d inclusive": 100 * inc.get("d", 0) / base,
        "c_work inclusive": 100 * inc.get("c_work", 0) / base,
    }


def truth():
    """callstack's self-measured shares vs loupe and perf, FP and DWARF builds."""
    with tempfile.TemporaryDirectory() as tmp:
        for program, perf_mode, loupe_args in [("callstack", "fp", ["--stack-bytes", "0"]), ("nofp/callstack", "dwarf,16384", [])]:
            out = os.path.join(tmp, "truth.json")
            db = os.path.join(tmp, f"db-{time.time_ns()}")
            subprocess.run([LOUPE, "record", "--db", db, "--freq", "2000", *loupe_args, "--", os.path.join(WL, program), "--seconds", "4", "--out", out], stderr=subprocess.DEVNULL, check=True)
            t = json.load(open(out))
            folded = subprocess.run([LOUPE, "export", "--db", db, "--format", "collapsed", "--pid", str(t["pid"])], capture_output=True, text=True, check=True).stdout
            lo = shares([(l.rsplit(" ", 1)[0].split(";"), int(l.rsplit(" ", 1)[1])) for l in folded.splitlines()], t)
            pf = shares([(s, 1) for s in perf_stacks([os.path.join(WL, program), "--seconds", "4"], tmp, perf_mode)], t)
            s, tot = t["self"], t["total_cpu"]
            want = {"a self": s["a"], "b self": s["b"], "d self": s["d"], "b inclusive": s["b"] + s["c_via_b"],
                    "d inclusive": s["d"] + s["c_via_d"], "c_work inclusive": s["c_via_b"] + s["c_via_d"]}
            print(f"\n`{program}` (loupe {' '.join(loupe_args) or 'default'}; perf --call-graph {perf_mode})\n")
            print("| share of a's samples | truth | loupe | perf |")
            print("|---|---|---|---|")
            for k in want:
                print(f"| {k} | {100 * want[k] / tot:.2f}% | {lo[k]:.2f}% | {pf[k]:.2f}% |")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("what", nargs="*", default=["truth", "overhead", "size", "reach"])
    ap.add_argument("--rounds", type=int, default=8)
    ap.add_argument("--rate", type=int, default=1000)
    ap.add_argument("--seconds", type=int, default=30)
    a = ap.parse_args()
    build()
    for w in a.what:
        {"overhead": lambda: overhead(a.rounds, a.rate), "size": lambda: size(a.seconds), "reach": reach, "truth": truth}[w]()


if __name__ == "__main__":
    main()
