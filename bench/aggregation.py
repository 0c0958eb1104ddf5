#!/usr/bin/env python3
"""DCPI Table VI for Loupe: what each backend moves and spends per sample.

For each workload (steady: `burn` on all CPUs; churn: `churn --count 2000`,
DCPI's gcc case) and each backend (bpf, stream), runs `loupe daemon
--max-overhead off --freq RATE --stats` for the workload's duration and
reports from the daemon's own counters:
  samples, entries that reached user space (BPF table entries + evictions),
  aggregation factor (samples per entry moved), evictions, miss rate
  (entries created / samples: how often a sample found no entry, DCPI's
  "miss rate"), drops, the BPF handler's run time per sample (the kernel's
  bpf_stats: DCPI's "interrupt cost" without entry/exit), daemon CPU per
  sample, daemon peak RSS, and the BPF maps' memory.
Everything here is counted, not timed against a baseline, so it holds up on
a noisy machine (timing goes to overhead.py).

Usage: bench/aggregation.py [--rate 1000] [--seconds 6]
Environment: LOUPE (default target/release/loupe).
"""
import argparse, os, subprocess, tempfile, time

from common import WL, build, proc_hwm_kib, start_daemon, stop_daemon




def run(backend, workload, rate, seconds, tmp):
    db = os.path.join(tmp, f"{backend}-{workload}")
    p = start_daemon(db, ["--no-stacks", "--backend", backend, "--max-overhead", "off", "--freq", str(rate)])
    t0 = time.time()
    if workload == "steady":
        while time.time() - t0 < seconds:
            subprocess.run([os.path.join(WL, "burn"), "--threads", str(os.cpu_count())], check=True, stdout=subprocess.DEVNULL)
    else:
        subprocess.run([os.path.join(WL, "churn"), "--count", "2000"], check=True, stdout=subprocess.DEVNULL)
    took = time.time() - t0
    peak = proc_hwm_kib(p.pid)
    r, err = stop_daemon(p)
    if r is None:
        raise SystemExit(f"loupe daemon ({backend}, {workload}) gave no final report:\n{err}")
    return r, peak, took


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rate", type=int, default=1000)
    ap.add_argument("--seconds", type=float, default=6)
    a = ap.parse_args()
    build()
    print(f"# aggregation: {time.strftime('%Y-%m-%d %H:%M')} UTC, {os.cpu_count()} CPUs, kernel {os.uname().release}, "
          f"{a.rate} samples/s per CPU")
    print("| workload | backend | s | samples | entries to user space | aggregation | evicted | dropped | "
          "BPF handler ns/sample | daemon µs CPU/sample | daemon peak RSS MiB | unknown |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        for workload in ["steady", "churn"]:
            for backend in ["bpf", "stream"]:
                r, peak, took = run(backend, workload, a.rate, a.seconds, tmp)
                s = r["stats"]["samples"]
                moved = r["bpf_entries_drained"] if backend == "bpf" else s
                agg = f"{s / moved:.1f}x" if moved else "-"
                print(f"| {workload} | {backend} | {took:.1f} | {s} | {moved} | {agg} | {r['bpf_evicted']} | {r['bpf_dropped']} | "
                      f"{r['bpf_handler_ns_per_sample']:.0f} | {r['cpu_us_per_sample']:.2f} | {peak / 1024:.1f} | "
                      f"{r['stats']['unknown_samples']} ({100 * r['stats']['unknown_samples'] / max(s, 1):.2f}%) |", flush=True)


if __name__ == "__main__":
    main()
