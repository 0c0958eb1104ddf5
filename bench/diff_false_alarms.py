#!/usr/bin/env python3
"""False alarms and power of `loupe diff`.

Records PAIRS pairs of identical runs of testdata/workloads/scaling (four
procedures of UNITS work units each) and PAIRS pairs in which `grow` runs
twice the units, each run into its own database with `loupe record`, then
counts per pair the buckets `loupe diff` marks significant, at --level 0.05
and 0.01. Beside it, the baseline McKenney describes: a plain ratio profile
filtered by a fixed count threshold (a bucket "changed" when it has at least
MIN samples on one side and a ratio beyond 1.1 either way), and the plain
ratio order itself (is the changed procedure its first row?).

Ground truth: in the identical pairs nothing changed, so every significant
bucket is a false alarm; with Benjamini-Hochberg at level q the chance that
a pair has any is at most q. In the doubled pairs exactly `grow` changed.

Usage: bench/diff_false_alarms.py [--pairs 20] [--units 50] [--min 20]
"""
import argparse, json, os, subprocess, sys, tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LOUPE = os.environ.get("LOUPE", os.path.join(ROOT, "target/release/loupe"))
WL = os.path.join(ROOT, "target/bench-workloads")


def record(db, units):
    subprocess.run([LOUPE, "record", "--freq", "4000", "--db", db, "--", os.path.join(WL, "scaling")] + units,
                   check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def diff(a, b, level):
    out = subprocess.run([LOUPE, "diff", a, b, "--format", "json", "--limit", "1000000", "--level", str(level)],
                         check=True, capture_output=True, text=True).stdout
    return json.loads(out)["rows"]


def threshold_alarms(rows, minimum):
    def changed(r):
        a, b = r["a"], r["b"]
        return max(a, b) >= minimum and (a == 0 or b / a > 1.1 or b / a < 1 / 1.1)
    return [r["procedure"] for r in rows if changed(r)]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--pairs", type=int, default=20)
    ap.add_argument("--units", type=int, default=50)
    ap.add_argument("--min", type=int, default=10, help="count threshold of the baseline filter")
    args = ap.parse_args()
    subprocess.run(["make", "-s", "-C", os.path.join(ROOT, "testdata/workloads"), f"OUT={WL}"], check=True)
    base = [f"{p}={args.units}" for p in ("steady_a", "steady_b", "steady_c", "grow")]
    doubled = base[:3] + [f"grow={2 * args.units}"]
    tally = {}
    with tempfile.TemporaryDirectory() as tmp:
        for kind, b_units in (("same", base), ("doubled", doubled)):
            for i in range(args.pairs):
                a, b = os.path.join(tmp, f"{kind}-a{i}"), os.path.join(tmp, f"{kind}-b{i}")
                record(a, base)
                record(b, b_units)
                for level in (0.05, 0.01):
                    rows = diff(a, b, level)
                    sig = [r["procedure"] for r in rows if r["significant"]]
                    t = tally.setdefault((kind, level), {"pairs_with_alarm": 0, "sig": 0, "buckets": 0, "grow_first": 0,
                                                        "thr": 0, "thr_pairs": 0, "plain_first": 0})
                    t["buckets"] += len(rows)
                    extra = [p for p in sig if not (kind == "doubled" and p == "grow")]
                    t["sig"] += len(extra)
                    t["pairs_with_alarm"] += bool(extra)
                    t["grow_first"] += rows[0]["procedure"] == "grow" and rows[0]["significant"]
                    thr = [p for p in threshold_alarms(rows, args.min) if not (kind == "doubled" and p == "grow")]
                    t["thr"] += len(thr)
                    t["thr_pairs"] += bool(thr)
                    plain = sorted(rows, key=lambda r: -(r["b"] / r["a"] if r["a"] else float("inf")))
                    t["plain_first"] += plain[0]["procedure"] == "grow"
                print(kind, i, "significant:", sig, file=sys.stderr)
    print(f"| pairs | nothing changed? | level | buckets compared | pairs with a false alarm | false-alarm buckets | "
          f"grow first and significant | plain ratio order: grow first | "
          f"threshold filter (>= {args.min} samples, ratio beyond 1.1): false-alarm buckets / pairs |")
    print("|---|---|---|---|---|---|---|---|---|")
    for (kind, level), t in sorted(tally.items()):
        print(f"| {args.pairs} | {'yes' if kind == 'same' else 'no: grow x2'} | {level} | {t['buckets']} | "
              f"{t['pairs_with_alarm']} | {t['sig']} | {t['grow_first'] if kind == 'doubled' else '-'} | "
              f"{t['plain_first'] if kind == 'doubled' else '-'} | {t['thr']} / {t['thr_pairs']} |")


if __name__ == "__main__":
    main()
