#!/usr/bin/env python3
"""Issues 22 and 25: Loupe beside the OpenTelemetry eBPF profiler on the same
workloads, the same rate and the same machine load, alternating profiler by
profiler round by round (Loupe, OTel, OTel, Loupe, ...).

Both sample at 1000/s per CPU (the OTel agent's default is 20:
`-samples-per-second 1000`). The OTel agent sends OTLP to a sink on
127.0.0.1 started here (a generic gRPC handler that accepts every call;
Debian's python3-grpcio), so it runs its whole pipeline, export included.

--scope workload (the default): each profiler is started for each workload
and sees only it: `loupe record -p PIDS`, and the OTel agent with its perf
events opened on a cgroup holding the workload (OTEL_BENCH_CGROUP, from
bench/otel/cgroup.patch), so the other sessions' processes on this shared
machine are not sampled. --scope machine: `loupe daemon --max-overhead off`
and the agent, both system-wide, each kept running while the workloads run
in turn (the machine's other processes make most of the samples then).

After start-up (counted apart: time and CPU until the sampling program
runs) and SETTLE seconds (the first windows right after start-up saw OTel's
program bail out cheaply on processes it had no unwind data for yet), over
SECONDS read before and after
  - the kernel's run time and run count of the profiler's own BPF programs
    (found by prog id in its /proc/PID/fdinfo, kernel.bpf_stats_enabled=1):
    the sampling (perf_event) programs' ns per run, or the off-CPU
    program's per context switch (it runs at every switch of the machine);
  - the agent's own CPU (user + system, every thread's schedstat), divided
    by the same runs.
Workloads: `qsortcb` on each CPU (no frame pointers, through libc's qsort:
both walk it by unwind tables); `selftime.py` on each CPU under Debian's
python3.11 (both read CPython 3.11 frames) and under a copy named so that
neither takes it for CPython (the same code, native frames only); off-CPU:
`offcpu --pingpong` (two threads passing a byte over pipes), Loupe with
`--off-cpu`, the OTel agent with `-off-cpu-threshold 1` (every switch), where
it starts (it attaches a kprobe: not on kernels without CONFIG_KPROBES).

Usage: bench/otel_compare.py OTEL_AGENT [--scope workload|machine] [--rounds N]
       [--seconds S] [--settle S]
(LOUPE overrides Loupe's binary; build the agent with bench/otel_build.sh).
Run as root.
"""
import argparse
import glob
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

from common import LOUPE, ROOT, WL, build

RATE = 1000
SINK = r"""
import grpc, sys
from concurrent import futures
class H(grpc.GenericRpcHandler):
    def service(self, details):
        return grpc.unary_unary_rpc_method_handler(lambda req, ctx: b"")
s = grpc.server(futures.ThreadPoolExecutor(max_workers=2), handlers=[H()],
                options=[("grpc.max_receive_message_length", 1 << 30)])
print(s.add_insecure_port("127.0.0.1:0"), flush=True)
s.start()
s.wait_for_termination()
"""


def prog_stats(pid):
    """{prog id: (type, name, run_time_ns, run_cnt)} of the BPF programs PID holds."""
    out = {}
    for f in glob.glob(f"/proc/{pid}/fdinfo/*"):
        try:
            kv = dict(line.split(":", 1) for line in open(f) if ":" in line)
        except OSError:
            continue
        if "prog_id" in kv and "prog_type" in kv:  # a program, not a link
            out[int(kv["prog_id"])] = (int(kv["prog_type"]), kv.get("run_time_ns", "0").strip(), kv.get("run_cnt", "0").strip())
    return {k: (t, int(ns), int(n)) for k, (t, ns, n) in out.items()}


def cpu_ns(pid):
    """User + system ns of every thread of PID (schedstat: ns, not clock ticks)."""
    total = 0
    for f in glob.glob(f"/proc/{pid}/task/*/schedstat"):
        try:
            total += int(open(f).read().split()[0])
        except (OSError, ValueError, IndexError):
            pass
    return total


KPROBE, PERF_EVENT, TRACING = 2, 7, 26


def snapshot(pid, kind):
    """(BPF ns, runs, agent CPU ns) of PID's programs of the given kind."""
    s = prog_stats(pid)
    want = [v for v in s.values() if v[0] == kind]
    return sum(v[1] for v in want), sum(v[2] for v in want), cpu_ns(pid)


