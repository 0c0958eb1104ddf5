#!/usr/bin/env python3
"""Fleet store scale benchmark (issue 24): a synthetic fleet made from a
real recording, ingested into one local ClickHouse, then queried.

The template is a real Loupe database (--db, or a 5 s recording of
testdata's selftime workload made here, which needs root): its stacks and
leaf samples are stored once with `loupe ingest pprof`, and every simulated
host then sends, per minute bucket, the template's stacks and leaf offsets
scaled to HZ x CPUS x 60 samples, in the rows Loupe's shipper writes
(JSONEachRow over HTTP, one batch id per host-minute). Measured:

  ingest     rows/s and samples/s over the whole load (the shipper's path:
             JSON rows, HTTP, MergeTree), and per core of this machine;
  disk       bytes on disk per sample (samples + stack_counts + stacks);
  queries    `loupe top --source --by procedure` over the whole time span
             and `loupe flame --source --format json` over its last hour,
             each run 3 times (median, wall-clock, including symbolizing).

Usage:
  bench/fleet.py --loupe target/release/loupe [--db DB] [--hosts 100] [--hours 1]
                 [--hz 100] [--cpus 8] [--workers 4] [--json out.json]
Prints one JSON document and a BENCHMARKS.md row.
"""
import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from concurrent.futures import ProcessPoolExecutor

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def sh(*args, **kw):
    return subprocess.run(args, check=True, capture_output=True, text=True, **kw)


def post(http, sql, body=b""):
    data = sql.encode() + (b"\n" + body if body else b"")
    req = urllib.request.Request(http + "/?database=bench", data=data, method="POST")
    with urllib.request.urlopen(req, timeout=600) as r:
        return r.read().decode()


def select(http, sql):
    return [json.loads(l) for l in post(http, sql + " FORMAT JSONEachRow").splitlines() if l.strip()]


def template_db(args, tmp):
    if args.db:
        return args.db
    db = os.path.join(tmp, "template.db")
    out = os.path.join(tmp, "workloads")
    sh("make", "-s", "-C", os.path.join(ROOT, "testdata/workloads"), "OUT=" + out)
    sh(args.loupe, "record", "--db", db, "--", os.path.join(out, "selftime"), "--seconds", "5")
    return db


def load_template(http, limit):
    """The template's stack rows and leaf rows (what one host sends per bucket, before scaling): the `limit` most sampled of each."""
    stacks = select(http, "SELECT event, toString(stack) AS stack, pid, comm, toUInt64(sum(count)) AS n FROM stack_counts "
                          "WHERE host = 'template' GROUP BY event, stack, pid, comm ORDER BY n DESC LIMIT %d" % limit)
    flat = select(http, "SELECT kind, image, build_id, toString(content_hash) AS content_hash, event, pid, comm, "
                        "toString(offset) AS offset, toUInt64(sum(count)) AS n FROM samples WHERE host = 'template' "
                        "GROUP BY kind, image, build_id, content_hash, event, pid, comm, offset ORDER BY n DESC LIMIT %d" % limit)
    return stacks, flat


def note(msg):
    print("fleet.py: " + msg, file=sys.stderr, flush=True)


def scaled(rows, per_bucket, rnd):
    """Counts proportional to the template's, summing to per_bucket, with a little per-host noise."""
    total = sum(int(r["n"]) for r in rows) or 1
    out = []
    for r in rows:
        n = int(round(int(r["n"]) * per_bucket / total * rnd.uniform(0.9, 1.1)))
        if n > 0:
            out.append((r, n))
    return out


def host_batches(args, host, t0, stacks, flat):
    """JSONEachRow bodies for one host's buckets: (stack_counts body, samples body, rows, samples)."""
    rnd = random.Random(host)
    per_bucket = args.hz * args.cpus * 60
    buckets = args.hours * 60
    sc, sm, rows, samples = [], [], 0, 0
    for b in range(buckets):
        bucket = t0 + b * 60
        bid = "%032x" % rnd.getrandbits(128)
        common = '"bucket":%d,"host":"h%05d","label_keys":["version"],"label_values":["%s"]' % (
            bucket, host, "1.2" if host % 2 else "1.3")
        for i, (r, n) in enumerate(scaled(stacks, per_bucket, rnd)):
            sc.append('{%s,"pid":%d,"comm":%s,"event":"%s","stack":%s,"count":%d,"period":0,"batch_id":"%s","row":%d}' % (
                common, int(r["pid"]), json.dumps(r["comm"]), r["event"], r["stack"], n, bid, i))
            samples += n
        for i, (r, n) in enumerate(scaled(flat, per_bucket, rnd)):
            sm.append('{%s,"pid":%d,"comm":%s,"kind":"%s","image":%s,"build_id":"%s","content_hash":%s,"event":"%s",'
                      '"offset":%s,"count":%d,"batch_id":"%s","row":%d}' % (
                          common, int(r["pid"]), json.dumps(r["comm"]), r["kind"], json.dumps(r["image"]), r["build_id"],
                          r["content_hash"], r["event"], r["offset"], n, bid, i))
    rows = len(sc) + len(sm)
    return "\n".join(sc).encode(), "\n".join(sm).encode(), rows, samples


