"""A Python workload that measures itself: three functions burn CPU in
turns of about 0.3 s each, for the seconds given, and each adds the CPU
time it used (time.thread_time, the thread's CPU clock) to its total; the
totals and the pid are written as JSON to the file given. `c_hash` spends
its time in a C function (hashlib's sha256) called from Python, so a
profile should show the C code underneath it.

    python3 selftime.py SECONDS OUT.json
"""

import hashlib
import json
import os
import sys
import time

TOTALS = {"py_alpha": 0.0, "py_beta": 0.0, "c_hash": 0.0}


def py_alpha(until):
    start = time.thread_time()
    x = 0
    while time.thread_time() < until:
        for i in range(2000):
            x = (x * 31 + i) & 0xFFFFFFFF
    TOTALS["py_alpha"] += time.thread_time() - start
    return x


def py_beta(until):
    start = time.thread_time()
    s = ""
    while time.thread_time() < until:
        s = "".join(str(i) for i in range(300))
    TOTALS["py_beta"] += time.thread_time() - start
    return s


def c_hash(until):
    start = time.thread_time()
    data = b"x" * (1 << 20)
    while time.thread_time() < until:
        hashlib.sha256(data).digest()
    TOTALS["c_hash"] += time.thread_time() - start


def main():
    seconds, out = float(sys.argv[1]), sys.argv[2]
    begin = time.thread_time()
    turns = [(py_alpha, 0.3), (py_beta, 0.2), (c_hash, 0.1)]
    while time.thread_time() - begin < seconds:
        for f, slice_s in turns:
            f(time.thread_time() + slice_s)
    total = time.thread_time() - begin
    with open(out, "w") as fh:
        json.dump({"pid": os.getpid(), "total_cpu": total, "functions": TOTALS}, fh)


main()
