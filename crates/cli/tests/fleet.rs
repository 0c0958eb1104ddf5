//! Fleet shipping end to end: real `loupe record --ship` runs of a known
//! workload into two real ClickHouse servers (a two-shard cluster started
//! by scripts/clickhouse.sh), checked against the local databases the same
//! runs wrote.

mod util;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use util::{json, loupe, repo_root, require_root, run_ok, workloads};

/// Two servers for one test, stopped when dropped.
struct ClickHouse {
    dir: tempfile::TempDir,
    urls: Vec<String>,
}

impl ClickHouse {
    /// None (with a message) when clickhouse-server is not installed.
    fn start() -> Option<ClickHouse> {
        if !Path::new("/usr/sbin/clickhouse-server").exists() && which("clickhouse-server").is_none() {
            eprintln!("SKIP: clickhouse-server is not installed (scripts/setup.sh installs it)");
            return None;
        }
        let dir = tempfile::tempdir().unwrap();
        let out = run_ok(Command::new(script()).arg("start").arg(dir.path()));
        let urls = String::from_utf8(out.stdout).unwrap().lines().map(|l| l.replace("http://", "")).collect();
        Some(ClickHouse { dir, urls })
    }

    /// `clickhouse://HOST:PORT/DB` of server `i` (0 or 1).
    fn url(&self, i: usize, db: &str) -> String {
        format!("clickhouse://{}/{db}", self.urls[i])
    }

    fn kill(&self, i: usize) {
        run_ok(Command::new(script()).arg("kill").arg(self.dir.path()).arg((i + 1).to_string()));
    }

    fn revive(&self, i: usize) {
        run_ok(Command::new(script()).arg("revive").arg(self.dir.path()).arg((i + 1).to_string()));
    }

    fn init_cluster(&self, db: &str) {
        run_ok(loupe().args(["fleet", "init", &self.url(0, db), &self.url(1, db), "--cluster", "loupe", "--retention", "30d"]));
    }
}

impl Drop for ClickHouse {
    fn drop(&mut self) {
        let _ = Command::new(script()).arg("stop").arg(self.dir.path()).status();
    }
}

fn script() -> PathBuf {
    repo_root().join("scripts/clickhouse.sh")
}

fn which(cmd: &str) -> Option<PathBuf> {
    std::env::split_paths(&std::env::var_os("PATH")?).map(|d| d.join(cmd)).find(|p| p.is_file())
}

/// `record --ship` of selftime for `seconds`, as host `host`.
fn record(db: &Path, url: &str, host: &str, seconds: &str, extra: &[&str]) -> Output {
    record_workload(db, url, host, extra, &[workloads().join("selftime").to_str().unwrap(), "--seconds", seconds])
}

/// `record --ship` of `command`, as host `host`.
fn record_workload(db: &Path, url: &str, host: &str, extra: &[&str], command: &[&str]) -> Output {
    let mut c = loupe();
    c.args(["record", "--flush-every", "1", "--db"]).arg(db).args(["--ship", url, "--label"]).arg(format!("host={host}"));
    c.args(extra).arg("--").args(command);
    run_ok(&mut c)
}

/// `record --ship` of `scaling` with `units` at 4 kHz, as host `host`; what it measured of itself.
fn record_scaling(db: &Path, url: &str, host: &str, units: &[&str]) -> serde_json::Value {
    let truth = db.with_extension("truth.json");
    let scaling = workloads().join("scaling");
    let mut command = vec![scaling.to_str().unwrap()];
    command.extend(units);
    command.extend(["--out", truth.to_str().unwrap()]);
    record_workload(db, url, host, &["--label", "version=1.2", "--ship-symbols", "--freq", "4000"], &command);
    serde_json::from_slice(&std::fs::read(&truth).unwrap()).unwrap()
}

