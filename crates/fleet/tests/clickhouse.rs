//! The fleet store against a real ClickHouse (scripts/clickhouse.sh):
//! deduplication of a batch delivered twice, and the schema's versions.

use loupe_fleet::client::Client;
use loupe_fleet::query::{self, Selection};
use loupe_fleet::rows::{stack_rows_of, RowContext};
use loupe_fleet::rows::{Batch, Row};
use loupe_fleet::schema::{self, InitOptions};
use loupe_fleet::url::FleetUrl;
use loupe_model::stacks::{truncated_image, StackProfile};
use loupe_model::{BuildId, EventName, ImageId, ImageOffset, ProcessKey};
use std::collections::HashSet;
use std::path::Path;
use std::process::Command;

struct Servers {
    dir: tempfile::TempDir,
    urls: Vec<String>,
}

impl Servers {
    fn start() -> Option<Servers> {
        if !Path::new("/usr/sbin/clickhouse-server").exists() {
            eprintln!("SKIP: clickhouse-server is not installed (scripts/setup.sh installs it)");
            return None;
        }
        let dir = tempfile::tempdir().unwrap();
        let out = Command::new(script()).arg("start").arg(dir.path()).output().unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let urls = String::from_utf8(out.stdout).unwrap().lines().map(|l| l.replace("http://", "")).collect();
        Some(Servers { dir, urls })
    }
}

impl Drop for Servers {
    fn drop(&mut self) {
        let _ = Command::new(script()).arg("stop").arg(self.dir.path()).status();
    }
}

fn script() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/clickhouse.sh")
}

fn row(host: &str, offset: u64, count: u64) -> Row {
    Row {
        bucket: 1_700_000_040,
        host: host.into(),
        label_keys: vec!["version".into()],
        label_values: vec!["1.2".into()],
        pid: 7,
        comm: "w".into(),
        kind: "elf".into(),
        image: "/usr/bin/w".into(),
        build_id: "abcd".into(),
        content_hash: 0,
        event: "cpu-clock".into(),
        offset,
        count,
    }
}

#[test]
fn a_batch_delivered_twice_counts_once_across_two_shards() {
    // Checks that re-sending a batch (a retry after a timeout that had landed) leaves every sum unchanged, on a Distributed table.
    let Some(s) = Servers::start() else { return };
    let urls: Vec<FleetUrl> = s.urls.iter().map(|u| FleetUrl::parse(&format!("clickhouse://{u}/prof")).unwrap()).collect();
    for u in &urls {
        schema::init(&Client::new(u), &InitOptions { cluster: Some("loupe".into()), retention_days: 30 }).unwrap();
    }
    let c = Client::new(&urls[0]);
    let a = Batch::new(vec![row("a", 16, 5), row("a", 32, 7), row("a", 16, 5)]);
    let b = Batch::new(vec![row("b", 16, 11)]);
    for batch in [&a, &b, &a, &b, &a] {
        loupe_fleet::ship::send(&c, batch).unwrap();
    }
    let raw: u64 = c.select("SELECT sum(count) FROM samples").unwrap()[0][0].parse().unwrap();
    assert_eq!(raw, 3 * 17 + 2 * 11, "the duplicates are stored");
    let other = Client::new(&urls[1]);
    let rows = query::images(&other, &Selection::default(), true).unwrap();
    let at = |off| rows.iter().filter(|r| r.offset == Some(off)).map(|r| r.samples).sum::<u64>();
    assert_eq!((at(16), at(32)), (5 + 5 + 11, 7));
    let hosts = query::by_key(&other, &Selection::default(), "host").unwrap();
    assert_eq!(hosts, [("a".to_string(), "cpu-clock".to_string(), 17), ("b".to_string(), "cpu-clock".to_string(), 11)]);
}

