#!/usr/bin/env python3
"""Type-resolution coverage of `loupe data` on real programs built with -g
(scripts/realprogs.sh: Lua 5.4 interpreter, SQLite, zstd): the percent of
memory samples (samples at memory-referencing instructions with an exact
address) given a data type, next to TypeCraft's published 70-80% for user
space. Also how each typed sample was typed (static, register, site).

Usage: bench/dataprof_coverage.py [FREQ]   (REALPROGS=DIR: binaries already built by scripts/realprogs.sh --out DIR)
"""
import collections, json, os, subprocess, sys, tempfile
from common import LOUPE, ROOT

FREQ = sys.argv[1] if len(sys.argv) > 1 else "2000"


def main():
    bins = os.environ.get("REALPROGS") or subprocess.run([os.path.join(ROOT, "scripts/realprogs.sh")], check=True, capture_output=True, text=True).stdout.strip().splitlines()[-1]
    lua = os.path.join(ROOT, "testdata/realprogs/lua")
    progs = [
        ("lua nbody.lua", [os.path.join(bins, "lua"), os.path.join(lua, "nbody.lua")]),
        ("lua sort.lua", [os.path.join(bins, "lua"), os.path.join(lua, "sort.lua")]),
        ("sqlite-bench query 200", [os.path.join(bins, "sqlite-bench"), "query", "200"]),
        ("zstd-bench 3 32", [os.path.join(bins, "zstd-bench"), "3", "32"]),
    ]
    tmp = tempfile.mkdtemp(prefix="dprof-coverage-")
    print(f"{'program':24} {'samples':>8} {'memory':>8} {'typed':>8} {'typed %':>8}  by how")
    for i, (name, cmd) in enumerate(progs):
        db = os.path.join(tmp, str(i))
        subprocess.run([LOUPE, "record", "--data", "--freq", FREQ, "--db", db, "--", *cmd], check=True, capture_output=True)
        p = json.loads(subprocess.run([LOUPE, "data", "profile", "--format", "json", "--limit", "100000", "--db", db], check=True, capture_output=True, text=True).stdout)
        how = collections.Counter()
        for r in p["rows"]:
            how[r["how"]] += r["samples"]
        mem, typed = p["memory_samples"], p["typed_samples"]
        print(f"{name:24} {p['total_samples']:>8} {mem:>8} {typed:>8} {100 * typed / max(mem, 1):>7.1f}%  {dict(how)}")


if __name__ == "__main__":
    main()
