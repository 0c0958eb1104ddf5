//! `loupe top`: reads the selected epochs, builds the table, prints it as
//! text that reads like `perf report`, or as JSON.

use crate::flags::{By, Format, TopArgs};
use crate::symbols::Symbols;
use anyhow::{bail, Result};
use loupe_analysis::top::{pct, top, GroupBy, TopReport};
use loupe_model::{EventName, ImageOffset, ProcessKey, Profile};
use loupe_store::{Database, EpochId, IndexEntry};
use std::io::Write;

pub fn run(a: TopArgs) -> Result<u8> {
    if a.children || a.callers.is_some() || a.callees.is_some() {
        return crate::stacks::top(a);
    }
    let db = Database::open(&a.db.db)?;
    let epochs = select_epochs(&db, &a.epoch)?;
    let image_filter = a.image.clone();
    let keep_image = move |img: &str| image_filter.as_deref().is_none_or(|f| img.contains(f));
    let (profiles, problems) = load(&db, &epochs, a.by, &keep_image)?;
    for p in &problems {
        eprintln!("loupe: skipping corrupt profile {p}");
    }
    let events = choose_events(&profiles, &a.events)?;
    let keep = |p: &ProcessKey| (a.pid.is_empty() || a.pid.contains(&p.pid)) && (a.comm.is_empty() || a.comm.contains(&p.comm));
    let by = group_by(a.by);
    let mut syms = Symbols::for_db(&a.db.db);
    let report = top(&profiles, &events, by, &keep, &keep_image, &mut syms);
    let mut out = std::io::stdout().lock();
    match a.format {
        Format::Json => print_json(&mut out, &report, a.by, a.limit)?,
        Format::Text => print_text(&mut out, &report, a.by, a.limit, &epochs)?,
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

pub(crate) fn select_epochs(db: &Database, which: &str) -> Result<Vec<EpochId>> {
    let all: Vec<EpochId> = db.epochs()?.into_iter().map(|e| e.id).collect();
    Ok(match which {
        "all" => all,
        "current" => vec![db.current_epoch()?],
        n => {
            let Ok(n) = n.parse::<u32>() else { bail!("--epoch takes a number, `current` or `all`, not {n:?}") };
            if !all.contains(&EpochId(n)) {
                bail!(
                    "no epoch {n} in {} (epochs: {})",
                    db.root().display(),
                    all.iter().map(|e| e.to_string()).collect::<Vec<_>>().join(", ")
                );
            }
            vec![EpochId(n)]
        }
    })
}

/// Per-image totals come from the index alone; finer views read only the
/// profile files of the images that pass the filter.
pub(crate) fn load(db: &Database, epochs: &[EpochId], by: By, keep_image: &dyn Fn(&str) -> bool) -> Result<(Vec<Profile>, Vec<String>)> {
    let mut profiles = Vec::new();
    let mut problems = Vec::new();
    for &e in epochs {
        let (index, bad) = db.index(e)?;
        problems.extend(bad.iter().map(|p| p.to_string()));
        let wanted = |x: &IndexEntry| by != By::Image && keep_image(&x.image.path);
        // Images left out still count towards the totals the percentages use.
        profiles.extend(index.entries.iter().filter(|x| !wanted(x)).map(profile_from_index));
        if index.entries.iter().any(wanted) {
            let (ps, bad) = db.load(e, &wanted)?;
            profiles.extend(ps);
            problems.extend(bad.iter().map(|p| p.to_string()));
        }
    }
    Ok((profiles, problems))
}

/// A stand-in profile with each process's total at offset 0.
fn profile_from_index(x: &IndexEntry) -> Profile {
    let mut p = Profile::new(x.image.clone(), x.event.clone());
    for (proc_, n) in &x.processes {
        p.add(proc_.clone(), ImageOffset(0), *n, 0);
    }
    p.period_sum = x.period_sum;
    p
}

pub(crate) fn choose_events(profiles: &[Profile], wanted: &[String]) -> Result<Vec<EventName>> {
    let mut present: Vec<EventName> = profiles.iter().map(|p| p.event.clone()).collect();
    present.sort();
    present.dedup();
    if wanted.is_empty() {
        // cpu-clock first when present: it is the default event.
        present.sort_by_key(|e| e.as_str() != "cpu-clock");
        return Ok(present);
    }
    wanted
        .iter()
        .map(|w| {
            let e = EventName::new(w);
            if present.contains(&e) || present.is_empty() {
                Ok(e)
            } else {
                bail!(
                    "no samples of event {w} in the selection (events present: {})",
                    present.iter().map(|e| e.as_str()).collect::<Vec<_>>().join(", ")
                )
            }
        })
        .collect()
}

fn print_json(out: &mut dyn Write, r: &TopReport, by: By, limit: usize) -> Result<()> {
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

fn print_text(out: &mut dyn Write, r: &TopReport, by: By, limit: usize, epochs: &[EpochId]) -> Result<()> {
    let eps: Vec<String> = epochs.iter().map(|e| e.to_string()).collect();
    writeln!(out, "# Loupe top, epoch {}", eps.join(","))?;
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
