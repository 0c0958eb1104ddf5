//! `record`, `daemon`, `flush`, `epoch`, `epochs`, `events`.

use crate::flags::{DaemonArgs, DbArg, EpochsArgs, Format, Lbr, RecordArgs, SamplingArgs};
use anyhow::{bail, Context, Result};
use loupe_collector::daemon::{self, DaemonOptions, Engine};
use loupe_perf::{EventSpec, GatedChild, SamplerConfig, Target};
use loupe_store::Database;
use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Resolves event names, probing the machine: unknown names are errors
/// that list what exists; hardware events without a PMU fall back to
/// cpu-clock with a warning.
fn resolve_events(names: &[String]) -> Result<Vec<EventSpec>> {
    let names: Vec<String> = if names.is_empty() { vec!["cpu-clock".into()] } else { names.to_vec() };
    let probed = loupe_perf::probe_events();
    let missing: Vec<&str> = probed.iter().filter(|(_, r)| r.is_err()).map(|(e, _)| e.name.as_str()).collect();
    let mut out: Vec<EventSpec> = Vec::new();
    for n in &names {
        let spec = loupe_perf::parse_event(n)?;
        let ok = probed.iter().find(|(e, _)| e.name == spec.name).is_none_or(|(_, r)| r.is_ok());
        let spec = if ok {
            spec
        } else {
            eprintln!("loupe: event {} is not available on this machine (no hardware PMU); falling back to cpu-clock", spec.name);
            loupe_perf::parse_event("cpu-clock")?
        };
        if !out.iter().any(|e| e.name == spec.name) {
            out.push(spec);
        }
    }
    let names: Vec<&str> = out.iter().map(|e| e.name.as_str()).collect();
    if missing.is_empty() {
        eprintln!("loupe: sampling {} (hardware PMU available)", names.join(", "));
    } else {
        eprintln!("loupe: sampling {}; unavailable here: {}", names.join(", "), missing.join(", "));
    }
    Ok(out)
}

impl Lbr {
    pub fn branch_sample_type(self) -> u64 {
        use loupe_perf::sys::branch::*;
        ANY | match self {
            Lbr::User => USER,
            Lbr::Kernel => KERNEL,
            Lbr::All => USER | KERNEL,
        }
    }
}

/// The `branch_sample_type` to record with, after probing the machine:
/// 0 with a warning when it has no branch stack.
fn branch_stack(lbr: Option<Lbr>) -> Result<u64> {
    let Some(which) = lbr else { return Ok(0) };
    match loupe_perf::probe_branch_stack(which.branch_sample_type()) {
        Ok(()) => Ok(which.branch_sample_type()),
        Err(e) if e.kind() == &loupe_perf::ErrorKind::NoBranchStack => {
            eprintln!("loupe: warning: {e}; recording IP samples only");
            Ok(0)
        }
        Err(e) => bail!("--lbr: {e}"),
    }
}

fn sampler_config(s: &SamplingArgs) -> Result<SamplerConfig> {
    let branch_stack = branch_stack(s.lbr)?;
    // Branch stacks come with a hardware event's samples: cycles unless the user named events.
    let names = if branch_stack != 0 && s.events.is_empty() { vec!["cycles".to_string()] } else { s.events.clone() };
    let mut cfg = SamplerConfig { events: resolve_events(&names)?, freq_hz: s.freq, branch_stack, ..SamplerConfig::default() };
    if branch_stack != 0 && !cfg.events.iter().any(loupe_perf::is_hardware) {
        bail!("--lbr records branches with the samples of a hardware event; add one, e.g. -e cycles");
    }
    if branch_stack != 0 {
        // Up to 32 records of 24 bytes make a sample ~15x larger.
        cfg.ring_pages = cfg.ring_pages.max(512);
    }
    if !s.no_stacks {
        cfg.callchain = true;
        cfg.user_stack_bytes = s.stack_bytes;
        // Stack copies make samples ~100x larger: give the rings room.
        cfg.ring_pages = 1024;
    }
    Ok(cfg)
}

