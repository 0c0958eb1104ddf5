//! The versioned schema: `samples` (what queries read: the MergeTree
//! itself on one server, or a Distributed table over `samples_local` on
//! every shard of a cluster) and `schema_version`, which names the version,
//! cluster and retention. The SQL is what ClickHouse 18.16 (Debian
//! bookworm) and current releases both accept; TTL and LowCardinality are
//! used only where the server has them (19.6 and later; 19.x and later).

use crate::client::{quote, Client};
use crate::error::{Error, ErrorKind, Result};
use crate::rollup::{self, Table};

/// The schema this Loupe writes and reads.
/// 2: call stacks (`stacks`, `stack_counts`) and per-build procedure
/// tables (`procedures`, `symbol_builds`).
/// 3: hourly rollups (`samples_hourly`, `stack_counts_hourly`) and
/// `batches`, filled by materialized views ([`crate::rollup`]).
pub const SCHEMA_VERSION: u32 = 3;

/// What `schema_version` says about a database.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SchemaInfo {
    pub version: u32,
    /// The `remote_servers` cluster `samples` is distributed over; empty for one server.
    pub cluster: String,
    /// Days rows are kept (0: for ever).
    pub retention_days: u32,
}

/// How `loupe fleet init` lays the schema out.
#[derive(Clone, Debug, Default)]
pub struct InitOptions {
    pub cluster: Option<String>,
    pub retention_days: u32,
}

/// `30d`, `2w`, `0` (keep for ever) as days.
pub fn parse_retention(s: &str) -> Result<u32> {
    let bad =
        || Error::new(ErrorKind::Usage, format!("bad retention {s:?}: expected days or weeks such as 30d or 2w, or 0 to keep everything"));
    let (num, unit) = s.split_at(s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len()));
    let n: u32 = num.parse().map_err(|_| bad())?;
    match unit {
        "d" | "" => Ok(n),
        "w" => n.checked_mul(7).ok_or_else(bad),
        _ => Err(bad()),
    }
}

/// The server's (major, minor) version.
pub fn server_version(c: &Client) -> Result<(u32, u32)> {
    let rows = c.select("SELECT version()")?;
    let v = rows.first().and_then(|r| r.first()).cloned().unwrap_or_default();
    let mut parts = v.split('.').map(|p| p.parse::<u32>());
    match (parts.next(), parts.next()) {
        (Some(Ok(a)), Some(Ok(b))) => Ok((a, b)),
        _ => Err(Error::new(ErrorKind::Protocol, format!("{}: cannot read the server version from {v:?}", c.url().display()))),
    }
}

/// The schema in the URL's database, or why there is none Loupe can use.
pub fn check(c: &Client) -> Result<SchemaInfo> {
    let info = read(c)?.ok_or_else(|| {
        Error::new(
            ErrorKind::Schema,
            format!("{}: no Loupe schema there; run `loupe fleet init {}` first", c.url().display(), c.url().display()),
        )
    })?;
    if info.version > SCHEMA_VERSION {
        return Err(newer(c, info.version));
    }
    if info.version < SCHEMA_VERSION {
        return Err(Error::new(
            ErrorKind::Schema,
            format!(
                "{}: the fleet schema is version {}, older than the version {SCHEMA_VERSION} this Loupe writes; run `loupe fleet init` on every server of it to migrate",
                c.url().display(),
                info.version
            ),
        ));
    }
    Ok(info)
}

fn newer(c: &Client, version: u32) -> Error {
    Error::new(
        ErrorKind::Schema,
        format!(
            "{}: the fleet schema is version {version}, newer than the version {SCHEMA_VERSION} this Loupe knows; upgrade Loupe to use it",
            c.url().display()
        ),
    )
}

/// The newest `schema_version` row, or `None` when the table is missing.
fn read(c: &Client) -> Result<Option<SchemaInfo>> {
    let rows = match c.select("SELECT version, cluster, retention_days FROM schema_version ORDER BY version DESC LIMIT 1") {
        Ok(r) => r,
        // 60: no such table; 81: no such database.
        Err(e) if e.kind() == ErrorKind::Schema || e.to_string().contains("Code: 60") => return Ok(None),
        Err(e) => return Err(e),
    };
    let Some(r) = rows.first() else { return Ok(None) };
    let num = |i: usize| r.get(i).and_then(|s| s.parse::<u32>().ok());
    match (num(0), r.get(1), num(2)) {
        (Some(version), Some(cluster), Some(retention_days)) => Ok(Some(SchemaInfo { version, cluster: cluster.clone(), retention_days })),
        _ => Err(Error::new(ErrorKind::Protocol, format!("{}: unreadable schema_version row {r:?}", c.url().display()))),
    }
}

