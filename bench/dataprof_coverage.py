#!/usr/bin/env python3
"""Type-resolution coverage of `loupe data` on real programs built with -g
(scripts/realprogs.sh: Lua 5.4 interpreter, SQLite, zstd, gawk): the percent of
memory samples (samples at memory-referencing instructions with an exact
address) given a data type, next to TypeCraft's published 70-80% for user
space. Also how each typed sample was typed (static, register, site) and the
untyped ones' largest reasons. Samples in Loupe's own allocation shim are not
the program's: the loupe under test leaves them out (and says how many).

Usage: bench/dataprof_coverage.py [FREQ]   (REALPROGS=DIR: binaries already built by scripts/realprogs.sh --out DIR;
LOUPE_BEFORE=PATH: also record and resolve each program with that loupe, side by side in the same run)
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
        ("gawk report.awk", [os.path.join(bins, "gawk"), "-v", "n=300000", "-f", os.path.join(ROOT, "testdata/realprogs/awk/report.awk")]),
    ]
    tmp = tempfile.mkdtemp(prefix="dprof-coverage-")
    loupes = [("", LOUPE)] + ([("before", os.environ["LOUPE_BEFORE"])] if os.environ.get("LOUPE_BEFORE") else [])
    print(f"{'program':24} {'loupe':>6} {'samples':>8} {'memory':>8} {'typed':>8} {'typed %':>8}  by how; untyped reasons")
    for i, (name, cmd) in enumerate(progs):
        for tag, loupe in loupes:
            db = os.path.join(tmp, f"{i}{tag}")
            subprocess.run([loupe, "record", "--data", "--freq", FREQ, "--db", db, "--", *cmd], check=True, capture_output=True)
            p = json.loads(subprocess.run([loupe, "data", "profile", "--format", "json", "--limit", "100000", "--db", db], check=True, capture_output=True, text=True).stdout)
            how = collections.Counter()
            for r in p["rows"]:
                how[r["how"]] += r["samples"]
            mem, typed = p["memory_samples"], p["typed_samples"]
            why = {k: f"{100 * v / max(mem, 1):.1f}%" for k, v in p.get("coverage", {}).get("untyped", {}).items()}
            shim = f"; {p['shim_samples']} in the allocation shim left out" if p.get("shim_samples") else ""
            print(f"{name:24} {tag or 'this':>6} {p['total_samples']:>8} {mem:>8} {typed:>8} {100 * typed / max(mem, 1):>7.1f}%  {dict(how)}; {why}{shim}", flush=True)


if __name__ == "__main__":
    main()