/// A flush of stacks from `host`: `main -> f` 3 times, `main -> g` 4 times in pid 7, and one truncated stack once, all times `k`.
fn stack_batch(host: &str, k: u64, known: &mut HashSet<u64>) -> Batch {
    let app = ImageId::elf("/usr/bin/w", BuildId::from_hex("abcd"));
    let mut t = StackProfile::new(EventName::new("cpu-clock"));
    let p = ProcessKey::new(7, "w");
    t.add(&p, &[(app.clone(), ImageOffset(0x10)), (app.clone(), ImageOffset(0x80))], 3 * k);
    t.add(&p, &[(app.clone(), ImageOffset(0x20)), (app.clone(), ImageOffset(0x80))], 4 * k);
    t.add(&p, &[(app.clone(), ImageOffset(0x20)), (truncated_image(), ImageOffset(0))], k);
    t.period_sum = 1000 * 8 * k;
    let ctx = RowContext { host: host.into(), labels: vec![("version".into(), "1.2".into())] };
    let (stack_rows, stacks) = stack_rows_of(&[t], 1_700_000_040, &ctx, &mut |_| Vec::new(), known);
    Batch { stacks, stack_rows, ..Batch::new(Vec::new()) }
}

#[test]
fn stacks_sent_twice_and_by_two_hosts_sum_once_across_two_shards() {
    // Checks that stack counts re-sent under one batch id count once, that one stack sent by two hosts is read once, and that frames, processes, periods and the truncation marker come back.
    let Some(s) = Servers::start() else { return };
    let urls: Vec<FleetUrl> = s.urls.iter().map(|u| FleetUrl::parse(&format!("clickhouse://{u}/st")).unwrap()).collect();
    for u in &urls {
        schema::init(&Client::new(u), &InitOptions { cluster: Some("loupe".into()), retention_days: 0 }).unwrap();
    }
    let c = Client::new(&urls[0]);
    let (a, b) = (stack_batch("a", 1, &mut HashSet::new()), stack_batch("b", 10, &mut HashSet::new()));
    assert_eq!((a.stacks.len(), b.stacks.len()), (3, 3), "each host sends the definitions it has not sent");
    let mut known = a.stacks.iter().map(|d| d.stack).collect();
    assert!(stack_batch("a", 1, &mut known).stacks.is_empty(), "a definition goes once per shipper");
    for batch in [&a, &b, &a, &b] {
        loupe_fleet::ship::send(&c, batch).unwrap();
    }
    let tables = query::stacks(&Client::new(&urls[1]), &Selection::default()).unwrap();
    assert_eq!(tables.len(), 1);
    let t = &tables[0];
    assert_eq!((t.total_samples(), t.period_sum, t.stacks.len()), (8 * 11, 1000 * 8 * 11, 3));
    let main_f = (0..t.stacks.len() as u32).find(|&i| t.stack(i).next().unwrap().1 == ImageOffset(0x10)).unwrap();
    assert_eq!(t.stack(main_f).map(|(i, o)| (i.path.as_str(), o.0)).collect::<Vec<_>>(), [("/usr/bin/w", 0x10), ("/usr/bin/w", 0x80)]);
    assert_eq!(t.counts.values().sum::<u64>(), 88);
    assert_eq!((0..3).filter(|&i| t.is_truncated(i)).count(), 1);
    let only_b = Selection { wheres: vec![query::Cond::parse("host=b").unwrap()], ..Selection::default() };
    assert_eq!(query::stacks(&c, &only_b).unwrap()[0].total_samples(), 80);
    assert_eq!(query::stack_time_range(&c, &only_b).unwrap(), Some((1_700_000_040, 1_700_000_040)));
}

