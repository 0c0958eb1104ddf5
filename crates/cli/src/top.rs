//! `loupe top`: reads the selected epochs, builds the table, prints it as
//! text that reads like `perf report`, or as JSON.

use crate::flags::{By, Format, TopArgs, TopBy};
use crate::symbols::Symbols;
use anyhow::{bail, Result};
use loupe_analysis::top::{pct, top, GroupBy, TopReport};
use loupe_store::query::{choose_events, Detail, Filter, ProfileSource, Selection};
use loupe_store::{Database, EpochId};
use std::io::Write;

pub fn run(a: TopArgs, out: &mut dyn Write) -> Result<u8> {
    if a.children || a.callers.is_some() || a.callees.is_some() {
        return crate::stacks::top(a, out);
    }
    if let Some(source) = &a.source.source {
        return crate::fleet::top(&a, source, out);
    }
    let by = match &a.by {
        TopBy::Label(key) if loupe_model::cgroup::LABEL_KEYS.contains(&key.as_str()) => {
            return crate::cgroup::top_by_label(&a, key, out);
        }
        TopBy::Label(key) => {
            bail!(
                "unknown label {key:?}: a local database has {}; other labels are a fleet's (--source)",
                loupe_model::cgroup::LABEL_KEYS.join(", ")
            )
        }
        TopBy::Host => bail!("--by host groups a fleet; it needs --source clickhouse://..."),
        TopBy::Plain(by) => *by,
    };
    let db = Database::open(&a.db.db)?;
    let mut filter = Filter { pids: a.pid.pid.clone(), comms: a.comm.comm.clone(), image: a.image.image.clone(), cgroup_pids: None };
    let sel_epochs = a.epoch.which()?;
    let epochs = db.select(&sel_epochs)?;
    filter.cgroup_pids = crate::cgroup::pids(&db, &epochs, &a.cgroup)?;
    let sel = Selection { epochs: sel_epochs, filter, events: a.events.clone() };
    // Naming a whole machine's samples reads every image they hit: seconds on a big recording.
    let progress = crate::progress::Progress::spinner(&format!("reading and naming the samples of {} epochs", epochs.len()));
    let flat = db.flat(&epochs, detail(by), &sel.filter)?;
    for p in &flat.problems {
        eprintln!("loupe: skipping corrupt profile {p}");
    }
    let events = choose_events(&flat.events(), &sel.events)?;
    let group = group_by(by);
    let mut syms = Symbols::for_db(&a.db.db);
    let (keep, keep_image) = (|p: &_| sel.filter.keep_process(p), |i: &str| sel.filter.keep_image(i));
    let report = top(&flat.profiles, &flat.totals, &events, group, &keep, &keep_image, &mut syms);
    drop(progress);
    match a.format {
        Format::Json => print_json(out, &report, by, a.limit)?,
        Format::Text => print_text(out, &report, by, a.limit, &epochs, lost_samples(&db, &epochs)?)?,
    }
    Ok(0)
}

pub(crate) fn group_by(by: By) -> GroupBy {
    match by {
        By::Image => GroupBy::Image,
        By::Procedure => GroupBy::Procedure,
        By::Line => GroupBy::Line,
        By::Instruction => GroupBy::Instruction,
    }
}

/// Per-image tables need only the index; finer ones the profile files.
pub(crate) fn detail(by: By) -> Detail {
    if by == By::Image {
        Detail::Images
    } else {
        Detail::Offsets
    }
}

pub(crate) fn print_json(out: &mut dyn Write, r: &TopReport, by: By, limit: usize) -> Result<()> {
    let rows: Vec<serde_json::Value> = r
        .rows
        .iter()
        .take(limit)
        .map(|row| {
            let mut o = serde_json::json!({ "image": row.image, "samples": row.counts.first().copied().unwrap_or(0),
                "percent": round2(r.percent(row, 0)) });
            if by != By::Image {
                o["procedure"] = row.procedure.clone().into();
            }
            if by == By::Line {
                o["line"] = row.line.clone().into();
            }
            if by == By::Instruction {
                o["address"] = row.line.clone().into();
            }
            if r.events.len() > 1 {
                o["counts"] = r.events.iter().zip(&row.counts).map(|(e, c)| (e.0.clone(), serde_json::json!(c))).collect();
            }
            o
        })
        .collect();
    let doc = serde_json::json!({
        "event": r.events.first().map(|e| e.0.clone()),
        "events": r.events.iter().map(|e| e.0.clone()).collect::<Vec<_>>(),
        "total_samples": r.totals.first().copied().unwrap_or(0),
        "unknown_samples": r.unknown.first().copied().unwrap_or(0),
        "rows": rows,
    });
    let mut doc = doc;
    // Only where some samples have no name, so that fully named profiles print as before.
    if r.unnamed.values().any(|c| c[0] > 0) {
        doc["unnamed_samples"] =
            r.unnamed.iter().filter(|(_, c)| c[0] > 0).map(|(why, c)| (why.describe().to_string(), serde_json::json!(c[0]))).collect();
    }
    writeln!(out, "{}", serde_json::to_string_pretty(&doc)?)?;
    Ok(())
}

