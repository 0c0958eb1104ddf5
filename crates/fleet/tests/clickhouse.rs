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
        assert!(e.to_string().contains("version 7, newer than the version 2"), "{e}");
    }
    // A version 1 database (flat samples only) is refused for use and migrated by init.
    let old = FleetUrl::parse(&format!("clickhouse://{}/old", s.urls[0])).unwrap();
    Client::new(&FleetUrl { database: "default".into(), ..old.clone() }).execute("CREATE DATABASE old").unwrap();
    let c = Client::new(&old);
    c.execute("CREATE TABLE schema_version (version UInt32, cluster String, retention_days UInt32, applied DateTime) ENGINE = TinyLog")
        .unwrap();
    c.execute("INSERT INTO schema_version VALUES (1, '', 0, now())").unwrap();
    let e = schema::check(&c).unwrap_err();
    assert!(e.to_string().contains("version 1, older than the version 2"), "{e}");
    assert_eq!(schema::init(&c, &InitOptions::default()).unwrap().version, 2);
    assert_eq!(schema::check(&c).unwrap().version, 2);
    assert!(query::stacks(&c, &Selection::default()).unwrap().is_empty());
}
