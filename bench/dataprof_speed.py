#!/usr/bin/env python3
"""Speed of `loupe data profile` on a 1-million-sample access log (issue 28).

Records the dtypes workload (testdata/workloads/dtypes.c, -O2 -g: heap blocks
typed at allocation, statics, stack locals) with `record --data`, then
repeats its access log's records as they are (same times, so the heap
blocks of the allocation log still hold them) until there are N, and
times `loupe data profile` over it (best of R runs, wall clock).

Usage: bench/dataprof_speed.py [N] [R]   (defaults 1000000 3)
"""
import os, shutil, struct, subprocess, sys, tempfile, time
from common import LOUPE, ROOT

N = int(sys.argv[1]) if len(sys.argv) > 1 else 1_000_000
R = int(sys.argv[2]) if len(sys.argv) > 2 else 3


def main():
    out = os.path.join(ROOT, "target/testdata-workloads")
    subprocess.run(["make", "-s", "-C", os.path.join(ROOT, "testdata/workloads"), f"OUT={out}"], check=True)
    db = tempfile.mkdtemp(prefix="dprof-speed-")
    subprocess.run([LOUPE, "record", "--data", "--freq", "4000", "--db", db, "--", os.path.join(out, "dtypes-O2"), "2"], check=True, capture_output=True)
    path = os.path.join(db, "data", "access.dlog")
    data = open(path, "rb").read()
    magic, recs = data[:8], data[8:]
    recs = [recs[i:i + 64] for i in range(0, len(recs) - len(recs) % 64, 64)]
    with open(path, "wb") as f:
        f.write(magic)
        for i in range(N):
            f.write(recs[i % len(recs)])
    best = None
    for _ in range(R):
        t = time.monotonic()
        p = subprocess.run([LOUPE, "data", "profile", "--db", db, "--limit", "5"], check=True, capture_output=True, text=True)
        dt = time.monotonic() - t
        best = dt if best is None else min(best, dt)
    print(p.stdout)
    print(f"{N} samples ({len(recs)} recorded, repeated): data profile best of {R}: {best:.2f} s")
    shutil.rmtree(db)


if __name__ == "__main__":
    main()