/// Creates (or migrates to) the current schema on one server; run it on
/// every shard of a cluster. Idempotent; refuses a newer schema.
pub fn init(c: &Client, opts: &InitOptions) -> Result<SchemaInfo> {
    let old = read(c)?;
    if let Some(old) = &old {
        if old.version > SCHEMA_VERSION {
            return Err(newer(c, old.version));
        }
    }
    let db = &c.url().database;
    // The database may not exist yet: create it from `default`.
    let server = Client::new(&crate::url::FleetUrl { database: "default".into(), ..c.url().clone() });
    server.execute(&format!("CREATE DATABASE IF NOT EXISTS {db}"))?;
    let version = server_version(c)?;
    c.execute(
        "CREATE TABLE IF NOT EXISTS schema_version (version UInt32, cluster String, retention_days UInt32, applied DateTime) ENGINE = TinyLog",
    )?;
    let local = if opts.cluster.is_some() { "samples_local" } else { "samples" };
    c.execute(&samples_ddl(local, version, opts.retention_days))?;
    let symbols = if opts.cluster.is_some() { "symbols_local" } else { "symbols" };
    c.execute(&format!(
        "CREATE TABLE IF NOT EXISTS {symbols} (image_key String, offset UInt64, procedure String, file String, line UInt32) \
ENGINE = ReplacingMergeTree() ORDER BY (image_key, offset)"
    ))?;
    let suffix = if opts.cluster.is_some() { "_local" } else { "" };
    c.execute(&stacks_ddl(&format!("stacks{suffix}")))?;
    c.execute(&stack_counts_ddl(&format!("stack_counts{suffix}"), version, opts.retention_days))?;
    c.execute(&format!(
        "CREATE TABLE IF NOT EXISTS procedures{suffix} (image_key String, start UInt64, size UInt64, name String) \
ENGINE = ReplacingMergeTree() ORDER BY (image_key, start)"
    ))?;
    c.execute(&format!(
        "CREATE TABLE IF NOT EXISTS symbol_builds{suffix} (image_key String, image String, procedures UInt64) \
ENGINE = ReplacingMergeTree() ORDER BY image_key"
    ))?;
    if let Some(cluster) = &opts.cluster {
        c.execute(&format!(
            "CREATE TABLE IF NOT EXISTS samples AS samples_local ENGINE = Distributed({}, {db}, samples_local, cityHash64(host))",
            quote(cluster)
        ))?;
        c.execute(&format!(
            "CREATE TABLE IF NOT EXISTS stack_counts AS stack_counts_local ENGINE = Distributed({}, {db}, stack_counts_local, cityHash64(host))",
            quote(cluster)
        ))?;
        c.execute(&format!(
            "CREATE TABLE IF NOT EXISTS stacks AS stacks_local ENGINE = Distributed({}, {db}, stacks_local, intHash64(stack))",
            quote(cluster)
        ))?;
        for t in ["procedures", "symbol_builds"] {
            c.execute(&format!(
                "CREATE TABLE IF NOT EXISTS {t} AS {t}_local ENGINE = Distributed({}, {db}, {t}_local, cityHash64(image_key))",
                quote(cluster)
            ))?;
        }
        c.execute(&format!(
            "CREATE TABLE IF NOT EXISTS symbols AS symbols_local ENGINE = Distributed({}, {db}, symbols_local, cityHash64(image_key))",
            quote(cluster)
        ))?;
    }
    rollups(c, opts, version, old.as_ref().is_some_and(|o| o.version < 3))?;
    let info =
        SchemaInfo { version: SCHEMA_VERSION, cluster: opts.cluster.clone().unwrap_or_default(), retention_days: opts.retention_days };
    if read(c)?.as_ref() != Some(&info) {
        c.execute(&format!(
            "INSERT INTO schema_version VALUES ({SCHEMA_VERSION}, {}, {}, now())",
            quote(&info.cluster),
            info.retention_days
        ))?;
    }
    Ok(info)
}

/// The hourly rollups, `batches` and the views that fill them (schema 3).
/// A migration from an older schema first sums the rows already stored
/// into them, once (shippers should be stopped meanwhile: their batches
/// wait in their spools).
fn rollups(c: &Client, opts: &InitOptions, version: (u32, u32), migrating: bool) -> Result<()> {
    let suffix = if opts.cluster.is_some() { "_local" } else { "" };
    let label = label_type(version);
    for t in [Table::Samples, Table::StackCounts] {
        c.execute(&rollup::hourly_ddl(t, suffix, label, &ttl("hour", version, opts.retention_days)))?;
    }
    c.execute(&rollup::batches_ddl(suffix, label, &ttl("bucket", version, opts.retention_days)))?;
    let empty = c.select(&format!("SELECT count() FROM batches{suffix}"))?.first().and_then(|r| r.first()).is_some_and(|n| n == "0");
    if migrating && empty {
        // Summing a big table takes a while: longer than a query's usual timeout.
        rollup::backfill(&Client::with_timeout(c.url(), std::time::Duration::from_secs(3600)), suffix)?;
    }
    for sql in rollup::views_ddl(suffix) {
        c.execute(&sql)?;
    }
    if let Some(cluster) = &opts.cluster {
        let db = &c.url().database;
        for (t, key) in
            [("samples_hourly", "cityHash64(host)"), ("stack_counts_hourly", "cityHash64(host)"), ("batches", "cityHash64(host)")]
        {
            c.execute(&format!(
                "CREATE TABLE IF NOT EXISTS {t} AS {t}_local ENGINE = Distributed({}, {db}, {t}_local, {key})",
                quote(cluster)
            ))?;
        }
    }
    Ok(())
}