#[test]
fn init_is_idempotent_and_a_newer_schema_is_refused() {
    // Checks that init twice keeps one version row, and that a newer version stops both init and check with its number.
    let Some(s) = Servers::start() else { return };
    let url = FleetUrl::parse(&format!("clickhouse://{}/one", s.urls[0])).unwrap();
    let c = Client::new(&url);
    let info = schema::init(&c, &InitOptions::default()).unwrap();
    assert_eq!(schema::init(&c, &InitOptions::default()).unwrap(), info);
    assert_eq!(schema::check(&c).unwrap(), info);
    assert_eq!(c.select("SELECT count() FROM schema_version").unwrap()[0][0], "1");
    c.execute("INSERT INTO schema_version VALUES (7, '', 0, now())").unwrap();
    for e in [schema::check(&c).unwrap_err(), schema::init(&c, &InitOptions::default()).unwrap_err()] {
        assert_eq!(e.kind(), loupe_fleet::ErrorKind::Schema);
        assert!(e.to_string().contains("version 7, newer than the version 3"), "{e}");
    }
    // A version 1 database (flat samples only) is refused for use and migrated by init.
    let old = FleetUrl::parse(&format!("clickhouse://{}/old", s.urls[0])).unwrap();
    Client::new(&FleetUrl { database: "default".into(), ..old.clone() }).execute("CREATE DATABASE old").unwrap();
    let c = Client::new(&old);
    c.execute("CREATE TABLE schema_version (version UInt32, cluster String, retention_days UInt32, applied DateTime) ENGINE = TinyLog")
        .unwrap();
    c.execute("INSERT INTO schema_version VALUES (1, '', 0, now())").unwrap();
    let e = schema::check(&c).unwrap_err();
    assert!(e.to_string().contains("version 1, older than the version 3"), "{e}");
    assert_eq!(schema::init(&c, &InitOptions::default()).unwrap().version, 3);
    assert_eq!(schema::check(&c).unwrap().version, 3);
    assert!(query::stacks(&c, &Selection::default()).unwrap().is_empty());
}

/// Hour H (UTC-aligned) and three batches: a at H+1 min, b at H+1 h+2 min, c at H+2 h+30 min.
const H: u64 = 1_700_002_800;

fn at(mut b: Batch, bucket: u64) -> Batch {
    b.rows.iter_mut().for_each(|r| r.bucket = bucket);
    b.stack_rows.iter_mut().for_each(|r| r.bucket = bucket);
    b
}

/// Batches sent (a and b twice) and the distinct ones, as (bucket, flat samples, stack samples).
fn hourly_batches(c: &Client) -> Vec<(u64, u64, u64)> {
    let mut known = HashSet::new();
    let mut with_stacks = |host: &str, rows: Vec<Row>, k: u64| Batch { rows, ..stack_batch(host, k, &mut known) };
    let a = at(with_stacks("a", vec![row("a", 16, 5), row("a", 32, 7)], 1), H + 60);
    let b = at(with_stacks("b", vec![row("b", 16, 11)], 10), H + 3600 + 120);
    let cc = at(with_stacks("a", vec![row("a", 16, 2)], 100), H + 7200 + 1800);
    for batch in [&a, &b, &a, &cc, &b] {
        loupe_fleet::ship::send(c, batch).unwrap();
    }
    [&a, &b, &cc].iter().map(|b| (b.rows[0].bucket, b.samples(), b.stack_rows.iter().map(|r| r.count).sum())).collect()
}

/// Flat and stack totals of a selection, as the queries give them.
fn totals(c: &Client, since: Option<u64>, until: Option<u64>) -> (u64, u64) {
    let sel = Selection { since, until, ..Selection::default() };
    let flat = query::by_key(c, &sel, "host").unwrap().iter().map(|r| r.2).sum();
    (flat, query::stacks(c, &sel).unwrap().iter().map(|t| t.total_samples()).sum())
}

