//! `--cgroup`/`--label` filters and `top --by label:KEY`, from the cgroup
//! paths the collector stored per process.

use crate::flags::{CgroupFlag, Format, TopArgs};
use anyhow::{bail, Result};
use loupe_analysis::labels::by_label;
use loupe_analysis::top::pct;
use loupe_model::cgroup::{labels, LABEL_KEYS};
use loupe_store::query::{cgroup_pids, choose_events, Detail, Filter, ProfileSource};
use loupe_store::{Database, EpochId};
use std::collections::BTreeSet;

/// The pids `--cgroup`/`--label` keep in `epochs` (None: no such flag given).
pub fn pids(db: &Database, epochs: &[EpochId], f: &CgroupFlag) -> Result<Option<BTreeSet<u32>>> {
    if f.cgroup.is_none() && f.label.is_empty() {
        return Ok(None);
    }
    let wanted = f.label.iter().map(|l| parse_label(l)).collect::<Result<Vec<_>>>()?;
    let cgroups = db.process_cgroups(epochs);
    if cgroups.is_empty() {
        bail!("no cgroups recorded in the selected epochs of {} (recorded before Loupe kept them?)", db.root().display());
    }
    Ok(Some(cgroup_pids(&cgroups, f.cgroup.as_deref(), &wanted)))
}

fn parse_label(s: &str) -> Result<(String, String)> {
    match s.split_once('=') {
        Some((k, v)) if LABEL_KEYS.contains(&k) => Ok((k.to_string(), v.to_string())),
        _ => bail!("--label {s:?}: expected KEY=VALUE with KEY one of {}", LABEL_KEYS.join(", ")),
    }
}

/// `top --by label:KEY`: samples per label value of the processes' cgroups.
pub fn top_by_label(a: &TopArgs, key: &str, out: &mut dyn std::io::Write) -> Result<u8> {
    let db = Database::open(&a.db.db)?;
    let epochs = db.select(&a.epoch.which()?)?;
    let filter = Filter {
        pids: a.pid.pid.clone(),
        comms: a.comm.comm.clone(),
        image: a.image.image.clone(),
        cgroup_pids: pids(&db, &epochs, &a.cgroup)?,
    };
    let flat = db.flat(&epochs, Detail::Images, &filter)?;
    let events = choose_events(&flat.events(), &a.events)?;
    let cgroups = db.process_cgroups(&epochs);
    let label_of = |pid: u32| cgroups.get(&pid).and_then(|c| labels(c).remove(key));
    let keep = |p: &_| filter.keep_process(p);
    let rows = by_label(&flat.totals, &events, &keep, &label_of);
    let totals: Vec<u64> = (0..events.len()).map(|e| rows.iter().map(|r| r.1[e]).sum()).collect();
    if a.format == Format::Json {
        let rows: Vec<serde_json::Value> = rows
            .iter()
            .take(a.limit)
            .map(|(l, c)| {
                serde_json::json!({ key: l, "samples": c[0],
            "percent": (pct(c[0], totals[0]) * 100.0).round() / 100.0 })
            })
            .collect();
        let doc = serde_json::json!({ "event": events.first().map(|e| e.0.clone()), "total_samples": totals.first(), "rows": rows });
        writeln!(out, "{}", serde_json::to_string_pretty(&doc)?)?;
        return Ok(0);
    }
    for (e, t) in events.iter().zip(&totals) {
        writeln!(out, "# Samples: {t} of event '{e}' by {key} (the label of each process's cgroup)")?;
    }
    for (l, c) in rows.iter().take(a.limit) {
        let cells: Vec<String> = c.iter().zip(&totals).map(|(n, t)| format!("{n:>12} {:>6.2}%", pct(*n, *t))).collect();
        writeln!(out, "  {}  {l}", cells.join(" "))?;
    }
    Ok(0)
}