def send_host(job):
    """One simulated host's whole span (run in a worker process: generating JSON is CPU-bound)."""
    args, http, h, t0, stacks, flat = job
    sc, sm, rows, samples = host_batches(args, h, t0, stacks, flat)
    post(http, "INSERT INTO stack_counts FORMAT JSONEachRow", sc)
    post(http, "INSERT INTO samples FORMAT JSONEachRow", sm)
    return rows, samples


def ingest(args, http, stacks, flat, t0):
    cpu0 = os.times()
    start = time.monotonic()
    with ProcessPoolExecutor(args.workers) as ex:
        done = list(ex.map(send_host, [(args, http, h, t0, stacks, flat) for h in range(args.hosts)]))
    wall = time.monotonic() - start
    rows = sum(r for r, _ in done)
    samples = sum(s for _, s in done)
    return rows, samples, wall, cpu0


def timed(cmd, runs=3):
    times = []
    for _ in range(runs):
        t = time.monotonic()
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        times.append(time.monotonic() - t)
    return statistics.median(times)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--loupe", default=os.path.join(ROOT, "target/release/loupe"))
    ap.add_argument("--db", help="template database (default: record selftime for 5 s)")
    ap.add_argument("--hosts", type=int, default=100)
    ap.add_argument("--hours", type=int, default=1)
    ap.add_argument("--hz", type=int, default=100)
    ap.add_argument("--cpus", type=int, default=8)
    ap.add_argument("--workers", type=int, default=4)
    ap.add_argument("--rows", type=int, default=300,
                    help="distinct stacks (and leaf offsets) per host-minute, the template's most sampled (default 300)")
    ap.add_argument("--json")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="loupe-fleet-bench-") as tmp:
        chdir = os.path.join(tmp, "ch")
        http = sh(os.path.join(ROOT, "scripts/clickhouse.sh"), "start", chdir).stdout.split()[0]
        try:
            url = http.replace("http://", "clickhouse://") + "/bench"
            sh(args.loupe, "fleet", "init", url)
            db = template_db(args, tmp)
            note("template " + db)
            pb = os.path.join(tmp, "template.pb.gz")
            sh(args.loupe, "export", "--format", "pprof", "--epoch", "all", "--db", db, "-o", pb)
            sh(args.loupe, "ingest", "pprof", pb, "--ship", url, "--label", "host=template")
            stacks, flat = load_template(http, args.rows)
            note("%d stacks, %d offsets per host-minute; ingesting %d hosts x %d h" % (len(stacks), len(flat), args.hosts, args.hours))
            t0 = (int(time.time()) // 60 - args.hours * 60) * 60
            rows, samples, wall, cpu0 = ingest(args, http, stacks, flat, t0)
            note("ingested %d rows in %.1f s; querying" % (rows, wall))
            post(http, "OPTIMIZE TABLE stack_counts FINAL")
            post(http, "OPTIMIZE TABLE samples FINAL")
            disk = int(select(http, "SELECT toUInt64(sum(bytes_on_disk)) AS b FROM system.parts WHERE database = 'bench' AND active")[0]["b"])
            q_top = timed([args.loupe, "top", "--source", url, "--by", "procedure", "--format", "json", "--since", "%dh" % (args.hours + 1)])
            q_flame = timed([args.loupe, "flame", "--source", url, "--format", "json", "--since", "1h", "--db", db])
        finally:
            subprocess.run([os.path.join(ROOT, "scripts/clickhouse.sh"), "stop", chdir], capture_output=True)
    cores = os.cpu_count()
    per_host_minute = rows / max(1, args.hosts * args.hours * 60)
    doc = {
        "hosts": args.hosts, "hours": args.hours, "hz": args.hz, "cpus": args.cpus, "cores_here": cores,
        "template_stacks": len(stacks), "template_offsets": len(flat),
        "rows": rows, "samples": samples, "ingest_seconds": round(wall, 2),
        "rows_per_second": round(rows / wall), "samples_per_second": round(samples / wall),
        "rows_per_second_per_core": round(rows / wall / cores),
        "rows_per_second_for_1000_hosts_real_time": round(1000 * per_host_minute / 60),
        "bytes_on_disk": disk, "bytes_per_sample": round(disk / max(1, samples), 4),
        "top_all_seconds": round(q_top, 3), "flame_last_hour_seconds": round(q_flame, 3),
    }
    print(json.dumps(doc, indent=2))
    print("| fleet %d hosts x %d h, %d Hz x %d CPUs | %d rows in %.1f s: %d rows/s (%d per core), need %d for 1000 hosts | %.3f B/sample | top %.2f s, flame 1 h %.2f s |" % (
        args.hosts, args.hours, args.hz, args.cpus, rows, wall, doc["rows_per_second"], doc["rows_per_second_per_core"],
        doc["rows_per_second_for_1000_hosts_real_time"], doc["bytes_per_sample"], q_top, q_flame))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(doc, f, indent=2)


if __name__ == "__main__":
    sys.exit(main())