class Profiler:
    def __init__(self, name, argv, env=None):
        self.name, self.argv, self.env = name, argv, env

    def start(self, kind):
        t0 = time.time()
        env = dict(os.environ, **(self.env or {}))
        self.p = subprocess.Popen(self.argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env)
        # Started once its sampling program runs (OTel's loads for seconds first).
        while time.time() - t0 < 120:
            if self.p.poll() is not None:
                return None, self.p.stderr.read().strip().splitlines()[-3:]
            if snapshot(self.p.pid, kind)[1] > 0:
                time.sleep(1)
                return time.time() - t0, cpu_ns(self.p.pid) / 1e9
            time.sleep(0.1)
        return None, ["no program ran within 120 s"]

    def stop(self):
        # `loupe daemon` stops on SIGTERM; `loupe record` and the OTel agent on Ctrl-C.
        self.p.send_signal(signal.SIGTERM if "daemon" in self.argv else signal.SIGINT)
        try:
            self.p.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            self.p.kill()
            self.p.communicate()


def start_workload(workload, cgroup=None):
    """Starts one process per argv, in `cgroup` (a cgroup v2 directory) when given."""
    def enter():
        if cgroup:
            with open(os.path.join(cgroup, "cgroup.procs"), "w") as f:
                f.write(str(os.getpid()))
    return [subprocess.Popen(w, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, preexec_fn=enter) for w in workload]


def stop_workload(ws):
    for w in ws:
        w.kill()
        w.wait()


def window(prof, kind, secs):
    """BPF ns per run, runs per s and agent ns per run of PROF over SECS."""
    b0, n0, c0 = snapshot(prof.p.pid, kind)
    time.sleep(secs)
    b1, n1, c1 = snapshot(prof.p.pid, kind)
    runs = max(n1 - n0, 1)
    return (b1 - b0) / runs, runs / secs, (c1 - c0) / runs


def measure(prof, kind, workload, secs):
    """Runs `workload` (a list of argvs) beside a running profiler and measures it after 3 s."""
    ws = start_workload(workload)
    try:
        time.sleep(3)
        return window(prof, kind, secs)
    finally:
        stop_workload(ws)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("otel")
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--seconds", type=float, default=10)
    ap.add_argument("--scope", choices=("workload", "machine"), default="workload",
                    help="workload: each profiler restricted to the workload, started for each; machine: both system-wide")
    ap.add_argument("--settle", type=float, default=10, help="seconds between start-up and the first window")
    a = ap.parse_args()
    subprocess.run(["sysctl", "-qw", "kernel.bpf_stats_enabled=1"], check=True)
    build()
    tmp = tempfile.mkdtemp()
    os.chmod(tmp, 0o700)
    sink = subprocess.Popen(["/usr/bin/python3", "-c", SINK], stdout=subprocess.PIPE, text=True)
    port = sink.stdout.readline().strip()
    if not port:
        sys.exit("the OTLP sink did not start: it needs Debian's python3-grpcio (apt-get install python3-grpcio)")
    xpy = os.path.join(tmp, "xpy311")
    shutil.copy("/usr/bin/python3.11", xpy)
    ncpu = os.cpu_count()
    long = str(a.seconds + a.settle + 120)
    sel = os.path.join(ROOT, "testdata/python/selftime.py")
    on_cpu = {
        "qsortcb": [[f"{WL}/qsortcb", "--seconds", long, "--out", "/dev/null"]] * ncpu,
        "python3.11": [["/usr/bin/python3.11", sel, long, "/dev/null"]] * ncpu,
        "python-unnamed": [[xpy, sel, long, "/dev/null"]] * ncpu,
    }
    pingpong = [[f"{WL}/offcpu", "--pingpong", "1000000000"]]
    db = os.path.join(tmp, "db")
    profs = {
        "loupe": lambda off: Profiler("loupe", [LOUPE, "daemon", "--db", db, "-F", str(RATE), "--max-overhead", "off", *(["--off-cpu"] if off else [])]),
        "otel": lambda off: Profiler("otel", [a.otel, "-samples-per-second", str(RATE), "-collection-agent", f"127.0.0.1:{port}", "-disable-tls",
                                              *(["-off-cpu-threshold", "1"] if off else [])]),
    }
    cgroup = f"/sys/fs/cgroup/unified/loupe-otel-compare-{os.getpid()}"
    otel = [a.otel, "-samples-per-second", str(RATE), "-collection-agent", f"127.0.0.1:{port}", "-disable-tls"]
    try:
        if a.scope == "machine":
            res, failed = rounds(a, profs, on_cpu, pingpong, db)
        else:
            os.mkdir(cgroup, 0o700)
            res, failed = rounds_workload(a, otel, dict(on_cpu, pingpong=pingpong), db, cgroup)
    finally:
        sink.kill()
        shutil.rmtree(tmp, ignore_errors=True)
        if os.path.isdir(cgroup):
            os.rmdir(cgroup)
    report(res, failed, a.rounds)
    rows(res, failed, a)


