#!/usr/bin/env python3
"""`loupe serve` API latency: p50/p95 of /api/top and /api/flame for one
epoch and for a synthetic day.

Records the whole machine for --seconds while the selftime and callstack
workloads run (one epoch: the "one epoch" case), then synthesizes a day
from that real recording: --epochs copies of the epoch (hard links; only
epoch.json is rewritten, each copy starting --step seconds after the
previous), so that the database holds what a day of such minutes would.
Requests go over HTTP to a real `loupe serve`, one at a time, --rounds each.

Usage: bench/serve.py [--seconds 30] [--freq 2000] [--epochs 1440] [--step 60] [--rounds 20]
       bench/serve.py --compare OLD_LOUPE [--turns 2] [--db DIR] [--gzip] ...
       bench/serve.py --interleave OLD_LOUPE [--db DIR] [--rounds 10]
       bench/serve.py --day-only --day-db DIR [--min-share 0.0005] [--questions flame]
       bench/serve.py --day-compare OLD_LOUPE --day-db DIR [--db REC] [--epochs 288] [--turns 2]

--compare measures the one-epoch case with OLD_LOUPE and $LOUPE in turns
(A B A B ..., a fresh server each turn) on the same recording, and prints
the medians of each side and their ratios. --db reuses a recording instead
of making one; --gzip asks for compressed answers as browsers do.
--min-share also asks each flame question pruned as the web page does;
--questions limits the new questions (`&comm=X`) to top or flame; --day-db
keeps the synthesized day in DIR (made when missing) and --day-only
measures only it.

--interleave OLD_LOUPE runs an old and a new ($LOUPE) server side by side
on one recording (--db or recorded) and asks both the same new questions,
request by request in turns: --rounds rounds of one flame question per
process name (`flame?epoch=current&comm=X&comm=zzR`: not asked before, the
same tree as comm=X), then --rounds kept `flame?epoch=current`. Each side
gets p50/p95 over all its requests and the server's CPU time per request;
the load, whatever it is, falls on both alike. Answers are compared by
sha256.

--day-compare times a day's first questions, old binary against $LOUPE on
the same synthesized day: on a fresh server whose symbols are loaded (one
question of the current epoch first) the first `top?by=procedure&epoch=all`,
the first `flame?epoch=all&min-share=0.0005` (what the page asks), the whole
`flame?epoch=all` and, for comparison, a new one-epoch `flame`, then the CLI's `top --by procedure
--epoch all` and `flame --epoch all --format json`. $LOUPE runs twice: with
no merged forms on disk (DIR/merged removed: the first reader makes them),
then with them, --turns times. Each answer's sha256 is printed: the sides
must agree byte for byte.
"""
import argparse, hashlib, json, os, shutil, signal, statistics, subprocess, sys, tempfile, time, urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LOUPE = os.environ.get("LOUPE", os.path.join(ROOT, "target/release/loupe"))
WL = os.path.join(ROOT, "target/bench-workloads")


def record(db, seconds, freq):
    subprocess.run(["make", "-s", "-C", os.path.join(ROOT, "testdata/workloads"), f"OUT={WL}"], check=True)
    wls = [subprocess.Popen([f"{WL}/selftime", "--seconds", str(seconds + 1)], stdout=subprocess.DEVNULL),
           subprocess.Popen([f"{WL}/callstack", "--seconds", str(seconds + 1)], stdout=subprocess.DEVNULL)]
    time.sleep(0.5)
    subprocess.run([LOUPE, "record", "--db", db, "--freq", str(freq), "--duration", str(seconds)], check=True, stderr=subprocess.DEVNULL)
    for w in wls:
        w.wait()


