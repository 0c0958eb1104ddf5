//! `loupe data`: DProf's views of where memory time goes, by data type and
//! field rather than by code.

use crate::flags::{DbArg, Format, RecordArgs};
use anyhow::{bail, Context, Result};
use clap::{Args, Subcommand};
use loupe_dataprof::recorder::{Recorder, Summary};
use loupe_perf::GatedChild;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

#[derive(Args, Debug)]
pub struct DataArgs {
    #[command(subcommand)]
    pub cmd: DataCommand,
}

#[derive(Subcommand, Debug)]
pub enum DataCommand {
    /// Data types and fields sorted by sampled memory cost (DProf's data profile).
    #[command(after_help = "Examples:\n  loupe record --data --db d.db -- ./my-program\n  loupe data profile --db d.db\n  \
loupe data profile --db d.db --format json")]
    Profile(ViewArgs),
    /// Object access histories from hardware breakpoints: every access to chosen offsets of chosen objects, allocation to free.
    #[command(after_help = crate::objects::HISTORY_HELP)]
    History(crate::objects::HistoryArgs),
    /// Data flow: the common paths objects take from allocation to free, CPU changes marked (text, JSON, DOT, SVG).
    #[command(after_help = crate::objects::FLOW_HELP)]
    Flow(crate::objects::FlowArgs),
    /// Runs a command with its heap allocations tracked (uprobes or LD_PRELOAD) and lists the allocation sites.
    #[command(after_help = crate::objects::ALLOCS_HELP)]
    Allocs(crate::objects::AllocsArgs),
}

/// Selection shared by the views.
#[derive(Args, Debug)]
pub struct ViewArgs {
    #[command(flatten)]
    pub db: DbArg,
    /// Show at most this many rows.
    #[arg(long, default_value_t = 40)]
    pub limit: usize,
    /// Output format.
    #[arg(long, value_enum, default_value_t = Format::Text)]
    pub format: Format,
}

pub fn run(a: DataArgs) -> Result<u8> {
    match a.cmd {
        DataCommand::Profile(v) => profile(v),
        DataCommand::History(a) => crate::objects::history(a),
        DataCommand::Flow(a) => crate::objects::flow_view(a),
        DataCommand::Allocs(a) => crate::objects::allocs(a),
    }
}

fn profile(v: ViewArgs) -> Result<u8> {
    bail!("{}: no access samples (not implemented yet; record with `loupe record --data`)", v.db.db.display())
}

/// `loupe record --data`: access samples (and heap allocations) of a
/// command and its children, or of every process for --duration seconds.
pub fn record(a: RecordArgs) -> Result<u8> {
    let db = a.db.db.clone();
    std::fs::create_dir_all(&db).with_context(|| format!("cannot create {}", db.display()))?;
    let stop = crate::collect::stop_flag()?;
    let freq = a.sampling.freq;
    let (status, summary) = match a.command.split_first() {
        Some((cmd, args)) => {
            if crate::collect::find_command(cmd).is_none() {
                eprintln!("loupe: command not found: {cmd}");
                return Ok(127);
            }
            let mut child = GatedChild::spawn(cmd, args)?;
            let mut rec = Recorder::open(&db, Some(child.pid), freq, true)?;
            eprintln!("loupe: data source: {}", rec.path().describe());
            child.release()?;
            let status = loop {
                rec.pump(Duration::from_millis(50))?;
                if let Some(s) = child.try_wait()? {
                    break s;
                }
                if stop.load(Ordering::Relaxed) {
                    // SAFETY: signalling our own child by pid.
                    unsafe { libc::kill(child.pid, libc::SIGTERM) };
                }
            };
            (status, rec.finish()?)
        }
        None => {
            let Some(secs) = a.duration else { bail!("give a command after `--`, or --duration SECONDS for every process") };
            let rec = Recorder::open(&db, None, freq, true)?;
            eprintln!("loupe: data source: {}", rec.path().describe());
            rec.enable()?;
            let mut rec = rec;
            let t0 = Instant::now();
            while t0.elapsed().as_secs_f64() < secs && !stop.load(Ordering::Relaxed) {
                rec.pump(Duration::from_millis(50))?;
            }
            (0, rec.finish()?)
        }
    };
    report(&summary);
    Ok(status.clamp(0, 255) as u8)
}

fn report(s: &Summary) {
    let pct = if s.samples > 0 { 100.0 * s.with_address as f64 / s.samples as f64 } else { 0.0 };
    eprintln!(
        "loupe: {} samples, {} ({pct:.1}%) at memory-referencing instructions with an exact address, {} lost",
        s.samples, s.with_address, s.lost
    );
}
