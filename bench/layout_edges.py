#!/usr/bin/env python3
"""How well a BOLT layout fits the complete profile, per function: the
executions of the complete (instrumented) profile's edges that each
profile's layout breaks, i.e. lays out as jumps instead of fall-throughs,
or sends into the cold fragment. Deterministic, and independent of any
test input: it reads BOLT's own dumps, not a run.

BOLT is run once per profile with `-print-cfg -print-finalized
-print-only=FUNCTION`: the CFG dump (before any pass) gives each block
label's input offset, the finalized dump the layout and the hot/cold split.
Edges are keyed by input offsets, so layouts from different profiles are
compared on the complete profile's edge counts. This is the measure that
found bolt-edges' missing fall-through records (BENCHMARKS.md, ninth pass:
Loupe's layouts of sqlite3VdbeExec broke 1.42-1.62 G of 4.30 G executions,
the complete profile's own 0.74 G).

Usage: bench/layout_edges.py --workdir DIR [--profiles r1-ratio,r1-probe,...] [--top N] FUNCTION
  (DIR from optimize_realprogs.py: builds/base-default/PROGRAM, instr.fdata and PROFILE.fdata;
   FUNCTION as BOLT names it, e.g. sqlite3VdbeExec/1 for a static function)
"""
import argparse, collections, json, os, re, subprocess, sys, tempfile
from optimize_realprogs import BOLT, BOLT_OPTS


def section(lines):
    """Blocks of one function dump: label -> (first input offset, [(successor label, count)]), the listing order,
    the index of the hot/cold split point (None when not split) and the `BB Layout` line."""
    blocks, order, split, layout, cur = {}, [], None, None, None
    for line in lines:
        if line.strip().startswith("BB Layout"):
            layout = [x.strip() for x in line.split(":", 1)[1].split(",")]
        m = re.match(r"^(\.\w+) \((\d+) instructions", line)
        if m:
            cur = m.group(1)
            order.append(cur)
            blocks[cur] = [None, []]
        elif "HOT-COLD SPLIT POINT" in line:
            split = len(order)
        elif cur:
            m = re.match(r"^\s+([0-9a-f]{8}): \t(?!!CFI)", line)
            if m and blocks[cur][0] is None:
                blocks[cur][0] = int(m.group(1), 16)
            if line.strip().startswith("Successors:"):
                blocks[cur][1] = [(s, int(c)) for s, c in re.findall(r"(\.\w+) \(mispreds: \d+, count: (\d+)\)", line)]
    return blocks, order, split, layout


def dump(binary, fdata, function, out):
    """BOLT's CFG and finalized dumps of `function` with profile `fdata`: (cfg blocks, finalized section)."""
    r = subprocess.run([BOLT, binary, "-o", out, f"-data={fdata}", *BOLT_OPTS, "-print-cfg", "-print-finalized",
                        f"-print-only={function}"], capture_output=True, text=True, check=True)
    lines = r.stdout.splitlines()
    cut = next((i for i, l in enumerate(lines) if "after finalize-functions" in l), None)
    if cut is None:
        sys.exit(f"layout_edges: BOLT printed no finalized {function} for {fdata} (a name BOLT does not know?)")
    return section(lines[:cut])[0], section(lines[cut:])


def edges_of(cfg):
    """Edge counts by (source offset, target offset)."""
    out = collections.Counter()
    for off, succ in cfg.values():
        for s, c in succ:
            out[(off, cfg[s][0])] += c
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--workdir", required=True)
    ap.add_argument("--profiles", default="", help="fdata names in WORKDIR (default: every rN-METHOD.fdata there)")
    ap.add_argument("--top", type=int, default=5, help="broken edges listed per profile, by the complete profile's count")
    ap.add_argument("function")
    a = ap.parse_args()
    bins = json.load(open(os.path.join(a.workdir, "prepared.json")))[0]
    base = bins["base-default"]
    names = a.profiles.split(",") if a.profiles else sorted(f[:-6] for f in os.listdir(a.workdir) if re.fullmatch(r"r\d+-\w+\.fdata", f))
    with tempfile.TemporaryDirectory() as d:
        truth_cfg, _ = dump(base, os.path.join(a.workdir, "instr.fdata"), a.function, os.path.join(d, "out"))
        truth = edges_of(truth_cfg)
        total = sum(truth.values())
        rows = {}
        for n in ["instr"] + names:
            cfg, (_, order, split, layout) = dump(base, os.path.join(a.workdir, f"{n}.fdata"), a.function, os.path.join(d, "out"))
            off = {label: b[0] for label, b in cfg.items()}
            cold = {off.get(label) for label in order[split:]} if split is not None else set()
            seq = [off.get(label) for label in layout]
            follows = {x: y for x, y in zip(seq, seq[1:]) if (x in cold) == (y in cold)}
            broken = {e: c for e, c in truth.items() if follows.get(e[0]) != e[1]}
            into_cold = sum(c for (u, v), c in truth.items() if v in cold and u not in cold)
            rows[n] = {"broken": sum(broken.values()), "into_cold": into_cold, "cold_blocks": len(cold)}
            worst = sorted(broken.items(), key=lambda kv: -kv[1])[: a.top] if n != "instr" else []
            print(f"{n:<12} breaks {sum(broken.values()) / 1e6:9.1f} M of {total / 1e6:.1f} M edge executions; "
                  f"into cold {into_cold / 1e6:7.1f} M; cold blocks {len(cold)}"
                  + ("".join(f"\n    {u:#x} -> {v:#x}: {c / 1e6:.1f} M" for (u, v), c in worst)))
    print(json.dumps({"function": a.function, "total": total, "profiles": rows}))


if __name__ == "__main__":
    main()
