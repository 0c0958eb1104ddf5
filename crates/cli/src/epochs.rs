//! `loupe epochs --format json`: each epoch's time span, samples, losses and
//! samples per image, for the web overview's time axis (docs/serve.md).

use anyhow::Result;
use loupe_analysis::image_display;
use loupe_store::query::ProfileSource;
use std::collections::BTreeMap;

/// One object per epoch, oldest first. An epoch ends when the next one
/// starts; the newest is still open: its end is null.
pub fn json(db: &dyn ProfileSource) -> Result<serde_json::Value> {
    let all = db.list_epochs()?;
    let current = db.current()?;
    let mut out = Vec::with_capacity(all.len());
    for (i, e) in all.iter().enumerate() {
        let end = all.get(i + 1).map(|n| n.started_unix);
        let (totals, _) = db.totals(e.id)?;
        let mut images: BTreeMap<String, u64> = BTreeMap::new();
        let mut events: BTreeMap<String, u64> = BTreeMap::new();
        for t in &totals {
            let n: u64 = t.processes.iter().map(|(_, c)| c).sum();
            *images.entry(image_display(&t.image)).or_default() += n;
            *events.entry(t.event.0.clone()).or_default() += n;
        }
        out.push(serde_json::json!({
            "id": e.id.0, "current": e.id == current,
            "start": iso8601(e.started_unix), "end": end.map(iso8601),
            "start_unix_ns": e.started_unix as u128 * 1_000_000_000, "end_unix_ns": end.map(|s| s as u128 * 1_000_000_000),
            "samples": events.values().sum::<u64>(), "lost": e.lost_samples(),
            "events": events, "images": images,
            "host": e.meta.host, "kernel": e.meta.kernel,
        }));
    }
    Ok(serde_json::Value::Array(out))
}

/// `2026-11-27T05:40:01+00:00` (UTC) from Unix seconds.
pub fn iso8601(unix: u64) -> String {
    let (days, secs) = (unix / 86_400, unix % 86_400);
    let (y, m, d) = civil_from_days(days as i64);
    format!("{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}+00:00", secs / 3600, secs / 60 % 60, secs % 60)
}

/// Howard Hinnant's days-to-civil: the proleptic Gregorian date of a day
/// count since 1970-01-01.
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (yoe + era * 400 + i64::from(m <= 2), m, d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn iso_times_match_known_dates() {
        // Checks the date arithmetic on the epoch, a leap day and a date past 2100's skipped leap day.
        assert_eq!(iso8601(0), "1970-01-01T00:00:00+00:00");
        assert_eq!(iso8601(951_782_400), "2000-02-29T00:00:00+00:00");
        assert_eq!(iso8601(1_795_758_001), "2026-11-27T05:40:01+00:00");
        assert_eq!(iso8601(4_107_542_400), "2100-03-01T00:00:00+00:00");
    }
}