/// Samples per image (and procedure, when `by` is procedure) of a `top --format json`.
fn rows(out: &Output) -> BTreeMap<String, u64> {
    let doc = json(out);
    doc["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| (format!("{} {}", r["image"].as_str().unwrap(), r["procedure"].as_str().unwrap_or("")), r["samples"].as_u64().unwrap()))
        .collect()
}

fn local_top(db: &Path, by: &str) -> Output {
    run_ok(loupe().args(["top", "--limit", "100000", "--format", "json", "--by", by, "--db"]).arg(db))
}

fn fleet_top(url: &str, args: &[&str]) -> Output {
    run_ok(loupe().args(["top", "--limit", "100000", "--format", "json", "--source", url]).args(args))
}

fn total(out: &Output) -> u64 {
    json(out)["total_samples"].as_u64().unwrap()
}

#[test]
fn fleet_top_equals_the_sum_of_three_local_databases() {
    // Checks three hosts' shipped counts against their own databases: per host, per image and procedure, and in total, exactly; then serve --source and diff --source over them.
    if !require_root() {
        return;
    }
    let Some(ch) = ClickHouse::start() else { return };
    ch.init_cluster("prof");
    let dir = tempfile::tempdir().unwrap();
    let hosts = ["web-1", "web-2", "db-1"];
    // web-2 and db-1 run `scaling`, db-1 with twice the units of `grow`: a change by construction for the fleet diff. (Not
    // more: the expected ratio of unchanged rows is the sample-weighted median of all rows' ratios, which a `grow` holding
    // half the samples would move.)
    record(&dir.path().join("web-1"), &ch.url(0, "prof"), "web-1", "1", &["--label", "version=1.2", "--ship-symbols"]);
    let truth_a = record_scaling(&dir.path().join("web-2"), &ch.url(0, "prof"), "web-2", &[]);
    let truth_b = record_scaling(&dir.path().join("db-1"), &ch.url(0, "prof"), "db-1", &["grow=200"]);
    let url = ch.url(1, "prof");
    let by_host = json(&fleet_top(&url, &["--by", "host"]));
    let mut sum = BTreeMap::<String, u64>::new();
    let mut grand = 0;
    for h in hosts {
        let local = local_top(&dir.path().join(h), "procedure");
        let row =
            by_host["rows"].as_array().unwrap().iter().find(|r| r["host"] == h).unwrap_or_else(|| panic!("no row for {h}: {by_host}"));
        assert_eq!(row["samples"].as_u64().unwrap(), total(&local), "host {h}");
        assert_eq!(total(&fleet_top(&url, &["--where", &format!("host={h}")])), total(&local), "--where host={h}");
        for (k, n) in rows(&local) {
            *sum.entry(k).or_default() += n;
        }
        grand += total(&local);
    }
    // The vDSO is in no file here: its names come from the symbols the hosts uploaded.
    let fleet = fleet_top(&url, &["--by", "procedure", "--db", dir.path().join("none").to_str().unwrap()]);
    assert_eq!(total(&fleet), grand);
    assert_eq!(rows(&fleet), sum, "per image and procedure");
    assert_eq!(
        total(&fleet_top(&url, &["--where", "host~^web-", "--where", "version=1.2"])),
        grand - total(&local_top(&dir.path().join("db-1"), "image"))
    );
    assert_eq!(total(&fleet_top(&url, &["--where", "version=1.3"])), 0);
    stats_source_equals_the_local_stats(&url, dir.path(), &hosts);

    // Call stacks: the fleet's collapsed stacks are the three databases' summed, stack by stack, and so is the flame graph's total.
    let mut stacks = BTreeMap::<String, u64>::new();
    for h in hosts {
        let db = dir.path().join(h);
        for (k, n) in collapsed(&run_ok(loupe().args(["export", "--format", "collapsed", "--epoch", "all", "--db"]).arg(&db))) {
            *stacks.entry(k).or_default() += n;
        }
    }
    assert!(stacks.len() > 1, "the workload has several stacks: {stacks:?}");
    let db0 = dir.path().join(hosts[0]);
    let fleet = collapsed(&run_ok(loupe().args(["export", "--format", "collapsed", "--source", &url, "--db"]).arg(&db0)));
    assert_eq!(fleet, stacks, "fleet collapsed stacks = the sum of the hosts'");
    let flame = json(&run_ok(loupe().args(["flame", "--format", "json", "--source", &url, "--db"]).arg(&db0)));
    assert_eq!(flame["total"].as_u64().unwrap(), stacks.values().sum::<u64>());
    let web =
        collapsed(&run_ok(loupe().args(["export", "--format", "collapsed", "--source", &url, "--where", "host=web-2", "--db"]).arg(&db0)));
    let local =
        collapsed(&run_ok(loupe().args(["export", "--format", "collapsed", "--epoch", "all", "--db"]).arg(dir.path().join("web-2"))));
    assert_eq!(web, local, "--where host=web-2 selects that host's stacks");

    // A pprof written by `loupe export` and ingested comes back as the same stacks, and its leaf samples as the same total.
    let pb = dir.path().join("web-1.pb.gz");
    let web1 = dir.path().join("web-1");
    run_ok(loupe().args(["export", "--format", "pprof", "--epoch", "all", "--db"]).arg(&web1).arg("-o").arg(&pb));
    run_ok(loupe().args(["ingest", "pprof"]).arg(&pb).args(["--ship", &url, "--label", "host=pp", "--label", "version=pprof"]));
    let local = collapsed(&run_ok(loupe().args(["export", "--format", "collapsed", "--epoch", "all", "--db"]).arg(&web1)));
    let ingested =
        collapsed(&run_ok(loupe().args(["export", "--format", "collapsed", "--source", &url, "--where", "host=pp", "--db"]).arg(&web1)));
    assert_eq!(ingested, local, "pprof round trip");
    assert_eq!(total(&fleet_top(&url, &["--where", "version=pprof", "--by", "procedure"])), local.values().sum::<u64>());
    ingest_over_http(&url, &pb, &local, &web1);

    fleet_diff_marks_the_grown_procedure(&url, [&truth_a, &truth_b]);
    serve_answers_as_the_cli_does(&url, total(&local_top(&dir.path().join("web-2"), "image")));
}

/// `stats --source` with one set per host prints what `stats` over the three local databases prints.
fn stats_source_equals_the_local_stats(url: &str, dir: &Path, hosts: &[&str]) {
    let dbs: Vec<String> = hosts.iter().map(|h| format!("{}:all", dir.join(h).display())).collect();
    let local = json(&run_ok(loupe().args(["stats", "--format", "json", "--limit", "100000"]).args(&dbs)));
    let sets: Vec<String> = hosts.iter().map(|h| format!("host={h}")).collect();
    let fleet = run_ok(
        loupe().args(["stats", "--format", "json", "--limit", "100000", "--source", url]).args(&sets).env("LOUPE_DB", dir.join(hosts[0])),
    );
    assert_eq!(json(&fleet), local);
}

/// `diff --source` of host web-2 against db-1, whose `grow` ran twice the units: `grow` is the first row, significant,
/// at the CPU ratio the workload measured; the procedures that ran the same units are not significant.
fn fleet_diff_marks_the_grown_procedure(url: &str, truth: [&serde_json::Value; 2]) {
    let cpu = |t: &serde_json::Value, p: &str| t["procedures"][p].as_f64().unwrap();
    let mut steady: Vec<f64> = STEADY.iter().map(|p| cpu(truth[1], p) / cpu(truth[0], p)).collect();
    steady.sort_by(f64::total_cmp);
    let expected = cpu(truth[1], "grow") / cpu(truth[0], "grow") / steady[1];
    assert!(expected > 1.4, "the workload itself did not grow `grow` against the others: {expected} ({truth:?})");
    let d = json(&run_ok(loupe().args(fleet_diff_args(url))));
    let first = &d["rows"][0];
    assert_eq!(first["procedure"], "grow", "{d}");
    assert!(first["significant"].as_bool().unwrap() && first["p_value"].as_f64().unwrap() < 1e-6, "{d}");
    let ratio = first["score"].as_f64().unwrap();
    assert!((ratio / expected - 1.0).abs() < 0.3, "grow's sample ratio {ratio}, its measured CPU ratio {expected}: {d}");
    // The steady procedures ran the same units on both hosts, but their samples follow the CPU time those units took,
    // which a loaded machine moves by more than sampling noise: each row's ratio is its own measured CPU ratio, and
    // it is significant only where that moved (a CI run at load ~13 moved one by several percent).
    for p in STEADY {
        let row = d["rows"].as_array().unwrap().iter().find(|r| r["procedure"] == p).unwrap_or_else(|| panic!("no row {p}: {d}"));
        let measured = cpu(truth[1], p) / cpu(truth[0], p) / steady[1];
        let score = row["score"].as_f64().unwrap();
        assert!((score / measured - 1.0).abs() < 0.15, "{p}: sample ratio {score}, its measured CPU ratio {measured}: {d}");
        if (measured - 1.0).abs() < 0.02 {
            assert_eq!(row["significant"], false, "{p} ran the same units in the same CPU time (ratio {measured}) on both hosts: {d}");
        }
    }
}

const STEADY: [&str; 3] = ["steady_a", "steady_b", "steady_c"];

fn fleet_diff_args(url: &str) -> Vec<String> {
    let args =
        ["diff", "--source", url, "--a", "host=web-2", "--b", "host=db-1", "--image", "scaling", "--format", "json", "--limit", "1000"];
    args.map(String::from).to_vec()
}

/// `loupe serve --source` over the fleet: /api/top, /api/flame and /api/diff answer what the CLI's `--source` prints
/// (whose sums the caller checked against the local databases), and host web-2's total is its database's (`web2_total`).
fn serve_answers_as_the_cli_does(url: &str, web2_total: u64) {
    let (_stop, addr) = serve(url, &[]);
    let addr = addr.as_str();
    let (status, body) = http(addr, "POST", "/api/ingest/pprof?label=host=x", b"");
    assert_eq!(status, 403, "ingest is off without --allow-ingest: {body}");
    let top = http_get(addr, "/api/top?db=fleet&by=procedure&limit=100000");
    assert_eq!(top, json(&fleet_top(url, &["--by", "procedure"])));
    let web2 = http_get(addr, "/api/top?db=fleet&by=procedure&limit=100000&where=host%3Dweb-2");
    assert_eq!(web2, json(&fleet_top(url, &["--by", "procedure", "--where", "host=web-2"])));
    assert_eq!(web2["total_samples"].as_u64().unwrap(), web2_total, "{web2}");
    assert_eq!(http_get(addr, "/api/top?db=fleet&by=host&limit=100000"), json(&fleet_top(url, &["--by", "host"])));
    let flame = http_get(addr, "/api/flame?db=fleet");
    assert_eq!(flame, json(&run_ok(loupe().args(["flame", "--format", "json", "--source", url]))));
    let diff = http_get(addr, "/api/diff?a=fleet:host%3Dweb-2&b=fleet:host%3Ddb-1&image=scaling&limit=1000");
    assert_eq!(diff, json(&run_ok(loupe().args(fleet_diff_args(url)))));
    assert_eq!(diff["rows"][0]["procedure"], "grow");
}

/// `loupe serve --source fleet=URL` with `extra` flags on a free loopback port: the server (killed when dropped) and its address.
fn serve(url: &str, extra: &[&str]) -> (Kill, String) {
    let mut child = loupe()
        .args(["serve", "--source", &format!("fleet={url}"), "--listen", "127.0.0.1:0"])
        .args(extra)
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufRead::read_line(&mut std::io::BufReader::new(child.stdout.take().unwrap()), &mut line).unwrap();
    let stop = Kill(child);
    let addr = line.split_whitespace().nth(1).and_then(|u| u.strip_prefix("http://")).unwrap_or_else(|| panic!("{line}"));
    (stop, addr.trim_end_matches('/').to_string())
}

/// A pprof POSTed to `serve --allow-ingest` is stored like `loupe ingest pprof` stores it: the fleet's stacks of its
/// host are `local`'s (the database it was exported from); a corrupt body gets 400 saying why, one past the limit 413.
fn ingest_over_http(url: &str, pb: &Path, local: &BTreeMap<String, u64>, db: &Path) {
    let (_stop, addr) = serve(url, &["--allow-ingest", "--max-ingest-mb", "1"]);
    let body = std::fs::read(pb).unwrap();
    let (status, answer) = http(&addr, "POST", "/api/ingest/pprof?label=host=http-pp&label=version=http", &body);
    assert_eq!(status, 200, "{answer}");
    assert_eq!((answer["host"].as_str(), answer["samples"].as_u64()), (Some("http-pp"), Some(local.values().sum::<u64>())), "{answer}");
    let fleet =
        collapsed(&run_ok(loupe().args(["export", "--format", "collapsed", "--source", url, "--where", "host=http-pp", "--db"]).arg(db)));
    assert_eq!(&fleet, local, "pprof over HTTP");
    assert_eq!(total(&fleet_top(url, &["--where", "version=http"])), local.values().sum::<u64>());
    let (status, answer) = http(&addr, "POST", "/api/ingest/pprof?label=host=bad", b"\x1f\x8b not gzip");
    assert_eq!(status, 400, "{answer}");
    assert!(answer["error"].as_str().unwrap().contains("pprof"), "{answer}");
    // The limit is judged on Content-Length, before any of the body is read: only the head is sent.
    let head = format!("POST /api/ingest/pprof HTTP/1.1\r\nContent-Length: {}\r\n\r\n", (1 << 20) + 1);
    assert_eq!(exchange(&addr, head.as_bytes()).0, 413);
    assert_eq!(total(&fleet_top(url, &["--where", "host=bad"])), 0);
}

/// One request with `body` (and its Content-Length): the status and the JSON answer.
fn http(addr: &str, method: &str, target: &str, body: &[u8]) -> (u16, serde_json::Value) {
    let mut req = format!("{method} {target} HTTP/1.1\r\nHost: x\r\nContent-Length: {}\r\n\r\n", body.len()).into_bytes();
    req.extend_from_slice(body);
    exchange(addr, &req)
}

/// Sends `request` as it is; the status and the JSON answer.
fn exchange(addr: &str, request: &[u8]) -> (u16, serde_json::Value) {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    s.write_all(request).unwrap();
    let mut resp = Vec::new();
    s.read_to_end(&mut resp).unwrap();
    let text = String::from_utf8_lossy(&resp);
    let (head, answer) = text.split_once("\r\n\r\n").unwrap_or_else(|| panic!("no response head in {text}"));
    let status = head.split_whitespace().nth(1).and_then(|s| s.parse().ok()).unwrap_or_else(|| panic!("{head}"));
    (status, serde_json::from_str(answer).unwrap_or_else(|e| panic!("not JSON ({e}): {answer}")))
}

/// Kills the server when the test ends, passing or not.
struct Kill(std::process::Child);

impl Drop for Kill {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// GET `target` of the server at `addr`; its JSON body (the status must be 200).
fn http_get(addr: &str, target: &str) -> serde_json::Value {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    s.write_all(format!("GET {target} HTTP/1.1\r\nHost: x\r\n\r\n").as_bytes()).unwrap();
    let mut resp = Vec::new();
    s.read_to_end(&mut resp).unwrap();
    let text = String::from_utf8_lossy(&resp);
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or_else(|| panic!("{target}: no response head in {text}"));
    assert!(head.starts_with("HTTP/1.1 200"), "{target}: {head}\n{body}");
    serde_json::from_str(body).unwrap_or_else(|e| panic!("{target}: not JSON ({e}): {body}"))
}

/// `stack count` lines of `export --format collapsed` as a map.
fn collapsed(out: &Output) -> BTreeMap<String, u64> {
    let mut m = BTreeMap::new();
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let (stack, n) = line.rsplit_once(' ').unwrap_or_else(|| panic!("bad collapsed line {line:?}"));
        *m.entry(stack.to_string()).or_default() += n.parse::<u64>().unwrap();
    }
    m
}

#[test]
fn server_stopped_mid_run_loses_nothing_and_a_full_spool_counts_its_drops() {
    // Checks exact totals after ClickHouse is away ~10 s mid-run, and that a full spool's reported drops equal what is missing.
    if !require_root() {
        return;
    }
    let Some(ch) = ClickHouse::start() else { return };
    ch.init_cluster("prof");
    let dir = tempfile::tempdir().unwrap();
    let url = ch.url(0, "prof");
    // Away for 10 s of a 20 s run: batches wait in the spool and go when it returns (a loaded machine may take
    // several seconds to bring ClickHouse back; the run's last 8 s leave it that time).
    let db = dir.path().join("away");
    let run = std::thread::scope(|s| {
        let rec = s.spawn(|| record(&db, &url, "away", "20", &[]));
        std::thread::sleep(std::time::Duration::from_secs(2));
        ch.kill(0);
        std::thread::sleep(std::time::Duration::from_secs(10));
        ch.revive(0);
        rec.join().unwrap()
    });
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(!stderr.contains("wait in"), "everything must have been sent: {stderr}");
    assert_eq!(total(&fleet_top(&url, &["--where", "host=away"])), total(&local_top(&db, "image")));

    // Away for a whole run with room for two batches: the oldest are dropped and counted.
    ch.kill(0);
    let db = dir.path().join("full");
    let out = record(&db, &url, "full", "4", &["--spool-max", "6K"]);
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    ch.revive(0);
    let dropped: u64 = field(&stderr, "batches (", " samples) from the full spool").unwrap_or_else(|| panic!("no drop count: {stderr}"));
    assert!(dropped > 0, "{stderr}");
    // The next run on this database sends what the spool kept.
    run_ok(loupe().args(["record", "--db"]).arg(&db).args(["--ship", &url, "--label", "host=full", "--", "true"]));
    assert_eq!(total(&fleet_top(&url, &["--where", "host=full"])) + dropped, total(&local_top(&db, "image")));
}

#[test]
fn kill_9_of_a_shipping_recorder_loses_at_most_one_flush_and_never_double_counts() {
    // Checks that after SIGKILL mid-run (server away, batches spooled) and a restart on the same spool, the fleet has no sample the local database lacks and misses at most about one flush interval of them, flat and stacks.
    if !require_root() {
        return;
    }
    let Some(ch) = ClickHouse::start() else { return };
    ch.init_cluster("prof");
    let dir = tempfile::tempdir().unwrap();
    let (db, url) = (dir.path().join("k9"), ch.url(0, "prof"));
    let mut c = loupe();
    c.args(["record", "--flush-every", "1", "--db"]).arg(&db).args(["--ship", &url, "--label", "host=k9", "--"]);
    let mut child = c.arg(workloads().join("selftime")).args(["--seconds", "8"]).stderr(std::process::Stdio::null()).spawn().unwrap();
    std::thread::sleep(std::time::Duration::from_secs(2));
    // The server goes away: the next batches wait in the spool when the recorder dies.
    ch.kill(0);
    std::thread::sleep(std::time::Duration::from_secs(3));
    child.kill().unwrap();
    child.wait().unwrap();
    ch.revive(0);
    let spool = db.join("fleet-spool");
    let spooled =
        std::fs::read_dir(&spool).unwrap().filter(|e| e.as_ref().unwrap().path().extension().is_some_and(|x| x == "batch")).count();
    assert!(spooled > 0, "batches must have waited in the spool");
    // The next run on this database sends them.
    run_ok(loupe().args(["record", "--db"]).arg(&db).args(["--ship", &url, "--label", "host=k9", "--", "true"]));
    let local = total(&run_ok(loupe().args(["top", "--format", "json", "--epoch", "all", "--by", "image", "--db"]).arg(&db)));
    let fleet = total(&fleet_top(&url, &["--where", "host=k9"]));
    // One flush interval: the biggest batch this host shipped.
    let sql = "SELECT max(n) FROM (SELECT batch_id, sum(count) AS n FROM prof.samples WHERE host = 'k9' GROUP BY batch_id)";
    let out = run_ok(Command::new("curl").args(["-sS", "--fail", &format!("http://{}/", ch.urls[1]), "--data-binary", sql]));
    let biggest: u64 = String::from_utf8_lossy(&out.stdout).trim().parse().unwrap();
    eprintln!("local {local}, fleet {fleet}, spooled batches {spooled}, biggest batch {biggest}");
    assert!(fleet <= local, "never counted twice: fleet {fleet} > local {local}");
    assert!(local - fleet <= 2 * biggest, "lost {} samples, more than a flush interval ({biggest})", local - fleet);
    let sum = |m: BTreeMap<String, u64>| m.values().sum::<u64>();
    let local_stacks = sum(collapsed(&run_ok(loupe().args(["export", "--format", "collapsed", "--epoch", "all", "--db"]).arg(&db))));
    let fleet_stacks = sum(collapsed(&run_ok(loupe().args(["export", "--format", "collapsed", "--where", "host=k9", "--source", &url]))));
    assert!(
        fleet_stacks <= local_stacks && local_stacks - fleet_stacks <= 2 * biggest,
        "stacks: fleet {fleet_stacks}, local {local_stacks}"
    );
}

/// The number between `before` and `after` in `text`.
fn field(text: &str, before: &str, after: &str) -> Option<u64> {
    let end = text.find(after)?;
    let start = text[..end].rfind(before)? + before.len();
    text[start..end].trim().parse().ok()
}

#[test]
fn bad_urls_credentials_servers_and_schemas_fail_clearly_before_recording() {
    // Checks one clear error each for a malformed URL, wrong credentials, a non-ClickHouse server and a newer schema, with no local database made.
    let Some(ch) = ClickHouse::start() else { return };
    run_ok(loupe().args(["fleet", "init", &ch.url(0, "prof")]));
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        // Like an SSH server: a banner, then the connection stays open.
        let mut open = Vec::new();
        for s in listener.incoming().flatten() {
            use std::io::Write;
            let _ = (&s).write_all(b"SSH-2.0-OpenSSH_9.2\r\n");
            open.push(s);
        }
    });
    let newer = ch.url(1, "newer");
    run_ok(loupe().args(["fleet", "init", &newer]));
    let sql = "INSERT INTO newer.schema_version VALUES (99, '', 0, now())";
    run_ok(Command::new("curl").args(["-sS", "--fail", &format!("http://{}/", ch.urls[1]), "--data-binary", sql]));
    let wrong_pw = ch.url(0, "prof").replace("clickhouse://", "clickhouse://loupe:wrong@");
    let cases = [
        ("clickhouse://127.0.0.1/prof".to_string(), "no :port after the host"),
        (wrong_pw, "refused the credentials"),
        (format!("clickhouse://127.0.0.1:{port}/prof"), "does not speak HTTP"),
        (newer.clone(), "newer than the version 3"),
    ];
    let dir = tempfile::tempdir().unwrap();
    for (url, why) in cases {
        let db = dir.path().join("db");
        let out = loupe().args(["record", "--db"]).arg(&db).args(["--ship", &url, "--", "true"]).output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{url}: {stderr}");
        assert!(stderr.contains(why), "{url}: expected {why:?} in {stderr}");
        assert_eq!(stderr.lines().filter(|l| l.starts_with("loupe: ")).count(), 1, "one error line: {stderr}");
        assert!(!db.exists(), "{url}: the local database must not be touched");
    }
    let out = loupe().args(["fleet", "init", &newer]).output().unwrap();
    assert!(String::from_utf8_lossy(&out.stderr).contains("newer than the version 3"));
}
