//! Fleet queries. Aggregation runs in ClickHouse: whole hours of the range
//! come from the hourly rollups ([`crate::rollup`]), its edges from the
//! fine tables, where an inner GROUP BY takes one copy of each
//! `(batch_id, row)` (a batch delivered twice counts once); an outer one
//! sums what the caller groups by. Loupe gets one row per group and
//! symbolizes only those.

use crate::client::{json_u64, quote, Client};
use crate::error::{Error, ErrorKind, Result};
use crate::rollup::{self, Table};
use crate::rows::{image_of, StackDef};
use loupe_model::stacks::StackProfile;
use loupe_model::{EventName, ImageId, ImageOffset, ProcessKey};
use std::collections::{BTreeMap, HashMap};

/// One `--where`: `key=value`, or `key~regex` (RE2, anywhere in the value).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Cond {
    Eq(String, String),
    Match(String, String),
}

impl Cond {
    pub fn parse(s: &str) -> Result<Cond> {
        let at = s.find(['=', '~']).ok_or_else(|| usage(format!("bad --where {s:?}: expected key=value or key~regex")))?;
        let (key, value) = (s[..at].trim(), &s[at + 1..]);
        if key.is_empty() {
            return Err(usage(format!("bad --where {s:?}: no key before {:?}", &s[at..at + 1])));
        }
        Ok(if s.as_bytes()[at] == b'=' { Cond::Eq(key.into(), value.into()) } else { Cond::Match(key.into(), value.into()) })
    }

    fn sql(&self) -> String {
        match self {
            Cond::Eq(k, v) => format!("{} = {}", column(k), quote(v)),
            Cond::Match(k, re) => format!("match({}, {})", column(k), quote(re)),
        }
    }
}

fn usage(msg: String) -> Error {
    Error::new(ErrorKind::Usage, msg)
}

/// A key as a String expression: a column, or the value of that label ('' when absent).
pub fn column(key: &str) -> String {
    match key {
        "host" | "comm" | "image" | "event" | "build_id" => key.to_string(),
        "pid" => "toString(pid)".to_string(),
        label => format!("label_values[indexOf(label_keys, {})]", quote(label)),
    }
}

/// A point in time as unix seconds: `now`, seconds since the epoch, or a
/// duration before `now` (`90s`, `15m`, `2h`, `7d`).
pub fn parse_time(s: &str, now: u64) -> Result<u64> {
    if s == "now" {
        return Ok(now);
    }
    if let Ok(t) = s.parse::<u64>() {
        return Ok(t);
    }
    let (num, unit) = s.split_at(s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len()));
    let scale = match unit {
        "s" => 1,
        "m" => 60,
        "h" => 3600,
        "d" => 86400,
        "w" => 7 * 86400,
        _ => 0,
    };
    match num.parse::<u64>() {
        Ok(n) if scale > 0 => Ok(now.saturating_sub(n * scale)),
        _ => Err(usage(format!("bad time {s:?}: expected now, unix seconds, or a duration ago such as 15m, 2h, 7d"))),
    }
}

/// Which rows a query reads.
#[derive(Clone, Debug, Default)]
pub struct Selection {
    pub wheres: Vec<Cond>,
    /// Unix seconds; rows whose time bucket starts at or after `since` and before `until`.
    pub since: Option<u64>,
    pub until: Option<u64>,
}

impl Selection {
    /// The `--where` conditions, and those on `bucket` when `times`.
    fn conds(&self, times: bool) -> Vec<String> {
        let mut conds: Vec<String> = self.wheres.iter().map(Cond::sql).collect();
        if times {
            if let Some(t) = self.since {
                conds.push(format!("bucket >= toDateTime({t})"));
            }
            if let Some(t) = self.until {
                conds.push(format!("bucket < toDateTime({t})"));
            }
        }
        conds
    }
}

fn where_clause(conds: Vec<String>) -> String {
    if conds.is_empty() {
        String::new()
    } else {
        format!(" WHERE {}", conds.join(" AND "))
    }
}

/// Samples of one image and event (and offset, when asked for).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ImageRow {
    pub image: ImageId,
    pub event: String,
    pub offset: Option<u64>,
    pub samples: u64,
}

