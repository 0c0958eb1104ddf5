//! The fleet store against a real ClickHouse (scripts/clickhouse.sh):
//! deduplication of a batch delivered twice, and the schema's versions.

use loupe_fleet::client::Client;
use loupe_fleet::query::{self, Selection};
use loupe_fleet::rows::{Batch, Row};
use loupe_fleet::schema::{self, InitOptions};
use loupe_fleet::url::FleetUrl;
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
        assert!(e.to_string().contains("version 7, newer than the version 1"), "{e}");
    }
}