def rounds_workload(a, otel, loads, db, cgroup):
    """The alternating rounds, each profiler started for each workload and restricted to it: Loupe by `record -p
    PIDS`, the OTel agent by perf cgroup events on a cgroup holding the workload (bench/otel/cgroup.patch)."""
    res, failed = {}, {}
    print(f"# {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {os.cpu_count()} CPUs, {RATE} samples/s per CPU, "
          f"{a.seconds:.0f} s windows after {a.settle:.0f} s, each profiler restricted to the workload, "
          f"loadavg {open('/proc/loadavg').read().split()[0]}", flush=True)
    print(f"# loupe: {LOUPE}; otel: {a.otel}", flush=True)
    names = [w for w in loads if w != "pingpong"]
    for r in range(a.rounds):
        for name in ("loupe", "otel") if r % 2 == 0 else ("otel", "loupe"):
            for wname in (names if r % 2 == 0 else names[::-1]) + ["pingpong"]:
                off = wname == "pingpong"
                if off and name in failed:
                    continue
                kind = (TRACING if name == "loupe" else KPROBE) if off else PERF_EVENT
                shutil.rmtree(db, ignore_errors=True)
                ws = start_workload(loads[wname], cgroup)
                if name == "loupe":
                    pids = ",".join(str(w.pid) for w in ws)
                    prof = Profiler(name, [LOUPE, "record", "--db", db, "-F", str(RATE), "-p", pids, *(["--off-cpu"] if off else [])])
                else:
                    prof = Profiler(name, otel + (["-off-cpu-threshold", "1"] if off else []), {"OTEL_BENCH_CGROUP": cgroup})
                try:
                    up, cpu = prof.start(kind)
                    if up is None:
                        failed[name] = " / ".join(cpu)
                        print(f"round {r} {name} {wname}: did not start: {failed[name]}", flush=True)
                        continue
                    res.setdefault((name, "startup"), []).append((up, cpu * 1e9, 0))
                    time.sleep(a.settle)
                    ns, rate, agent = window(prof, kind, a.seconds)
                    res.setdefault((name, wname), []).append((ns, agent, rate))
                    print(f"round {r} {name} {wname}: sampling after {up:.1f} s, {cpu:.2f} CPU-s; BPF {ns / 1000:.2f} us per run, "
                          f"agent {agent / 1000:.2f} us per run, {rate:.0f} runs/s", flush=True)
                finally:
                    prof.stop()
                    stop_workload(ws)
    return res, failed


def rounds(a, profs, on_cpu, pingpong, db):
    """The alternating rounds: {(profiler, workload): [(BPF ns, agent ns, runs/s)]}, {profiler: why it did not start}."""
    res, failed = {}, {}
    ncpu = os.cpu_count()
    print(f"# {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {ncpu} CPUs, {RATE} samples/s per CPU, {a.seconds} s windows, "
          f"loadavg {open('/proc/loadavg').read().split()[0]}", flush=True)
    print(f"# loupe: {LOUPE}; otel: {a.otel}", flush=True)
    for r in range(a.rounds):
        for name in ("loupe", "otel") if r % 2 == 0 else ("otel", "loupe"):
            for off in (False, True):
                if off and name in failed:
                    continue
                kind = (TRACING if name == "loupe" else KPROBE) if off else PERF_EVENT
                prof = profs[name](off)
                shutil.rmtree(db, ignore_errors=True)
                up, cpu = prof.start(kind)
                if up is None:
                    failed[name] = " / ".join(cpu)
                    print(f"round {r} {name} {'off-cpu' if off else 'on-cpu'}: did not start: {failed[name]}", flush=True)
                    prof.stop()
                    continue
                if not off:
                    res.setdefault((name, "startup"), []).append((up, cpu * 1e9, 0))
                # Both first describe every process already running (this
                # machine runs other sessions' builds): the first window
                # measured right after start-up saw OTel's program bail out
                # cheaply on processes it had no unwind data for yet.
                c0 = cpu_ns(prof.p.pid)
                time.sleep(a.settle)
                c1 = cpu_ns(prof.p.pid)
                print(f"round {r} {name} {'off-cpu' if off else 'on-cpu'} start-up: sampling after {up:.1f} s, {cpu:.2f} CPU-s; "
                      f"then {(c1 - c0) / 1e7 / a.settle:.1f}% of a CPU over {a.settle:.0f} s of settling", flush=True)
                loads = {"pingpong": pingpong} if off else on_cpu
                order = list(loads) if r % 2 == 0 else list(reversed(loads))
                try:
                    for wname in order:
                        ns, rate, agent = measure(prof, kind, loads[wname], a.seconds)
                        res.setdefault((name, wname), []).append((ns, agent, rate))
                        print(f"round {r} {name} {wname}: BPF {ns / 1000:.2f} us per run, agent {agent / 1000:.2f} us per run, {rate:.0f} runs/s", flush=True)
                finally:
                    prof.stop()
    return res, failed