/// The selection's rows of `t` as SQL yielding `exprs` (named k0, k1, ...)
/// and the table's summed values (v0 = count, v1 = period; Int64) such
/// that their sums, grouped by any of the keys, are exact: the hourly
/// rollup for the range's whole hours less the extra copies of batches
/// stored twice there, and the fine table, one copy per `(batch_id, row)`,
/// at the edges ([`crate::rollup`]).
fn exact_rows(client: &Client, t: Table, exprs: &[String], sel: &Selection) -> Result<String> {
    let Some(split) = rollup::split(sel.since, sel.until) else {
        return Ok(once_each(t, exprs, sel.conds(true)));
    };
    let keys: Vec<String> = exprs.iter().enumerate().map(|(i, e)| format!("{e} AS k{i}")).collect();
    let values: Vec<String> = t.values().iter().enumerate().map(|(j, v)| format!("toInt64({v}) AS v{j}")).collect();
    let mut inside = sel.conds(false);
    inside.push(split.inside("hour"));
    let mut parts = vec![format!("SELECT {}, {} FROM {}{}", keys.join(", "), values.join(", "), t.hourly(), where_clause(inside))];
    if sel.since.is_some_and(|s| s != split.from) || sel.until.is_some_and(|u| Some(u) != split.to) {
        let mut edges = sel.conds(true);
        edges.push(split.outside());
        parts.push(once_each(t, exprs, edges));
    }
    let dups = rollup::duplicates(client, t, &split)?;
    if !dups.is_empty() {
        let mut extra = sel.conds(false);
        extra.push(rollup::duplicates_sql(&dups));
        parts.push(copies(t, exprs, extra, "toInt64(any({v})) * (1 - toInt64(count()))"));
    }
    Ok(parts.join(" UNION ALL "))
}

/// The fine rows of `t` under `conds`, one copy per `(batch_id, row)`.
fn once_each(t: Table, exprs: &[String], conds: Vec<String>) -> String {
    copies(t, exprs, conds, "toInt64(any({v}))")
}

/// Per `(batch_id, row)` of the fine table: the keys and each value as `value` gives it (`{v}`: the column).
fn copies(t: Table, exprs: &[String], conds: Vec<String>, value: &str) -> String {
    let keys: Vec<String> = exprs.iter().enumerate().map(|(i, e)| format!("any({e}) AS k{i}")).collect();
    let values: Vec<String> = t.values().iter().enumerate().map(|(j, v)| format!("{} AS v{j}", value.replace("{v}", v))).collect();
    format!("SELECT {}, {} FROM {}{} GROUP BY batch_id, row", keys.join(", "), values.join(", "), t.fine(), where_clause(conds))
}

/// Sums of the selection's samples grouped by `exprs`, one result row per group.
fn grouped(client: &Client, exprs: &[String], sel: &Selection) -> Result<Vec<Vec<String>>> {
    let keys: Vec<String> = (0..exprs.len()).map(|i| format!("k{i}")).collect();
    let keys = keys.join(", ");
    let rows = exact_rows(client, Table::Samples, exprs, sel)?;
    client.select(&format!("SELECT {keys}, sum(v0) FROM ({rows}) GROUP BY {keys}"))
}

/// The selection's call stacks, one table per event, summed in ClickHouse
/// per (event, process, stack); only the stacks in the result are fetched
/// (each once, whichever host sent it). Processes keep pid and command, so
/// `--pid`/`--comm` and `--root` work as on a local database.
pub fn stacks(client: &Client, sel: &Selection) -> Result<Vec<StackProfile>> {
    let exprs = ["event", "stack", "pid", "comm"].map(String::from);
    let rows = exact_rows(client, Table::StackCounts, &exprs, sel)?;
    let inner = format!("SELECT k0, k1, k2, k3, sum(v0) AS n, sum(v1) AS period FROM ({rows}) GROUP BY k0, k1, k2, k3");
    let counts = client.select_json(&format!("SELECT k0, toString(k1) AS k1, k2, k3, n, period FROM ({inner})"))?;
    let defs = stack_defs(client, &format!("SELECT k1 FROM ({rows})"))?;
    let mut tables: BTreeMap<String, StackProfile> = BTreeMap::new();
    for r in &counts {
        let bad = || Error::new(ErrorKind::Protocol, format!("unexpected stack row {r}"));
        let (event, comm) = (r["k0"].as_str().ok_or_else(bad)?, r["k3"].as_str().ok_or_else(bad)?);
        let stack: u64 = json_u64(&r["k1"]).ok_or_else(bad)?;
        let (pid, n, period) =
            (json_u64(&r["k2"]).ok_or_else(bad)?, json_u64(&r["n"]).ok_or_else(bad)?, json_u64(&r["period"]).ok_or_else(bad)?);
        let def = defs
            .get(&stack)
            .ok_or_else(|| Error::new(ErrorKind::Protocol, format!("stack {stack:016x} has counts but no frames in `stacks`")))?;
        let t = tables.entry(event.to_string()).or_insert_with(|| StackProfile::new(EventName::new(event)));
        let frames: Vec<(ImageId, ImageOffset)> = def.frames().into_iter().map(|(i, o)| (i, ImageOffset(o))).collect();
        t.add(&ProcessKey::new(pid as u32, comm), &frames, n);
        t.period_sum += period;
    }
    Ok(tables.into_values().collect())
}

