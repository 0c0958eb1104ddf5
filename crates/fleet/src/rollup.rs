//! Hourly rollups, so a query over a day reads one row per (hour, host,
//! labels, process, key) instead of one per minute bucket and batch.
//!
//! The design constraint: rollups stay exact although a batch may be
//! delivered twice. A materialized view sums every insert into
//! `samples_hourly` / `stack_counts_hourly` (SummingMergeTree), duplicates
//! included, and another records each insert's batches in `batches`
//! (rows inserted, and the batch's width, `max(row) + 1`). A batch whose
//! inserted rows exceed its width arrived more than once; a query reads the
//! rollup for the whole hours of its range, subtracts the extra copies of
//! those batches (read from the fine table, which holds them row by row),
//! and reads the fine table, deduplicated, at the range's edges. Hours are
//! UTC hours (`intDiv(bucket, 3600)`), whatever the server's time zone.

use crate::client::{quote, Client};
use crate::error::{Error, ErrorKind, Result};

/// Width of a rollup bucket in seconds.
pub const ROLLUP_SECONDS: u64 = 3600;

/// A fine table and the rollup kept beside it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Table {
    Samples,
    StackCounts,
}

impl Table {
    pub fn fine(self) -> &'static str {
        match self {
            Table::Samples => "samples",
            Table::StackCounts => "stack_counts",
        }
    }

    pub fn hourly(self) -> &'static str {
        match self {
            Table::Samples => "samples_hourly",
            Table::StackCounts => "stack_counts_hourly",
        }
    }

    /// The summed columns; every other column is part of the rollup's key.
    pub fn values(self) -> &'static [&'static str] {
        match self {
            Table::Samples => &["count"],
            Table::StackCounts => &["count", "period"],
        }
    }

    /// The rollup's key: the fine table's columns but the batch's, with
    /// `hour` for `bucket` (a view's alias cannot shadow its source column).
    fn keys(self) -> &'static [&'static str] {
        match self {
            Table::Samples => &[
                "hour",
                "host",
                "event",
                "image",
                "offset",
                "pid",
                "comm",
                "kind",
                "build_id",
                "content_hash",
                "label_keys",
                "label_values",
            ],
            Table::StackCounts => &["hour", "host", "event", "stack", "pid", "comm", "label_keys", "label_values"],
        }
    }
}

/// `bucket` rounded down to its UTC hour, as a DateTime.
const HOUR_OF_BUCKET: &str = "toDateTime(intDiv(toUInt32(bucket), 3600) * 3600)";

/// DDL of the rollup of `t` (named `{hourly}{suffix}`); `label` is the
/// type of label-like columns, `ttl` the TTL clause (on `hour`).
pub(crate) fn hourly_ddl(t: Table, suffix: &str, label: &str, ttl: &str) -> String {
    let columns = match t {
        Table::Samples => format!(
            "hour DateTime, host {label}, label_keys Array({label}), label_values Array(String), pid UInt32, comm String, \
kind {label}, image String, build_id String, content_hash UInt64, event {label}, offset UInt64, count UInt64"
        ),
        Table::StackCounts => format!(
            "hour DateTime, host {label}, label_keys Array({label}), label_values Array(String), pid UInt32, comm String, \
event {label}, stack UInt64, count UInt64, period UInt64"
        ),
    };
    format!(
        "CREATE TABLE IF NOT EXISTS {}{suffix} ({columns}) ENGINE = SummingMergeTree(({})) \
PARTITION BY toYYYYMMDD(hour) ORDER BY ({}){ttl}",
        t.hourly(),
        t.values().join(", "),
        t.keys().join(", ")
    )
}

/// DDL of `batches`: per insert, each batch's rows and width, by table.
pub(crate) fn batches_ddl(suffix: &str, label: &str, ttl: &str) -> String {
    format!(
        "CREATE TABLE IF NOT EXISTS batches{suffix} (tbl String, bucket DateTime, host {label}, batch_id String, rows UInt64, width UInt64) \
ENGINE = MergeTree() PARTITION BY toYYYYMMDD(bucket) ORDER BY (tbl, bucket, host, batch_id){ttl}"
    )
}

/// What an insert block (or the rows `filter` selects) adds to the rollup of `t`.
fn hourly_select(t: Table, source: &str, filter: &str) -> String {
    let keys = &t.keys()[1..];
    let sums: Vec<String> = t.values().iter().map(|v| format!("sum({v}) AS {v}")).collect();
    format!(
        "SELECT {HOUR_OF_BUCKET} AS hour, {}, {} FROM {source}{filter} GROUP BY hour, {}",
        keys.join(", "),
        sums.join(", "),
        keys.join(", ")
    )
}

/// What an insert block (or the rows `filter` selects) adds to `batches`.
fn batches_select(t: Table, source: &str, filter: &str) -> String {
    format!(
        "SELECT {} AS tbl, bucket, host, batch_id, count() AS rows, max(row) + 1 AS width FROM {source}{filter} GROUP BY bucket, host, batch_id",
        quote(t.fine())
    )
}