#[test]
fn rollups_are_exact_for_batches_sent_twice_and_ranges_off_the_hour() {
    // Checks that queries over whole hours (rollups), parts of hours (fine table at the edges) and everything equal the sums of the distinct batches, with two batches stored twice, across two shards.
    let Some(s) = Servers::start() else { return };
    let urls: Vec<FleetUrl> = s.urls.iter().map(|u| FleetUrl::parse(&format!("clickhouse://{u}/ru")).unwrap()).collect();
    for u in &urls {
        schema::init(&Client::new(u), &InitOptions { cluster: Some("loupe".into()), retention_days: 0 }).unwrap();
    }
    let c = Client::new(&urls[0]);
    let sent = hourly_batches(&c);
    let raw: u64 = c.select("SELECT sum(count) FROM samples_hourly").unwrap()[0][0].parse().unwrap();
    assert_eq!(raw, 2 * 12 + 2 * 11 + 2, "the rollup holds what was inserted, duplicates too");
    let expect = |since: u64, until: u64| {
        let inside = sent.iter().filter(|b| b.0 >= since && b.0 < until);
        inside.fold((0, 0), |acc, b| (acc.0 + b.1, acc.1 + b.2))
    };
    for (since, until) in
        [(H, H + 7200), (H + 61, H + 9001), (H - 5, H + 3600 + 121), (H + 3600 + 60, H + 3600 + 180), (H + 7200, H + 10800)]
    {
        assert_eq!(totals(&c, Some(since), Some(until)), expect(since, until), "[{since}, {until})");
    }
    assert_eq!(totals(&c, None, None), expect(0, u64::MAX));
    assert_eq!(totals(&c, Some(H + 120), None), expect(H + 120, u64::MAX));
    let b_only = Selection { since: Some(H + 3600), until: Some(H + 7200), ..Selection::default() };
    assert_eq!(query::stack_time_range(&c, &b_only).unwrap(), Some((H + 3720, H + 3720)));
    assert_eq!(query::stack_time_range(&c, &Selection::default()).unwrap(), Some((H + 60, H + 9000)));
    // A row only in the rollup shows that whole hours are read there, and edges are not.
    c.execute(&format!(
        "INSERT INTO samples_hourly_local (hour, host, event, count) VALUES (toDateTime({}), 'marker', 'cpu-clock', 1000)",
        H + 3600
    ))
    .unwrap();
    assert_eq!(totals(&c, Some(H + 3600), Some(H + 7200)).0, expect(H + 3600, H + 7200).0 + 1000);
    assert_eq!(totals(&c, Some(H + 3601), Some(H + 7200)).0, expect(H + 3601, H + 7200).0);
}

#[test]
fn a_migration_to_rollups_sums_the_rows_already_stored() {
    // Checks that `init` on a schema 2 database fills the rollups from its rows, batches stored twice included, and queries stay exact.
    let Some(s) = Servers::start() else { return };
    let url = FleetUrl::parse(&format!("clickhouse://{}/mig", s.urls[0])).unwrap();
    let c = Client::new(&url);
    schema::init(&c, &InitOptions::default()).unwrap();
    // Back to schema 2: no rollups, no views, version row 2.
    for t in [
        "samples_hourly_mv",
        "stack_counts_hourly_mv",
        "samples_batches_mv",
        "stack_counts_batches_mv",
        "samples_hourly",
        "stack_counts_hourly",
        "batches",
        "schema_version",
    ] {
        c.execute(&format!("DROP TABLE {t}")).unwrap();
    }
    c.execute("CREATE TABLE schema_version (version UInt32, cluster String, retention_days UInt32, applied DateTime) ENGINE = TinyLog")
        .unwrap();
    c.execute("INSERT INTO schema_version VALUES (2, '', 0, now())").unwrap();
    let sent = hourly_batches(&c);
    assert_eq!(schema::init(&c, &InitOptions::default()).unwrap().version, 3);
    let all = sent.iter().fold((0, 0), |acc, b| (acc.0 + b.1, acc.1 + b.2));
    assert_eq!(totals(&c, None, None), all);
    assert_eq!(totals(&c, Some(H), Some(H + 3600)), (sent[0].1, sent[0].2));
    schema::init(&c, &InitOptions::default()).unwrap();
    assert_eq!(totals(&c, None, None), all, "a second init fills nothing again");
}