def synthesize_day(src, dst, epochs, step):
    """Copies of src's one epoch as epochs 1..N of dst (files hard-linked)."""
    shutil.copytree(src, dst, symlinks=True, ignore=shutil.ignore_patterns("epochs"))
    one = os.path.join(src, "epochs", sorted(os.listdir(os.path.join(src, "epochs")))[0])
    meta = json.load(open(os.path.join(one, "epoch.json")))
    start = meta["started_unix"] - epochs * step
    for i in range(1, epochs + 1):
        d = os.path.join(dst, "epochs", f"{i:06d}")
        shutil.copytree(one, d, copy_function=os.link, ignore=shutil.ignore_patterns("epoch.json"))
        # Each copy starts and ends `step` later (times to the nanosecond where the store keeps them).
        shift = (start + (i - 1) * step - meta["started_unix"]) * 10**9
        copy = dict(meta, started_unix=start + (i - 1) * step)
        for k in ("started_unix_ns", "ended_unix_ns"):
            if k in meta:
                copy[k] = meta[k] + shift
        json.dump(copy, open(os.path.join(d, "epoch.json"), "w"))
    open(os.path.join(dst, "CURRENT"), "w").write(f"{epochs}\n")


def serve(db, loupe=LOUPE):
    p = subprocess.Popen([loupe, "serve", "--db", db, "--listen", "127.0.0.1:0", "--time-limit", "600"], stdout=subprocess.PIPE, text=True)
    line = p.stdout.readline()
    return p, line.split()[1].rstrip("/")


GZIP = False


def get(url):
    """The answer's bytes as they came (compressed when --gzip asked for it)."""
    req = urllib.request.Request(url, headers={"Accept-Encoding": "gzip"} if GZIP else {})
    with urllib.request.urlopen(req, timeout=900) as r:
        return r.read()


def timings(url, rounds):
    """(first, p50, p95): the first request apart (it loads the symbol tables; later ones find them kept)."""
    out = []
    for _ in range(rounds + 1):
        t = time.perf_counter()
        get(url)
        out.append(time.perf_counter() - t)
    first, out = out[0], sorted(out[1:])
    return first, statistics.median(out), out[min(len(out) - 1, int(round(0.95 * (len(out) - 1))))]