fn round2(x: f64) -> f64 {
    (x * 100.0).round() / 100.0
}

/// Samples the collector lost in the selected epochs (stored with each).
fn lost_samples(db: &Database, epochs: &[EpochId]) -> Result<u64> {
    Ok(db.epochs()?.iter().filter(|e| epochs.contains(&e.id)).map(|e| e.lost_samples()).sum())
}

pub(crate) fn print_text(out: &mut dyn Write, r: &TopReport, by: By, limit: usize, epochs: &[EpochId], lost: u64) -> Result<()> {
    let eps: Vec<String> = epochs.iter().map(|e| e.to_string()).collect();
    writeln!(out, "# Loupe top, epoch {}", eps.join(","))?;
    if lost > 0 {
        let which = if epochs.len() == 1 { "this epoch" } else { "these epochs" };
        writeln!(out, "# {} samples lost in {which}", loupe_collector::daemon::thousands(lost))?;
    }
    for (i, e) in r.events.iter().enumerate() {
        writeln!(out, "# Samples: {} of event '{}', unknown: {} ({:.2}%)", r.totals[i], e, r.unknown[i], pct(r.unknown[i], r.totals[i]))?;
        if let Some(line) = unnamed_line(r, i) {
            writeln!(out, "{line}")?;
        }
    }
    if r.events.is_empty() {
        writeln!(out, "# No samples in the selection.")?;
        return Ok(());
    }
    writeln!(out, "#")?;
    let mut header = String::from("#");
    for e in &r.events {
        header += &format!(" {:>12} {:>7}", e.as_str(), "%");
    }
    header += &format!(" {:>7}  ", "cum%");
    header += match by {
        By::Image => "image",
        By::Procedure => "procedure                          image",
        By::Line => "line                                     procedure                  image",
        By::Instruction => "address            procedure                          image",
    };
    writeln!(out, "{header}")?;
    writeln!(out, "#")?;
    let mut cum = 0u64;
    for row in r.rows.iter().take(limit) {
        cum += row.counts[0];
        let mut line = String::from(" ");
        for (i, c) in row.counts.iter().enumerate() {
            line += &format!(" {c:>12} {:>6.2}%", pct(*c, r.totals[i]));
        }
        line += &format!(" {:>6.2}%  ", pct(cum, r.totals[0]));
        match by {
            By::Image => {}
            By::Procedure => line += &format!("{:<34} ", row.procedure.as_deref().unwrap_or("")),
            By::Line => line += &format!("{:<40} {:<26} ", row.line.as_deref().unwrap_or(""), row.procedure.as_deref().unwrap_or("")),
            By::Instruction => {
                line += &format!("{:<18} {:<34} ", row.line.as_deref().unwrap_or(""), row.procedure.as_deref().unwrap_or(""))
            }
        }
        line += &row.image;
        writeln!(out, "{}", line.trim_end())?;
    }
    if r.rows.len() > limit {
        writeln!(out, "# ... {} more rows (--limit)", r.rows.len() - limit)?;
    }
    Ok(())
}

/// "# Unnamed: 120 samples (1.20%): 80 stripped, no debug info; 40 file not found", or none.
fn unnamed_line(r: &TopReport, event: usize) -> Option<String> {
    let parts: Vec<(u64, &str)> = r.unnamed.iter().filter(|(_, c)| c[event] > 0).map(|(why, c)| (c[event], why.describe())).collect();
    let n: u64 = parts.iter().map(|(c, _)| c).sum();
    (n > 0).then(|| {
        let each: Vec<String> = parts.iter().map(|(c, why)| format!("{c} {why}")).collect();
        format!("# Unnamed: {n} samples ({:.2}%): {}", pct(n, r.totals[event]), each.join("; "))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_header_names_lost_samples_only_when_there_are_some() {
        // Checks the loss line under the header: absent at 0 (output unchanged), "N samples lost in this epoch" else.
        let r = TopReport { events: vec![], totals: vec![], unknown: vec![], rows: vec![], unnamed: Default::default() };
        let text = |lost, epochs: &[EpochId]| {
            let mut out = Vec::new();
            print_text(&mut out, &r, By::Image, 10, epochs, lost).unwrap();
            String::from_utf8(out).unwrap()
        };
        assert_eq!(text(0, &[EpochId(1)]), "# Loupe top, epoch 1\n# No samples in the selection.\n");
        assert_eq!(
            text(12_345, &[EpochId(2)]),
            "# Loupe top, epoch 2\n# 12,345 samples lost in this epoch\n# No samples in the selection.\n"
        );
        assert!(text(7, &[EpochId(1), EpochId(2)]).contains("\n# 7 samples lost in these epochs\n"));
    }
}
