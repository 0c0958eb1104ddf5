#!/usr/bin/env python3
"""Issue 22: the BPF stack program's run time per sample while `loupe record`
profiles qsortcb (no frame pointers, through libc's qsort: every stack is
walked by the unwind tables), binaries alternating round by round.

The program is found by the prog ids in the recording process's own
/proc/PID/fdinfo (other sessions may run programs of the same name), and its
run_time_ns / run_cnt read with kernel.bpf_stats_enabled=1 shortly before the
workload ends. Run as root.

Usage: bench/walk_cost.py ROUNDS SECONDS QSORTCB LOUPE...
"""
import json
import os
import re
import subprocess
import sys
import tempfile
import time


def own_prog_ids(pid):
    ids = set()
    for fd in os.listdir(f"/proc/{pid}/fdinfo"):
        try:
            for line in open(f"/proc/{pid}/fdinfo/{fd}"):
                if line.startswith("prog_id:"):
                    ids.add(int(line.split()[1]))
        except OSError:
            pass
    return ids


def one(loupe, qsortcb, secs):
    db = tempfile.mkdtemp() + "/db"
    p = subprocess.Popen([loupe, "record", "-o", db, "-F", "1000", "--", qsortcb, "--seconds", str(secs), "--out", "/dev/null"],
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    time.sleep(secs - 0.5)
    ids = own_prog_ids(p.pid)
    progs = json.loads(subprocess.run(["bpftool", "prog", "show", "-j"], capture_output=True, text=True).stdout)
    mine = [q for q in progs if q.get("name") == "on_sample" and q.get("id") in ids]
    ns, runs = sum(q.get("run_time_ns", 0) for q in mine), sum(q.get("run_cnt", 0) for q in mine)
    err = p.communicate()[1]
    m = re.search(r"\((\d+) walked by unwind tables", err)
    return ns / max(runs, 1), runs, int(m.group(1)) if m else 0


def main():
    rounds, secs, qsortcb, bins = int(sys.argv[1]), float(sys.argv[2]), sys.argv[3], sys.argv[4:]
    subprocess.run(["sysctl", "-q", "kernel.bpf_stats_enabled=1"], check=True)
    res = {b: [] for b in bins}
    for r in range(rounds):
        for b in bins:
            ns, runs, walked = one(b, qsortcb, secs)
            res[b].append(ns)
            print(f"{b} round {r}: {ns:.0f} ns per run over {runs} runs, {walked} stacks walked by tables", flush=True)
    for b in bins:
        v = sorted(res[b])
        print(f"{b}: median {v[len(v) // 2]:.0f} ns per run, range {v[0]:.0f}-{v[-1]:.0f}")


if __name__ == "__main__":
    main()