/// The first and last time bucket (unix seconds) of the selection's stack
/// counts: the first and last hour from the rollup, the minutes within
/// them (and at the range's edges) from the fine table.
pub fn stack_time_range(client: &Client, sel: &Selection) -> Result<Option<(u64, u64)>> {
    let mut fine = sel.conds(true);
    if let Some(split) = rollup::split(sel.since, sel.until) {
        let mut inside = sel.conds(false);
        inside.push(split.inside("hour"));
        let hours = range(
            client,
            &format!("SELECT toUInt32(min(hour)), toUInt32(max(hour)), count() FROM stack_counts_hourly{}", where_clause(inside)),
        )?;
        let mut near = vec![split.outside()];
        if let Some((first, last)) = hours {
            for h in [first, last] {
                near.push(format!("(bucket >= toDateTime({h}) AND bucket < toDateTime({}))", h + rollup::ROLLUP_SECONDS));
            }
        }
        fine.push(format!("({})", near.join(" OR ")));
    }
    range(client, &format!("SELECT toUInt32(min(bucket)), toUInt32(max(bucket)), count() FROM stack_counts{}", where_clause(fine)))
}

/// (min, max) from a `SELECT min, max, count()` row; `None` when it counted nothing.
fn range(client: &Client, sql: &str) -> Result<Option<(u64, u64)>> {
    let rows = client.select(sql)?;
    let r = rows.first().ok_or_else(|| Error::new(ErrorKind::Protocol, "no answer to a time range query"))?;
    let num = |i: usize| r.get(i).and_then(|s| s.parse::<u64>().ok());
    match (num(0), num(1), num(2)) {
        (_, _, Some(0)) => Ok(None),
        (Some(a), Some(b), _) => Ok(Some((a, b))),
        _ => Err(Error::new(ErrorKind::Protocol, format!("unexpected time range row {r:?}"))),
    }
}

/// The frames of the stacks whose hashes `hashes_sql` selects.
fn stack_defs(client: &Client, hashes_sql: &str) -> Result<HashMap<u64, StackDef>> {
    let rows = client.select_json(&format!(
        "SELECT toString(stack) AS hash, any(kinds) AS kinds, any(images) AS images, any(build_ids) AS build_ids, \
any(content_hashes) AS content_hashes, any(offsets) AS offsets FROM stacks WHERE stack GLOBAL IN ({hashes_sql}) GROUP BY stack"
    ))?;
    let mut out = HashMap::with_capacity(rows.len());
    for r in rows {
        let bad = || Error::new(ErrorKind::Protocol, format!("unexpected stacks row {r}"));
        let strings = |k: &str| -> Result<Vec<String>> {
            r[k].as_array().ok_or_else(bad)?.iter().map(|v| v.as_str().map(String::from).ok_or_else(bad)).collect()
        };
        let numbers =
            |k: &str| -> Result<Vec<u64>> { r[k].as_array().ok_or_else(bad)?.iter().map(|v| json_u64(v).ok_or_else(bad)).collect() };
        let def = StackDef {
            stack: json_u64(&r["hash"]).ok_or_else(bad)?,
            kinds: strings("kinds")?,
            images: strings("images")?,
            build_ids: strings("build_ids")?,
            content_hashes: numbers("content_hashes")?,
            offsets: numbers("offsets")?,
        };
        out.insert(def.stack, def);
    }
    Ok(out)
}

