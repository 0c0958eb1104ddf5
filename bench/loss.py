#!/usr/bin/env python3
"""Records lost by the default `loupe daemon` with every CPU busy, and its start-up CPU, for two
binaries side by side (issue 22: the default daemon lost 30-44% of its samples here).

Each round runs, in alternating order, `LOUPE daemon --flush-every 1 ARGS` for each binary while
`selftime --threads $(nproc)` keeps every CPU busy, for --seconds, then SIGTERMs it and reads its
final report: samples attributed, records lost (PERF_RECORD_LOST counts, `kernel_lost`; and the
`losses` object where the binary reports one), the rate it sampled at, and its start-up CPU: the
daemon's user+system time (all threads, /proc/PID/stat) when its control socket appears, which is
when sampling has begun (after any calibration).

Usage: bench/loss.py [--rounds 5] [--seconds 10] [--args "..."] BIN_A BIN_B
"""
import argparse, json, os, statistics, subprocess, tempfile, time

from common import WL, build, proc_cpu, stop_daemon


def one(binary, seconds, extra, tmp):
    db = os.path.join(tmp, f"db-{time.time_ns()}")
    busy = subprocess.Popen([os.path.join(WL, "selftime"), "--seconds", str(seconds + 30), "--threads", str(os.cpu_count()),
                             "--out", "/dev/null"], stdout=subprocess.DEVNULL)
    time.sleep(0.3)
    t0 = time.time()
    p = subprocess.Popen([binary, "daemon", "--db", db, "--flush-every", "1", *extra], stdout=subprocess.DEVNULL,
                         stderr=subprocess.PIPE, text=True)
    while not os.path.exists(os.path.join(db, "daemon.sock")):
        time.sleep(0.01)
    startup_cpu, startup_wall = proc_cpu(p.pid), time.time() - t0
    time.sleep(seconds)
    report, err = stop_daemon(p)
    busy.kill()
    busy.wait()
    report = report or {}
    samples = report.get("stats", {}).get("samples", 0)
    losses = report.get("losses")
    lost = sum(losses[k] for k in ("ring_overrun", "map_full")) if losses else report.get("kernel_lost", 0)
    closing = [l for l in err.splitlines() if " samples in " in l]
    return {"samples": samples, "lost": lost, "kernel_lost": report.get("kernel_lost", 0), "rate_hz": report.get("rate_hz"),
            "startup_cpu_s": startup_cpu, "startup_wall_s": startup_wall, "reported_startup_cpu_s": report.get("startup_cpu_seconds"),
            "closing": closing[-1] if closing else None}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--seconds", type=float, default=10)
    ap.add_argument("--args", default="", help="extra daemon arguments, e.g. '--max-overhead off'")
    ap.add_argument("binaries", nargs=2)
    a = ap.parse_args()
    if not os.path.exists(os.path.join(WL, "selftime")):
        build()
    res = {b: [] for b in a.binaries}
    print(f"# loss: {time.strftime('%Y-%m-%d %H:%M')} UTC, {os.cpu_count()} CPUs, kernel {os.uname().release}, "
          f"{a.rounds} rounds of {a.seconds:.0f} s, every CPU busy, daemon args: --flush-every 1 {a.args}")
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(a.rounds):
            for b in (a.binaries if r % 2 == 0 else a.binaries[::-1]):
                x = one(b, a.seconds, a.args.split(), tmp)
                res[b].append(x)
                print(json.dumps({"round": r, "binary": b, **x}), flush=True)
    print("| binary | lost / (samples + lost), median | min-max | samples (median) | rate/s/CPU | start-up CPU s (median, max) |")
    print("|---|---|---|---|---|---|")
    for b, xs in res.items():
        frac = [100.0 * x["lost"] / max(x["samples"] + x["lost"], 1) for x in xs]
        cpu = [x["startup_cpu_s"] for x in xs]
        print(f"| {b} | {statistics.median(frac):.1f}% | {min(frac):.1f}-{max(frac):.1f}% | {statistics.median(x['samples'] for x in xs):.0f} | "
              f"{statistics.median(x['rate_hz'] or 0 for x in xs):.0f} | {statistics.median(cpu):.2f}, {max(cpu):.2f} |")


if __name__ == "__main__":
    main()