fn seconds(s: f64, what: &str) -> Result<Duration> {
    if !(s.is_finite() && s > 0.0) {
        bail!("{what} must be a positive number of seconds, got {s}");
    }
    Ok(Duration::from_secs_f64(s))
}

/// Stop flag set by SIGTERM and SIGINT.
pub(crate) fn stop_flag() -> Result<Arc<AtomicBool>> {
    let stop = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGTERM, signal_hook::consts::SIGINT] {
        signal_hook::flag::register(sig, Arc::clone(&stop))?;
    }
    Ok(stop)
}

/// Finds a command the way a shell would, so a missing one is reported
/// before anything starts (exit 127, as shells do).
pub(crate) fn find_command(cmd: &str) -> Option<std::path::PathBuf> {
    if cmd.contains('/') {
        return std::path::Path::new(cmd).exists().then(|| cmd.into());
    }
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path).map(|d| d.join(cmd)).find(|p| p.is_file())
}

pub fn record(a: RecordArgs) -> Result<u8> {
    if a.data {
        return crate::data::record(a);
    }
    if let Some(cmd) = a.command.first() {
        if find_command(cmd).is_none() {
            eprintln!("loupe: command not found: {cmd}");
            return Ok(127);
        }
    }
    let flush_every = seconds(a.flush_every, "--flush-every")?;
    let duration = a.duration.map(|d| seconds(d, "--duration")).transpose()?;
    let db = Database::create(&a.db.db).with_context(|| format!("cannot use database {}", a.db.db.display()))?;
    let mut cfg = sampler_config(&a.sampling)?;
    let stop = stop_flag()?;
    let mut child = match a.command.split_first() {
        Some((cmd, args)) => {
            let c = GatedChild::spawn(cmd, args)?;
            cfg.target = Target::Process { pid: c.pid };
            cfg.enable_on_exec = true;
            Some(c)
        }
        None => None,
    };
    let mut engine = Engine::new(&cfg, db, flush_every, a.sampling.backend.choice()).map_err(|e| anyhow::anyhow!("{e}"))?;
    eprintln!("loupe: backend {}", engine.backend_note);
    let started = Instant::now();
    let mut status = 0;
    match &mut child {
        Some(c) => c.release()?,
        None => {
            engine.collector.scan_all();
            engine.sampler.enable()?;
        }
    }
    loop {
        engine.step().map_err(|e| anyhow::anyhow!("{e}"))?;
        if let Some(c) = &mut child {
            if let Some(s) = c.try_wait()? {
                status = s;
                break;
            }
        } else if stop.load(Ordering::Relaxed) || duration.is_some_and(|d| started.elapsed() >= d) {
            break;
        }
    }
    engine.sampler.disable()?;
    engine.flush_final().map_err(|e| anyhow::anyhow!("{e}"))?;
    summarize(&engine, started.elapsed());
    Ok(status.clamp(0, 255) as u8)
}

fn summarize(e: &Engine, took: Duration) {
    eprintln!("loupe: {}", e.closing_line(took));
    if let Some(st) = e.collector.stack_stats() {
        eprintln!(
            "loupe: {} stacks ({} walked in the kernel, {} unwound from stack copies), {} stopped before the root ({:.2}%), {:.1} frames on average",
            st.stacks,
            st.kernel_walks,
            st.dwarf_unwinds,
            st.truncated,
            100.0 * st.truncated as f64 / st.stacks.max(1) as f64,
            st.frames as f64 / st.stacks.max(1) as f64
        );
    }
    if let Some(c) = e.bpf().and_then(|b| b.stack_counters()) {
        eprintln!(
            "loupe: in the kernel: {} samples, {} counted there; to stack copies: {} outside code with frame pointers ({} at the leaf), {} of processes not yet described, {} with no room",
            c.samples,
            c.counted,
            c.streamed_leaf + c.streamed_chain,
            c.streamed_leaf,
            c.streamed_unknown,
            c.streamed_stackid + c.streamed_table_full
        );
    }
    if let Some(b) = e.collector.branch_stats() {
        eprintln!(
            "loupe: {} branch stacks, {} branch records: {} stored, {} between images, {} outside known mappings; {} straight runs between records stored, {} not believed",
            b.stacks, b.records, b.stored, b.cross_image, b.unknown, b.traces, b.bad_traces
        );
    }
    for p in &e.problems {
        eprintln!("loupe: warning: {p}");
    }
}

