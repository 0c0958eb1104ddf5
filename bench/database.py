#!/usr/bin/env python3
"""Database footprint and `loupe top` latency over a large database.

Fills one epoch with `loupe record` (whole machine, high rate) while a mixed
workload runs — gcc compiles (DCPI's churn case), Python, gzip, find, the
selftime and churn workloads — then reports:
  * samples, distinct entries, images, database bytes, bytes per entry;
  * database size relative to the images it describes (DCPI: ~10x smaller);
  * median of 10 runs of `loupe top` by image, procedure and line.

A day at 1000 samples/s on 2 CPUs is 172.8 M samples. What `top` costs
depends on distinct entries and images (counts are varints), so the script
records at a high rate for a while to reach a day-like entry count and says
how many samples and entries the database holds.

Usage: bench/database.py [--seconds 120] [--freq 20000] [--db DIR]
"""
import argparse, json, os, statistics, subprocess, sys, tempfile, time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LOUPE = os.environ.get("LOUPE", os.path.join(ROOT, "target/release/loupe"))
WL = os.path.join(ROOT, "target/bench-workloads")

MIX = f"""
end=$(( $(date +%s) + $1 ))
while [ $(date +%s) -lt $end ]; do
  for f in {ROOT}/testdata/workloads/*.c; do cc -O2 -c "$f" -o /tmp/loupe-bench-$$.o; done
  python3 -c 'import json,re; d=[{{"k":i,"v":str(i)*5}} for i in range(60000)]; json.loads(json.dumps(d)); [re.sub("1","2",x["v"]) for x in d]'
  cat /usr/bin/* 2>/dev/null | head -c 40000000 | gzip -1 > /dev/null
  find /usr/lib -name '*.so*' > /dev/null
  {WL}/churn --count 300 > /dev/null
  {WL}/selftime --seconds 1 > /dev/null
done
"""


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=int, default=120)
    ap.add_argument("--freq", type=int, default=20000)
    ap.add_argument("--db")
    a = ap.parse_args()
    subprocess.run(["make", "-s", "-C", os.path.join(ROOT, "testdata/workloads"), f"OUT={WL}"], check=True)
    db = a.db or os.path.join(tempfile.mkdtemp(prefix="loupe-db-bench."), "db")
    if not os.path.exists(os.path.join(db, "LOUPE_DB")):
        mix = subprocess.Popen(["bash", "-c", MIX, "mix", str(a.seconds)])
        subprocess.run([LOUPE, "record", "--db", db, "--freq", str(a.freq), "--duration", str(a.seconds)], check=True, stderr=subprocess.DEVNULL)
        mix.wait()
    index_path = max((os.path.join(db, "epochs", e, "index.json") for e in os.listdir(os.path.join(db, "epochs"))))
    entries = json.load(open(index_path))["entries"]
    epoch_dir = os.path.dirname(index_path)
    prof_bytes = sum(os.path.getsize(os.path.join(epoch_dir, e["file"])) for e in entries)
    all_bytes = sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(db) for f in fs)
    n_entries = sum(e.get("entries", 0) for e in entries)
    samples = sum(e["total_samples"] for e in entries)
    image_bytes, measured = 0, 0
    for e in entries:
        p = e["image"]["path"]
        if p.startswith("/") and os.path.isfile(p):
            image_bytes += os.path.getsize(p)
            measured += os.path.getsize(os.path.join(epoch_dir, e["file"]))
    print(f"# database: {time.strftime('%Y-%m-%d %H:%M')} UTC, {os.cpu_count()} CPUs, {db}")
    print(f"| samples | entries | profile files | profile bytes | bytes/entry | whole DB bytes | images on disk | profiles/images |")
    print(f"|---|---|---|---|---|---|---|---|")
    print(f"| {samples} | {n_entries} | {len(entries)} | {prof_bytes} | {prof_bytes / max(n_entries, 1):.2f} | {all_bytes} | {image_bytes} | 1/{image_bytes / max(measured, 1):.0f} |")
    print()
    print("| command | median s | min-max s |")
    print("|---|---|---|")
    for by in ["image", "procedure", "line"]:
        ts = []
        for _ in range(10):
            t0 = time.perf_counter()
            subprocess.run([LOUPE, "top", "--db", db, "--by", by, "--limit", "30"], check=True, stdout=subprocess.DEVNULL)
            ts.append(time.perf_counter() - t0)
        print(f"| loupe top --by {by} | {statistics.median(ts):.3f} | {min(ts):.3f}-{max(ts):.3f} |", flush=True)


if __name__ == "__main__":
    main()