def cpu_seconds(pid):
    """User and system CPU time of process pid and its threads, ended ones included (/proc/PID/stat)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=int, default=30)
    ap.add_argument("--freq", type=int, default=2000)
    ap.add_argument("--epochs", type=int, default=1440)
    ap.add_argument("--step", type=int, default=60)
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--day-rounds", type=int, default=5)
    ap.add_argument("--compare", metavar="OLD_LOUPE", help="measure one epoch with this binary and $LOUPE in turns")
    ap.add_argument("--turns", type=int, default=2)
    ap.add_argument("--db", help="an existing recording to use (not removed)")
    ap.add_argument("--gzip", action="store_true", help="send Accept-Encoding: gzip")
    ap.add_argument("--min-share", type=float, help="also ask each flame question with this min-share")
    ap.add_argument("--questions", default="top,flame", help="new questions to ask: top, flame or both")
    ap.add_argument("--day-db", help="where the synthesized day is kept (made when missing; not removed)")
    ap.add_argument("--day-only", action="store_true", help="measure only the day")
    ap.add_argument("--interleave", metavar="OLD_LOUPE", help="new flame questions to this binary's server and $LOUPE's in turns")
    ap.add_argument("--day-compare", metavar="OLD_LOUPE", help="a day's first questions with this binary and $LOUPE")
    a = ap.parse_args()
    global GZIP
    GZIP = a.gzip
    # A timeout's SIGTERM still stops the server (the finally below).
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))
    tmp = tempfile.mkdtemp(prefix="loupe-serve-bench.")
    one, day = os.path.join(tmp, "one"), os.path.join(tmp, "day")
    try:
        if a.db:
            one = a.db
        elif (a.day_only or a.day_compare) and a.day_db and os.path.exists(os.path.join(a.day_db, "CURRENT")):
            pass
        else:
            record(one, a.seconds, a.freq)
        if a.compare:
            compare(a, one)
            return
        if a.interleave:
            interleave(a, one)
            return
        if a.day_db:
            day = a.day_db
        if not os.path.exists(os.path.join(day, "CURRENT")):
            synthesize_day(one, day, a.epochs, a.step)
        if a.day_compare:
            day_compare(a, day)
            return
        measure(a, one, day)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def compare(a, db):
    """Old and new binary in turns on one recording; medians per side, then new/old."""
    results = {"old": [], "new": []}
    for turn in range(a.turns):
        for side, loupe in [("old", a.compare), ("new", LOUPE)]:
            print(f"turn {turn + 1}, {side} ({loupe}):")
            results[side].append(measure_one(a, "one epoch", db, "current", a.rounds, loupe))
    print("medians over turns (ms), old -> new, ratio new/old:")
    for key in results["old"][0]:
        old = statistics.median(r[key] for r in results["old"]) * 1000
        new = statistics.median(r[key] for r in results["new"]) * 1000
        print(f"  {key}: {old:.0f} -> {new:.0f} ({new / old:.3f})")


def interleave(a, db):
    """Old and new servers side by side, the same new flame questions request by request in turns."""
    comms = ["selftime", "callstack", "node", "bash", "python3", "loupe", "cc1", "rustc", "ld", "sh"]
    sides = [("old", a.interleave), ("new", LOUPE)]
    servers = [serve(db, loupe) for _, loupe in sides]
    try:
        for p, base in servers:
            # Symbols loaded and every stack named (the first flame question), as in --compare.
            get(f"{base}/api/flame?epoch=current")
        for label, questions in [("new flame?comm=X", [f"flame?epoch=current&comm={c}&comm=zz{r}" for r in range(a.rounds) for c in comms]),
                                 ("kept flame", ["flame?epoch=current"] * a.rounds)]:
            times, cpu, digests = {s: [] for s, _ in sides}, {s: 0.0 for s, _ in sides}, {s: [] for s, _ in sides}
            for q in questions:
                for (side, _), (p, base) in zip(sides, servers):
                    c0, t = cpu_seconds(p.pid), time.perf_counter()
                    body = get(f"{base}/api/{q}")
                    times[side].append(time.perf_counter() - t)
                    cpu[side] += cpu_seconds(p.pid) - c0
                    digests[side].append(hashlib.sha256(body).hexdigest())
            for side, _ in sides:
                t = sorted(times[side])
                p95 = t[min(len(t) - 1, int(round(0.95 * (len(t) - 1))))]
                print(f"  {label}, {side}: {len(t)} requests, p50 {statistics.median(t) * 1000:.0f} ms, p95 {p95 * 1000:.0f} ms, "
                      f"max {t[-1] * 1000:.0f} ms; server CPU {cpu[side] / len(t) * 1000:.1f} ms per request", flush=True)
            print(f"  {label}: answers byte-identical old and new: {digests['old'] == digests['new']}", flush=True)
    finally:
        for p, _ in servers:
            p.kill()
            p.wait()


def day_first(db, loupe, label):
    """A day's first questions on a fresh server (symbols loaded first), then the CLI's; seconds and answer digests."""
    out = {}
    p, base = serve(db, loupe)
    try:
        get(f"{base}/api/top?by=procedure&epoch=current")
        # The page's pruned flame first (the day's stacks named), the whole tree next, then one closed epoch not
        # asked before for comparison.
        last = sorted(os.listdir(os.path.join(db, "epochs")))[-2].lstrip("0")
        for q in ["top?by=procedure&epoch=all", "flame?epoch=all&min-share=0.0005", "flame?epoch=all", f"flame?epoch={last}"]:
            t = time.perf_counter()
            body = get(f"{base}/api/{q}")
            out[f"serve {q}"] = (time.perf_counter() - t, hashlib.sha256(body).hexdigest()[:12])
    finally:
        p.kill()
        p.wait()
    for cmd in [["top", "--by", "procedure", "--format", "json"], ["flame", "--format", "json"]]:
        t = time.perf_counter()
        r = subprocess.run([loupe, *cmd, "--epoch", "all", "--db", db], capture_output=True, check=True)
        out[f"cli {' '.join(cmd[:1])} --epoch all"] = (time.perf_counter() - t, hashlib.sha256(r.stdout).hexdigest()[:12])
    for k, (secs, digest) in out.items():
        print(f"  {label}: {k}: {secs * 1000:.0f} ms (sha256 {digest})", flush=True)
    return out


def day_compare(a, day):
    """Old binary, then $LOUPE making the merged forms, then $LOUPE reading them (--turns times)."""
    merged = os.path.join(day, "merged")
    shutil.rmtree(merged, ignore_errors=True)
    n = len(os.listdir(os.path.join(day, "epochs")))
    print(f"day of {n} epochs at {day}")
    old = day_first(day, a.day_compare, "old")
    shutil.rmtree(merged, ignore_errors=True)
    made = day_first(day, LOUPE, "new, making merged forms")
    du = subprocess.run(["du", "-sk", merged], capture_output=True, text=True).stdout.split()[0]
    print(f"  merged forms: {len(os.listdir(merged))} blocks, {du} KiB")
    reads = [day_first(day, LOUPE, f"new, merged forms on disk, turn {t + 1}") for t in range(a.turns)]
    print("old -> new with merged forms (median of turns), ratio:")
    for k in old:
        new = statistics.median(r[k][0] for r in reads)
        print(f"  {k}: {old[k][0]:.2f} s -> {new:.3f} s ({new / old[k][0]:.4f}); making {made[k][0]:.2f} s")
    # Names can change while the bench runs (kernel symbols of BPF programs loaded beside it): compare back to back.
    for cmd in [["top", "--by", "procedure", "--format", "json"], ["flame", "--format", "json"]]:
        digests = [hashlib.sha256(subprocess.run([b, *cmd, "--epoch", "all", "--db", day], capture_output=True, check=True).stdout).hexdigest()[:12]
                   for b in [a.day_compare, LOUPE]]
        print(f"  {cmd[0]} --epoch all, old and new back to back: {digests[0]} {digests[1]}: same bytes: {digests[0] == digests[1]}")


def measure(a, one, day):
    cases = [("one epoch", one, "current", a.rounds), (f"day ({a.epochs} epochs)", day, "all", a.day_rounds)]
    for name, db, epoch, rounds in cases[1:] if a.day_only else cases:
        measure_one(a, name, db, epoch, rounds)


def measure_one(a, name, db, epoch, rounds, loupe=LOUPE):
    """Prints one database's figures; returns them by name (seconds)."""
    figures = {}
    p, base = serve(db, loupe)
    try:
        top = json.load(urllib.request.urlopen(f"{base}/api/top?by=image&epoch={epoch}&limit=1", timeout=900))
        print(f"{name}: {top['total_samples']} samples")
        pruned = [f"flame?min-share={a.min_share}&"] if a.min_share else []
        for what in ["top?by=procedure&", "top?by=image&", "flame?"] + pruned:
            path = f"{what}epoch={epoch}"
            first, p50, p95 = timings(f"{base}/api/{path}", rounds)
            size = len(get(f"{base}/api/{path}"))
            print(f"  /api/{path}: first {first * 1000:.0f} ms; then p50 {p50 * 1000:.0f} ms, p95 {p95 * 1000:.0f} ms ({rounds} requests, {size} bytes)")
            figures.update({f"{path} first": first, f"{path} p50": p50, f"{path} p95": p95})
        # Questions not asked before (answers not kept; symbol tables kept): one per process name.
        comms = ["selftime", "callstack", "node", "bash", "python3", "loupe", "cc1", "rustc", "ld", "sh"]
        asked = {"top": ["top?by=procedure&"], "flame": ["flame?"] + pruned}
        for what in [w for q in a.questions.split(",") for w in asked[q]]:
            times, cpu0 = [], cpu_seconds(p.pid)
            for c in comms[:rounds]:
                t = time.perf_counter()
                get(f"{base}/api/{what}epoch={epoch}&comm={c}")
                times.append(time.perf_counter() - t)
            # The server's own CPU time for them: a count that the load does not stretch as it does wall time.
            cpu = (cpu_seconds(p.pid) - cpu0) / len(times)
            times.sort()
            p95 = times[min(len(times) - 1, int(round(0.95 * (len(times) - 1))))]
            print(f"  /api/{what}epoch={epoch}&comm=X, {len(times)} distinct X: p50 {statistics.median(times) * 1000:.0f} ms, p95 {p95 * 1000:.0f} ms; "
                  f"server CPU {cpu * 1000:.0f} ms per question")
            figures.update({f"{what}comm=X p50": statistics.median(times), f"{what}comm=X p95": p95, f"{what}comm=X server cpu": cpu})
    finally:
        p.kill()
        p.wait()
    return figures


if __name__ == "__main__":
    main()