pub fn daemon(a: DaemonArgs) -> Result<u8> {
    let cfg = sampler_config(&a.sampling)?;
    let opts = DaemonOptions {
        db: a.db.db.clone(),
        flush_every: seconds(a.flush_every, "--flush-every")?,
        stats_every: a.stats.map(|s| seconds(s, "--stats")).transpose()?,
        backend: a.sampling.backend.choice(),
        max_overhead_pct: a.max_overhead.0,
    };
    Database::create(&opts.db).with_context(|| format!("cannot use database {}", opts.db.display()))?;
    let stop = stop_flag()?;
    eprintln!("loupe: daemon {} collecting into {} (flush every {} s)", std::process::id(), opts.db.display(), a.flush_every);
    let manager = a.optimize.as_deref().map(|c| crate::optimize_manage::spawn(&opts.db, c)).transpose()?;
    let report = daemon::run_daemon(&cfg, &opts, &stop).map_err(|e| anyhow::anyhow!("{e}"));
    if let Some(m) = manager {
        crate::optimize_manage::stop(m);
    }
    let report = report?;
    eprintln!("loupe: daemon stopped: {}", serde_json::to_string(&report)?);
    Ok(0)
}

pub fn flush(a: DbArg) -> Result<u8> {
    let answer = daemon::send_command(&a.db, "flush")
        .with_context(|| format!("no loupe daemon is running on {} (cannot reach its socket)", a.db.display()))?;
    report_answer(&answer)
}

pub fn epoch(a: DbArg) -> Result<u8> {
    if daemon::socket_path(&a.db).exists() {
        if let Ok(answer) = daemon::send_command(&a.db, "epoch") {
            return report_answer(&answer);
        }
    }
    let db = Database::open(&a.db)?;
    println!("epoch {}", db.new_epoch()?);
    Ok(0)
}

fn report_answer(answer: &str) -> Result<u8> {
    match answer.strip_prefix("ok ") {
        Some(rest) => {
            println!("{rest}");
            Ok(0)
        }
        None => bail!("daemon answered: {answer}"),
    }
}

pub fn epochs(a: EpochsArgs, out: &mut dyn Write) -> Result<u8> {
    let db = Database::open(&a.db.db)?;
    if a.format == Format::Json {
        let doc = crate::epochs::json(&db)?;
        writeln!(out, "{}", serde_json::to_string_pretty(&doc)?)?;
        return Ok(0);
    }
    let current = db.current_epoch()?;
    for e in db.epochs()? {
        let (index, _) = db.index(e.id)?;
        let samples: u64 = index.entries.iter().map(|x| x.total_samples).sum();
        let mark = if e.id == current { "*" } else { " " };
        writeln!(out, "{mark}{:>6}  started {}  {:>10} samples  {} profiles", e.id, e.started_unix, samples, index.entries.len())?;
    }
    Ok(0)
}

pub fn events(out: &mut dyn Write) -> Result<u8> {
    for (e, r) in loupe_perf::probe_events() {
        let kind = if loupe_perf::is_hardware(&e) { "hardware" } else { "software" };
        match r {
            Ok(()) => writeln!(out, "{:<26} {kind:<9} available", e.name)?,
            Err(why) => writeln!(out, "{:<26} {kind:<9} unavailable: {why}", e.name)?,
        }
    }
    // Not an event: what `--lbr` needs with the hardware events' samples.
    match loupe_perf::probe_branch_stack(Lbr::User.branch_sample_type()) {
        Ok(()) => writeln!(out, "{:<26} {:<9} available (--lbr)", "branch-stack", "hardware")?,
        Err(why) => writeln!(out, "{:<26} {:<9} unavailable: {why}", "branch-stack", "hardware")?,
    }
    Ok(0)
}