/// The materialized views that fill the rollups and `batches` from every
/// insert into the fine tables (`suffix` `_local` on a cluster's shards).
pub(crate) fn views_ddl(suffix: &str) -> Vec<String> {
    let mut out = Vec::new();
    for t in [Table::Samples, Table::StackCounts] {
        let source = format!("{}{suffix}", t.fine());
        out.push(format!(
            "CREATE MATERIALIZED VIEW IF NOT EXISTS {hourly}_mv{suffix} TO {hourly}{suffix} AS {}",
            hourly_select(t, &source, ""),
            hourly = t.hourly()
        ));
        out.push(format!(
            "CREATE MATERIALIZED VIEW IF NOT EXISTS {fine}_batches_mv{suffix} TO batches{suffix} AS {}",
            batches_select(t, &source, ""),
            fine = t.fine()
        ));
    }
    out
}

/// Fills the rollups and `batches` from rows stored before they existed
/// (a migration from schema 2); duplicates are summed and recorded alike,
/// so queries correct them as for new rows. One hour at a time, so that a
/// big table's sums stay within the server's memory limit.
pub(crate) fn backfill(c: &Client, suffix: &str) -> Result<()> {
    for t in [Table::Samples, Table::StackCounts] {
        let source = format!("{}{suffix}", t.fine());
        // INSERT ... SELECT matches columns by position: name them.
        let cols: Vec<&str> = t.keys().iter().chain(t.values()).copied().collect();
        for row in c.select(&format!("SELECT DISTINCT toUInt32({HOUR_OF_BUCKET}) FROM {source}"))? {
            let h: u64 = row
                .first()
                .and_then(|h| h.parse().ok())
                .ok_or_else(|| Error::new(ErrorKind::Protocol, format!("unexpected hour {row:?}")))?;
            let filter = format!(" WHERE bucket >= toDateTime({h}) AND bucket < toDateTime({})", h + ROLLUP_SECONDS);
            c.execute(&format!("INSERT INTO {}{suffix} ({}) {}", t.hourly(), cols.join(", "), hourly_select(t, &source, &filter)))?;
            c.execute(&format!(
                "INSERT INTO batches{suffix} (tbl, bucket, host, batch_id, rows, width) {}",
                batches_select(t, &source, &filter)
            ))?;
        }
    }
    Ok(())
}

/// Where a range of buckets is read from: the rollup for whole hours
/// `[from, to)` (`to` open when `None`), the fine table elsewhere.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Split {
    pub from: u64,
    pub to: Option<u64>,
}

/// The whole hours of `[since, until)`, or `None` when it holds none.
pub fn split(since: Option<u64>, until: Option<u64>) -> Option<Split> {
    let from = since.map_or(0, |s| s.div_ceil(ROLLUP_SECONDS) * ROLLUP_SECONDS);
    let to = until.map(|u| u / ROLLUP_SECONDS * ROLLUP_SECONDS);
    match to {
        Some(to) if to <= from => None,
        _ => Some(Split { from, to }),
    }
}

impl Split {
    /// Times in `column` inside the rollup's hours.
    pub fn inside(&self, column: &str) -> String {
        let mut s = format!("{column} >= toDateTime({})", self.from);
        if let Some(to) = self.to {
            s.push_str(&format!(" AND {column} < toDateTime({to})"));
        }
        s
    }

    /// Buckets outside them (the fine table's share).
    pub fn outside(&self) -> String {
        format!("NOT ({})", self.inside("bucket"))
    }
}

/// A batch stored more than once: (bucket, host, batch id).
pub type Duplicate = (u64, String, String);

/// Batches of `t` within `split` that arrived more than once.
pub fn duplicates(c: &Client, t: Table, split: &Split) -> Result<Vec<Duplicate>> {
    let rows = c.select(&format!(
        "SELECT toUInt32(bucket), host, batch_id FROM batches WHERE tbl = {} AND {} GROUP BY bucket, host, batch_id \
HAVING sum(rows) > max(width)",
        quote(t.fine()),
        split.inside("bucket")
    ))?;
    rows.into_iter()
        .map(|r| match (r.first().and_then(|s| s.parse::<u64>().ok()), r.get(1), r.get(2)) {
            (Some(b), Some(h), Some(id)) => Ok((b, h.clone(), id.clone())),
            _ => Err(Error::new(ErrorKind::Protocol, format!("unexpected batches row {r:?}"))),
        })
        .collect()
}

/// A condition selecting exactly the rows of `dups` (which must not be empty).
pub fn duplicates_sql(dups: &[Duplicate]) -> String {
    let mut buckets: Vec<u64> = dups.iter().map(|d| d.0).collect();
    buckets.sort_unstable();
    buckets.dedup();
    let buckets: Vec<String> = buckets.iter().map(|b| format!("toDateTime({b})")).collect();
    let ids: Vec<String> = dups.iter().map(|d| format!("({}, {})", quote(&d.1), quote(&d.2))).collect();
    // The bucket list lets the primary key skip to those minutes; the pairs pick the batches.
    format!("bucket IN ({}) AND (toString(host), batch_id) IN ({})", buckets.join(", "), ids.join(", "))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn whole_hours_of_a_range() {
        // Checks which part of a range the rollup covers: whole UTC hours only, open ends open.
        assert_eq!(split(None, None), Some(Split { from: 0, to: None }));
        assert_eq!(split(Some(3600), Some(7200)), Some(Split { from: 3600, to: Some(7200) }));
        assert_eq!(split(Some(3601), Some(10799)), None);
        assert_eq!(split(Some(3000), Some(11000)), Some(Split { from: 3600, to: Some(10800) }));
        assert_eq!(split(Some(60), Some(120)), None);
        assert_eq!(Split { from: 3600, to: None }.outside(), "NOT (bucket >= toDateTime(3600))");
    }
}
