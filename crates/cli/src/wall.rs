//! `loupe wall`: each thread's wall-clock time as on-CPU plus off-CPU time
//! by reason, from the scheduler times `record --off-cpu` stores.

use crate::flags::{Format, WallArgs};
use anyhow::{bail, Result};
use loupe_model::ProcessKey;
use loupe_store::meta::{ThreadTime, OFF_CPU_REASONS};
use loupe_store::query::{Filter, ProfileSource};
use loupe_store::Database;
use std::io::Write;

pub fn run(a: WallArgs, out: &mut dyn Write) -> Result<u8> {
    let db = Database::open(&a.db.db)?;
    let epochs = db.select(&a.epoch.which()?)?;
    let cgroup_pids = crate::cgroup::pids(&db, &epochs, &a.cgroup)?;
    let filter = Filter { pids: a.pid.pid.clone(), comms: a.comm.comm.clone(), image: None, cgroup_pids };
    let all = db.thread_times(&epochs);
    if all.is_empty() {
        bail!("no per-thread times in the selected epochs of {}: record with --off-cpu", a.db.db.display());
    }
    let mut rows: Vec<((u32, u32), ThreadTime)> =
        all.into_iter().filter(|((pid, _), t)| filter.keep_process(&ProcessKey::new(*pid, &t.comm))).collect();
    rows.sort_by_key(|(k, t)| (std::cmp::Reverse(wall(t)), *k));
    rows.truncate(a.limit);
    match a.format {
        Format::Json => print_json(out, &rows),
        Format::Text => print_text(out, &rows),
    }
}

fn wall(t: &ThreadTime) -> u64 {
    t.on_cpu_ns + t.off_cpu_total()
}

fn print_json(out: &mut dyn Write, rows: &[((u32, u32), ThreadTime)]) -> Result<u8> {
    let threads: Vec<serde_json::Value> = rows
        .iter()
        .map(|((pid, tid), t)| {
            let off: serde_json::Map<String, serde_json::Value> =
                OFF_CPU_REASONS.iter().zip(t.off_cpu_ns).map(|(r, ns)| (r.to_string(), ns.into())).collect();
            serde_json::json!({ "pid": pid, "tid": tid, "comm": t.comm, "wall_ns": wall(t), "on_cpu_ns": t.on_cpu_ns,
                "off_cpu_ns": t.off_cpu_total(), "off_cpu_by_reason_ns": off })
        })
        .collect();
    writeln!(out, "{}", serde_json::to_string_pretty(&serde_json::json!({ "threads": threads }))?)?;
    Ok(0)
}

fn print_text(out: &mut dyn Write, rows: &[((u32, u32), ThreadTime)]) -> Result<u8> {
    writeln!(out, "# Wall-clock time per thread = on-CPU + off-CPU; columns after it are shares of each thread's wall-clock time")?;
    write!(out, "{:>8} {:>8}  {:<16} {:>10} {:>7}", "pid", "tid", "comm", "wall s", "on-CPU")?;
    for r in OFF_CPU_REASONS {
        write!(out, " {:>7}", abbreviation(r))?;
    }
    writeln!(out)?;
    for ((pid, tid), t) in rows {
        let w = wall(t);
        let pct = |ns: u64| format!("{:.1}%", 100.0 * ns as f64 / w.max(1) as f64);
        write!(out, "{pid:>8} {tid:>8}  {:<16} {:>10.3} {:>7}", t.comm, w as f64 / 1e9, pct(t.on_cpu_ns))?;
        for ns in t.off_cpu_ns {
            write!(out, " {:>7}", pct(ns))?;
        }
        writeln!(out)?;
    }
    Ok(0)
}

/// Column heads that fit: `uninterruptible` is `uninter`.
fn abbreviation(reason: &str) -> &str {
    &reason[..reason.len().min(7)]
}