def rows(res, failed, a):
    """The BENCHMARKS.md rows of this run (medians, min-max)."""
    def fig(name, w, i):
        v = res.get((name, w))
        return med([x[i] / 1000 for x in v]).replace(" (", " µs (") if v else "not measured"
    day = time.strftime("%Y-%m-%d", time.gmtime())
    scope = "each restricted to the workload" if a.scope == "workload" else "both system-wide"
    cmd = f"`bench/otel_compare.py OTEL --scope {a.scope} --rounds {a.rounds} --seconds {a.seconds:g} --settle {a.settle:g}`"
    print("\nBENCHMARKS.md rows:")
    for w in ("qsortcb", "python3.11", "python-unnamed"):
        print(f"| collector | beside the OpenTelemetry eBPF profiler, {scope}, `{w}` on every CPU, {RATE}/s per CPU, {a.rounds} alternating rounds "
              f"of {a.seconds:g} s | Loupe: BPF {fig('loupe', w, 0)} per sample, agent {fig('loupe', w, 1)} | OTel: BPF {fig('otel', w, 0)}, "
              f"agent {fig('otel', w, 1)} | {day} | {cmd} |")
    otel = failed.get("otel", "").split(" / ")[-1] if "otel" in failed else f"program {fig('otel', 'pingpong', 0)} per switch"
    print(f"| offcpu | beside the OpenTelemetry eBPF profiler, `offcpu --pingpong` | Loupe `--off-cpu`: program {fig('loupe', 'pingpong', 0)} per "
          f"context switch, agent {fig('loupe', 'pingpong', 1)} | OTel `-off-cpu-threshold 1`: {otel} | {day} | {cmd} |")


def med(v):
    return f"{statistics.median(v):.2f} ({min(v):.2f}-{max(v):.2f})"


def report(res, failed, rounds):
    print(f"\nmedians over {rounds} alternating rounds (min-max), us per sample (off-CPU: per context switch)")
    print(f"{'workload':<16}{'profiler':<8}{'BPF program':>22}{'agent CPU':>22}{'runs/s':>9}{'agent %CPU':>11}")
    for w in ("qsortcb", "python3.11", "python-unnamed", "pingpong"):
        for name in ("loupe", "otel"):
            v = res.get((name, w))
            if not v:
                if w == "pingpong" and name in failed:
                    print(f"{w:<16}{name:<8}  did not start: {failed[name]}")
                continue
            print(f"{w:<16}{name:<8}{med([x[0] / 1000 for x in v]):>22}{med([x[1] / 1000 for x in v]):>22}{statistics.median(x[2] for x in v):>9.0f}"
                  f"{statistics.median(x[1] * x[2] / 1e7 for x in v):>11.2f}")
    for name in ("loupe", "otel"):
        v = res.get((name, "startup"))
        if v:
            print(f"start-up {name}: {med([x[0] for x in v])} s to sampling, {med([x[1] / 1e9 for x in v])} CPU-s")
    for name in ("loupe", "otel"):
        py, un = res.get((name, "python3.11")), res.get((name, "python-unnamed"))
        if py and un:
            d = statistics.median(x[0] for x in py) / 1000 - statistics.median(x[0] for x in un) / 1000
            print(f"Python frames, {name}: {d:+.2f} us of BPF per sample (python3.11 minus the unnamed copy, medians)")


if __name__ == "__main__":
    main()
