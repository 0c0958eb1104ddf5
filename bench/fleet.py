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

--replicate HOSTSxHOURS (e.g. 1000x24) then grows the fleet inside
ClickHouse: the rows the real path stored (hosts x 1 h) are copied with
host names and times shifted (`INSERT ... SELECT` over `arrayJoin(range())`,
a fresh batch id per copy) until HOSTS hosts x HOURS hours exist, and the
queries cover whole UTC hours: `top` of the whole span, `flame` of its last
hour (and `--since 1h`, which is not hour-aligned, for the edges' cost).
With --old-loupe (a Loupe with schema 2, no rollups) the schema is made
and loaded by it, its queries are timed ("before"), then `--loupe fleet
init` migrates to rollups (timed) and the queries are timed again
("after"); finally HOSTS_REAL more hosts go through the real path again,
now with the rollups' views, for the ingest rate with them.

Usage:
  bench/fleet.py --loupe target/release/loupe [--db DB] [--hosts 100] [--hours 1]
                 [--hz 100] [--cpus 8] [--workers 4] [--json out.json]
                 [--replicate 1000x24 [--old-loupe OLD]]
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
import urllib.error
import urllib.request
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def sh(*args, **kw):
    r = subprocess.run(args, capture_output=True, text=True, **kw)
    if r.returncode != 0:
        raise RuntimeError("%s failed: %s" % (" ".join(args), r.stderr.strip()[-1000:]))
    return r


def post(http, sql, body=b"", settings=""):
    data = sql.encode() + (b"\n" + body if body else b"")
    req = urllib.request.Request(http + "/?database=bench" + settings, data=data, method="POST")
    try:
        with urllib.request.urlopen(req, timeout=3600) as r:
            return r.read().decode()
    except urllib.error.HTTPError as e:
        raise RuntimeError("ClickHouse: %s\n%s" % (e.read().decode(errors="replace")[:1000], sql[:500])) from None


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


def host_batches(args, host, t0, stacks, flat, hours=None):
    """JSONEachRow bodies for one host's buckets: (stack_counts body, samples body, rows, samples)."""
    rnd = random.Random(host)
    per_bucket = args.hz * args.cpus * 60
    buckets = (hours or args.hours) * 60
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
    sc, sm, rows, samples = host_batches(args, h, t0, stacks, flat, 1 if args.replicate else None)
    post(http, "INSERT INTO stack_counts FORMAT JSONEachRow", sc)
    post(http, "INSERT INTO samples FORMAT JSONEachRow", sm)
    return rows, samples


def ingest(args, http, stacks, flat, t0, first=0):
    cpu0 = os.times()
    start = time.monotonic()
    with ProcessPoolExecutor(args.workers) as ex:
        done = list(ex.map(send_host, [(args, http, h, t0, stacks, flat) for h in range(first, first + args.hosts)]))
    wall = time.monotonic() - start
    rows = sum(r for r, _ in done)
    samples = sum(s for _, s in done)
    return rows, samples, wall, cpu0


def timed(cmd, runs=3):
    """Median wall seconds of `runs` runs; a failing command gives its time and the reason instead."""
    times = []
    for _ in range(runs):
        t = time.monotonic()
        r = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        times.append(time.monotonic() - t)
        if r.returncode != 0:
            return {"failed_after_s": round(times[-1], 2), "error": r.stderr.strip().splitlines()[-1][:300]}
    return round(statistics.median(times), 3)


def timed_total(cmd, key, runs=3):
    """timed(), and the answer's `key` (its sample total) from one more run, so before and after can be compared."""
    t = timed(cmd, runs)
    if isinstance(t, dict):
        return t
    r = subprocess.run(cmd, check=True, capture_output=True, text=True)
    return {"seconds": t, "samples": json.loads(r.stdout)[key]}


def iso(t):
    """Unix seconds as a time --since/--until read as one (a bare number is a duration ago)."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t))


COLUMNS = {
    "samples": "label_keys, label_values, pid, comm, kind, image, build_id, content_hash, event, offset, count",
    "stack_counts": "label_keys, label_values, pid, comm, event, stack, count, period",
}


def replicate(http, t0, real_hosts, hosts, hours, parallel=1):
    """Copies the real rows (hosts h00000.. of [t0, t0+1h)) to `hosts` hosts x `hours` hours ending at t0+1h,
    one INSERT per hour shift and table (range() with one argument: 18.16 has no other); returns (rows, seconds).
    `parallel` INSERTs run at once (safe: each writes hours or hosts outside the rows every copy reads)."""
    per_hour = hosts // real_hosts

    def copy(job):
        j, table, cols = job
        lo = 1 if j == 0 else 0
        post(http, (
            "INSERT INTO {t} (bucket, host, {c}, batch_id, row) SELECT bucket - {j} * 3600, "
            "concat('h', substring(toString(100000 + toUInt32OrZero(substring(host, 2)) + k * {rh}), 2)), {c}, "
            "concat(batch_id, '-', toString({j}), '-', toString(k)), row FROM {t} ARRAY JOIN range({ph}) AS k "
            "WHERE k >= {lo} AND bucket >= toDateTime({t0}) AND bucket < toDateTime({t1}) AND host LIKE 'h%' "
            "AND toUInt32OrZero(substring(host, 2)) < {rh}").format(
                t=table, c=cols, j=j, rh=real_hosts, lo=lo, ph=per_hour, t0=t0, t1=t0 + 3600),
            # Making the data is not what is measured: past the 2 GB per-query limit
            # the queries keep (a copy on 16 CPUs needed more).
            settings="&max_memory_usage=20000000000")
        note("replicated %s hour -%d" % (table, j))

    start = time.monotonic()
    jobs = [(j, table, cols) for j in range(hours) for table, cols in COLUMNS.items()]
    with ThreadPoolExecutor(max(1, parallel)) as ex:
        list(ex.map(copy, jobs))
    wall = time.monotonic() - start
    rows = int(select(http, "SELECT toUInt64((SELECT count() FROM samples) + (SELECT count() FROM stack_counts)) AS n")[0]["n"])
    return rows, wall


def disk_bytes(http, tables):
    names = ", ".join("'%s'" % t for t in tables)
    return int(select(http, "SELECT toUInt64(sum(bytes_on_disk)) AS b FROM system.parts "
                            "WHERE database = 'bench' AND active AND table IN (%s)" % names)[0]["b"])


def queries(loupe, url, db, t_from, t_to):
    """top of [t_from, t_to), flame of its last hour and of `--since 1h`; each noted as it is measured."""
    plan = {
        "top_span": ([loupe, "top", "--source", url, "--by", "procedure", "--format", "json",
                      "--since", iso(t_from), "--until", iso(t_to)], "total_samples"),
        "flame_hour": ([loupe, "flame", "--source", url, "--format", "json", "--db", db,
                        "--since", iso(t_to - 3600), "--until", iso(t_to)], "total"),
        "flame_since_1h": ([loupe, "flame", "--source", url, "--format", "json", "--db", db, "--since", "1h"], "total"),
    }
    out = {}
    for name, (cmd, key) in plan.items():
        out[name] = timed_total(cmd, key)
        note("%s: %s" % (name, json.dumps(out[name])))
    return out


def scale_run(args, http, url, tmp):
    """The --replicate run (see the module's doc); returns the JSON document."""
    hosts, hours = (int(x) for x in args.replicate.split("x"))
    old = args.old_loupe or args.loupe
    sh(old, "fleet", "init", url)
    db = template_db(args, tmp)
    pb = os.path.join(tmp, "template.pb.gz")
    sh(args.loupe, "export", "--format", "pprof", "--epoch", "all", "--db", db, "-o", pb)
    sh(old, "ingest", "pprof", pb, "--ship", url, "--label", "host=template")
    stacks, flat = load_template(http, args.rows)
    t0 = (int(time.time()) // 3600 - 1) * 3600
    rows, samples, wall, _ = ingest(args, http, stacks, flat, t0)
    doc = {"real_path": {"hosts": args.hosts, "hours": 1, "rows": rows, "samples": samples, "seconds": round(wall, 2),
                         "rows_per_second": round(rows / wall), "rows_per_second_per_core": round(rows / wall / os.cpu_count()),
                         "schema": "old" if args.old_loupe else "rollups"}}
    note("real path: %d rows in %.1f s; replicating to %d hosts x %d h" % (rows, wall, hosts, hours))
    total, rwall = replicate(http, t0, args.hosts, hosts, hours, args.parallel)
    samples_total = samples * (hosts // args.hosts) * hours
    doc["replicated"] = {"hosts": hosts, "hours": hours, "parallel": args.parallel, "rows": total, "samples": samples_total, "seconds": round(rwall, 1),
                         "rows_per_host_minute": round(rows / (args.hosts * 60), 1)}
    fine = ["samples", "stack_counts", "stacks"]
    t_from, t_to = t0 - (hours - 1) * 3600, t0 + 3600
    if args.old_loupe:
        doc["disk_fine_bytes"] = disk_bytes(http, fine)
        note("before: querying with %s" % old)
        doc["before"] = queries(old, url, db, t_from, t_to)
        note("before: " + json.dumps(doc))
        start = time.monotonic()
        sh(args.loupe, "fleet", "init", url)
        doc["migration_seconds"] = round(time.monotonic() - start, 1)
    doc["disk_fine_bytes"] = disk_bytes(http, fine)
    doc["disk_rollup_bytes"] = disk_bytes(http, ["samples_hourly", "stack_counts_hourly", "batches"])
    doc["bytes_per_sample"] = round(doc["disk_fine_bytes"] / samples_total, 4)
    doc["bytes_per_sample_with_rollups"] = round((doc["disk_fine_bytes"] + doc["disk_rollup_bytes"]) / samples_total, 4)
    note("after: querying with %s" % args.loupe)
    doc["after"] = queries(args.loupe, url, db, t_from, t_to)
    if args.old_loupe:
        rows2, _, wall2, _ = ingest(args, http, stacks, flat, t0, first=50000)
        doc["real_path_with_rollups"] = {"rows": rows2, "seconds": round(wall2, 2), "rows_per_second": round(rows2 / wall2),
                                         "rows_per_second_per_core": round(rows2 / wall2 / os.cpu_count())}
    doc["rows_per_second_for_1000_hosts_real_time"] = round(1000 * rows / (args.hosts * 60) / 60)
    return doc


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
    ap.add_argument("--replicate", help="HOSTSxHOURS: grow the real rows to this fleet inside ClickHouse (e.g. 1000x24)")
    ap.add_argument("--parallel", type=int, default=1, help="with --replicate: INSERT ... SELECT copies run at once")
    ap.add_argument("--old-loupe", help="with --replicate: a schema-2 Loupe, timed before migrating to rollups")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="loupe-fleet-bench-", dir=os.environ.get("TMPDIR")) as tmp:
        chdir = os.path.join(tmp, "ch")
        http = sh(os.path.join(ROOT, "scripts/clickhouse.sh"), "start", chdir).stdout.split()[0]
        try:
            url = http.replace("http://", "clickhouse://") + "/bench"
            if args.replicate:
                doc = scale_run(args, http, url, tmp)
                print(json.dumps(doc, indent=2))
                if args.json:
                    with open(args.json, "w") as f:
                        json.dump(doc, f, indent=2)
                return 0
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