/// LowCardinality where the server has it without an experimental setting (19.x).
fn label_type((major, _): (u32, u32)) -> &'static str {
    if major >= 19 {
        "LowCardinality(String)"
    } else {
        "String"
    }
}

/// The TTL clause on `column` where the server has TTL (19.6), else nothing.
fn ttl(column: &str, version: (u32, u32), retention_days: u32) -> String {
    if retention_days > 0 && version >= (19, 6) {
        format!(" TTL {column} + INTERVAL {retention_days} DAY")
    } else {
        String::new()
    }
}

/// The local sample table. Ordered by what queries filter on (time, host,
/// event, image); one partition a day, so retention drops whole parts.
fn samples_ddl(table: &str, version: (u32, u32), retention_days: u32) -> String {
    let label = label_type(version);
    let ttl = ttl("bucket", version, retention_days);
    format!(
        "CREATE TABLE IF NOT EXISTS {table} (\
bucket DateTime, host {label}, label_keys Array({label}), label_values Array(String), \
pid UInt32, comm String, kind {label}, image String, build_id String, content_hash UInt64, \
event {label}, offset UInt64, count UInt64, batch_id String, row UInt32) \
ENGINE = MergeTree() PARTITION BY toYYYYMMDD(bucket) ORDER BY (bucket, host, event, image, offset){ttl}"
    )
}

/// Distinct call stacks, one row per hash (a hash sent twice, by two hosts
/// or a retried batch, is merged in the background and read with `any`).
/// Frames leaf first as parallel arrays; kept for ever (a stack costs one row).
fn stacks_ddl(table: &str) -> String {
    format!(
        "CREATE TABLE IF NOT EXISTS {table} (stack UInt64, kinds Array(String), images Array(String), build_ids Array(String), \
content_hashes Array(UInt64), offsets Array(UInt64)) ENGINE = ReplacingMergeTree() ORDER BY stack"
    )
}

/// Samples per (time bucket, host, labels, process, event, stack), laid
/// out like `samples`; `period` carries each flush's sum of sample periods.
fn stack_counts_ddl(table: &str, version: (u32, u32), retention_days: u32) -> String {
    let label = label_type(version);
    let ttl = ttl("bucket", version, retention_days);
    format!(
        "CREATE TABLE IF NOT EXISTS {table} (\
bucket DateTime, host {label}, label_keys Array({label}), label_values Array(String), \
pid UInt32, comm String, event {label}, stack UInt64, count UInt64, period UInt64, batch_id String, row UInt32) \
ENGINE = MergeTree() PARTITION BY toYYYYMMDD(bucket) ORDER BY (bucket, host, event, stack){ttl}"
    )
}

/// Drops the days past retention where the server has no TTL (before
/// 19.6): whole daily partitions of the local sample table. Returns how
/// many were dropped.
pub fn prune(c: &Client, info: &SchemaInfo) -> Result<usize> {
    if info.retention_days == 0 || server_version(c)? >= (19, 6) {
        return Ok(0);
    }
    let suffix = if info.cluster.is_empty() { "" } else { "_local" };
    let mut dropped = 0;
    let tables = ["samples", "stack_counts", "samples_hourly", "stack_counts_hourly", "batches"];
    for table in tables.map(|t| format!("{t}{suffix}")) {
        let old = c.select(&format!(
            "SELECT DISTINCT partition FROM system.parts WHERE database = {} AND table = '{table}' AND active \
AND partition < toString(toYYYYMMDD(today() - {}))",
            quote(&c.url().database),
            info.retention_days
        ))?;
        for p in &old {
            c.execute(&format!("ALTER TABLE {table} DROP PARTITION {}", p[0]))?;
        }
        dropped += old.len();
    }
    Ok(dropped)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retention_and_ttl_follow_the_server() {
        // Checks retention parsing and that TTL and LowCardinality appear only for servers that have them.
        assert_eq!(parse_retention("30d").unwrap(), 30);
        assert_eq!(parse_retention("2w").unwrap(), 14);
        assert_eq!(parse_retention("0").unwrap(), 0);
        assert!(parse_retention("30m").is_err());
        assert!(!samples_ddl("s", (18, 16), 30).contains("TTL"));
        assert!(!samples_ddl("s", (18, 16), 30).contains("LowCardinality"));
        assert!(samples_ddl("s", (24, 3), 30).contains("TTL bucket + INTERVAL 30 DAY"));
        assert!(!samples_ddl("s", (24, 3), 0).contains("TTL"));
    }
}