/// Samples per image and event, and per offset when `offsets`.
pub fn images(client: &Client, sel: &Selection, offsets: bool) -> Result<Vec<ImageRow>> {
    let mut exprs: Vec<String> = ["kind", "image", "build_id", "content_hash", "event"].map(String::from).to_vec();
    if offsets {
        exprs.push("offset".into());
    }
    let rows = grouped(client, &exprs, sel)?;
    rows.iter().map(|r| image_row(r, offsets)).collect()
}

fn image_row(r: &[String], offsets: bool) -> Result<ImageRow> {
    let bad = || Error::new(ErrorKind::Protocol, format!("unexpected result row {r:?}"));
    let num = |i: usize| r.get(i).and_then(|s| s.parse::<u64>().ok()).ok_or_else(bad);
    let n = if offsets { 7 } else { 6 };
    if r.len() != n {
        return Err(bad());
    }
    Ok(ImageRow {
        image: image_of(&r[0], &r[1], &r[2], num(3)?),
        event: r[4].clone(),
        offset: if offsets { Some(num(5)?) } else { None },
        samples: num(n - 1)?,
    })
}

/// Samples per value of `key` (see [`column()`]) and event, largest first.
pub fn by_key(client: &Client, sel: &Selection, key: &str) -> Result<Vec<(String, String, u64)>> {
    let rows = grouped(client, &[column(key), "event".into()], sel)?;
    let mut out = Vec::with_capacity(rows.len());
    for r in rows {
        let n = r
            .get(2)
            .and_then(|s| s.parse::<u64>().ok())
            .ok_or_else(|| Error::new(ErrorKind::Protocol, format!("unexpected result row {r:?}")))?;
        out.push((r[0].clone(), r[1].clone(), n));
    }
    out.sort_by(|a, b| b.2.cmp(&a.2).then_with(|| a.0.cmp(&b.0)));
    Ok(out)
}

/// Uploaded names of `offsets` of the build `image_key`: (procedure, file, line) per offset found.
pub fn symbols(client: &Client, image_key: &str, offsets: &[u64]) -> Result<std::collections::HashMap<u64, (String, String, u32)>> {
    let mut out = std::collections::HashMap::new();
    for chunk in offsets.chunks(2000) {
        let list: Vec<String> = chunk.iter().map(|o| o.to_string()).collect();
        let rows = client.select(&format!(
            "SELECT offset, any(procedure), any(file), any(line) FROM symbols WHERE image_key = {} AND offset IN ({}) GROUP BY offset",
            quote(image_key),
            list.join(", ")
        ))?;
        for r in rows {
            if let (Some(off), Some(line)) = (r.first().and_then(|s| s.parse().ok()), r.get(3).and_then(|s| s.parse().ok())) {
                out.insert(off, (r[1].clone(), r[2].clone(), line));
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn where_clauses_and_times_parse() {
        // Checks key=value and key~regex into SQL on columns and labels, and the time forms.
        assert_eq!(Cond::parse("host=web-1").unwrap().sql(), "host = 'web-1'");
        assert_eq!(Cond::parse("version~^1\\.2").unwrap().sql(), "match(label_values[indexOf(label_keys, 'version')], '^1\\\\.2')");
        assert_eq!(Cond::parse("pid=42").unwrap().sql(), "toString(pid) = '42'");
        assert!(Cond::parse("novalue").is_err());
        assert!(Cond::parse("=x").is_err());
        assert_eq!(parse_time("now", 1000).unwrap(), 1000);
        assert_eq!(parse_time("15m", 1000).unwrap(), 100);
        assert_eq!(parse_time("1700000000", 5).unwrap(), 1_700_000_000);
        assert!(parse_time("yesterday", 5).is_err());
        let sel = Selection { wheres: vec![Cond::parse("host=a").unwrap()], since: Some(60), until: Some(120) };
        assert_eq!(where_clause(sel.conds(true)), " WHERE host = 'a' AND bucket >= toDateTime(60) AND bucket < toDateTime(120)");
    }
}
