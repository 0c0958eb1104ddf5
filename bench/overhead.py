#!/usr/bin/env python3
"""Slowdown of a CPU-bound workload on all CPUs under a profiler, side by side.

Configs per round, in rotating order so drift hits all alike:
  none   no profiler
  floor  the sampling interrupt alone: bpftrace -e 'profile:hz:RATE { }'
  perf   perf record -a -F RATE
  stream loupe daemon --no-stacks --backend stream --freq RATE --max-overhead off
  bpf    loupe daemon --no-stacks --backend bpf --freq RATE --max-overhead off
  budget loupe daemon --no-stacks --max-overhead 1 --freq 10000 (the daemon picks the rate;
         RATE is ignored, the chosen rate is reported)

`burn --threads $(nproc)` does fixed work and times itself from inside, so
profiler start-up and shutdown are not in the figure. Reports the median
elapsed time, its min-max, and the median of per-round slowdowns versus
`none` from the same round. For loupe it also reports the daemon's CPU time
per sample and peak RSS; for perf its CPU time.

Usage: bench/overhead.py [--rounds N] [--rates 250,1000,5000] [--configs none,floor,perf,stream,bpf,budget]
Environment: LOUPE (default target/release/loupe).
"""
import argparse, json, os, signal, statistics, subprocess, sys, tempfile, time

from common import LOUPE, ROOT, build, burn, proc_cpu, proc_hwm_kib, start_daemon, stop_daemon










def run_floor(rate):
    p = subprocess.Popen(["bpftrace", "-e", f"profile:hz:{rate} {{ }}"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    p.stdout.readline()  # "Attaching 1 probe..."
    time.sleep(1.0)
    t = burn()
    p.send_signal(signal.SIGINT)
    p.communicate(timeout=30)
    return t, {}


def run_perf(rate, tmp):
    p = subprocess.Popen(["perf", "record", "-a", "-q", "-F", str(rate), "-o", os.path.join(tmp, "perf.data")], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(1.5)
    t = burn()
    cpu = proc_cpu(p.pid)
    p.send_signal(signal.SIGINT)
    p.wait(timeout=60)
    return t, {"perf_cpu_s": cpu}


def run_loupe(rate, tmp, config):
    db = os.path.join(tmp, f"db-{time.time_ns()}")
    # Flat profiles (--no-stacks) as the foundation issue measures them;
    # the cost of stacks is bench/stacks.py's.
    args = {"stream": ["--no-stacks", "--backend", "stream", "--freq", str(rate), "--max-overhead", "off"],
            "bpf": ["--no-stacks", "--backend", "bpf", "--freq", str(rate), "--max-overhead", "off"],
            "budget": ["--no-stacks", "--max-overhead", "1", "--freq", "10000"]}[config]
    p = start_daemon(db, args)
    time.sleep(1.0)
    t = burn()
    hwm = proc_hwm_kib(p.pid)
    report = stop_daemon(p, timeout=60)[0] or {}
    samples = report.get("stats", {}).get("samples", 0)
    cpu = report.get("daemon_cpu_seconds", 0.0)
    x = {"loupe_cpu_s": cpu, "loupe_samples": samples, "loupe_us_per_sample": 1e6 * cpu / max(samples, 1), "loupe_hwm_kib": hwm,
         "aggregation_factor": report.get("aggregation_factor", 0.0), "handler_ns": report.get("bpf_handler_ns_per_sample", 0.0),
         "rate_hz": report.get("rate_hz", rate)}
    if report.get("budget"):
        x["budget_interrupt_us"] = report["budget"]["interrupt"]["interrupt_us"]
    return t, x


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--rates", default="250,1000,5000")
    ap.add_argument("--configs", default="none,floor,perf,stream,bpf,budget")
    a = ap.parse_args()
    build()
    configs = a.configs.split(",")
    if not os.path.exists(LOUPE):
        print(f"skipping loupe: {LOUPE} not built", file=sys.stderr)
        configs = [c for c in configs if c not in ("stream", "bpf", "budget")]
    results_dir = os.path.join(ROOT, "bench/results")
    os.makedirs(results_dir, exist_ok=True)
    raw = open(os.path.join(results_dir, f"overhead-{time.strftime('%Y%m%d-%H%M%S')}.jsonl"), "w")
    print(f"# overhead: {time.strftime('%Y-%m-%d %H:%M')} UTC, {os.cpu_count()} CPUs, kernel {os.uname().release}, {a.rounds} rounds")
    print("| rate/s/CPU | config | median s | min-max s | slowdown vs none (median) | extra |")
    print("|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        for rate in [int(r) for r in a.rates.split(",")]:
            times = {c: [] for c in configs}
            extras = {c: [] for c in configs}
            for r in range(a.rounds):
                order = configs[r % len(configs):] + configs[:r % len(configs)]
                for c in order:
                    if c == "none":
                        t, x = burn(), {}
                    elif c == "floor":
                        t, x = run_floor(rate)
                    elif c == "perf":
                        t, x = run_perf(rate, tmp)
                    else:
                        t, x = run_loupe(rate, tmp, c)
                    times[c].append(t)
                    extras[c].append(x)
                    raw.write(json.dumps({"rate": rate, "round": r, "config": c, "elapsed_s": t, **x}) + "\n")
                    raw.flush()
            for c in configs:
                ts = times[c]
                slow = [100.0 * (t / n - 1) for t, n in zip(ts, times.get("none", ts))]
                extra = ""
                if c in ("stream", "bpf", "budget"):
                    e = extras[c]
                    extra = (f"daemon {statistics.median(x['loupe_us_per_sample'] for x in e):.2f} µs CPU/sample over "
                             f"{statistics.median(x['loupe_samples'] for x in e):.0f} samples; peak RSS {max(x['loupe_hwm_kib'] for x in e) / 1024:.1f} MiB")
                    if c != "stream":
                        extra += (f"; aggregation {statistics.median(x['aggregation_factor'] for x in e):.1f}x, "
                                  f"handler {statistics.median(x['handler_ns'] for x in e):.0f} ns/sample")
                    if c == "budget":
                        extra += (f"; chosen rate {statistics.median(x['rate_hz'] for x in e):.0f}/s "
                                  f"(measured {statistics.median(x['budget_interrupt_us'] for x in e):.1f} µs/sample)")
                elif c == "perf":
                    extra = f"perf CPU {statistics.median(x['perf_cpu_s'] for x in extras[c]):.3f} s per round"
                print(f"| {rate} | {c} | {statistics.median(ts):.3f} | {min(ts):.3f}-{max(ts):.3f} | "
                      f"{statistics.median(slow):+.2f}% | {extra} |", flush=True)


if __name__ == "__main__":
    main()
