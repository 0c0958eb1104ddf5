//! `record`, `daemon`, `flush`, `epoch`, `epochs`, `events`.

use crate::flags::{DaemonArgs, DbArg, EpochsArgs, EventsArgs, Format, Lbr, RecordArgs, SamplingArgs, ShareArg};
use anyhow::{bail, Context, Result};
use loupe_collector::daemon::{self, BackendChoice, DaemonOptions, Engine};
use loupe_collector::privilege::{self, Plan, Privileges, Scope};
use loupe_perf::{EventSpec, GatedChild, SamplerConfig, Target};
use loupe_store::Database;
use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Resolves event names, probing the machine as the recording will open
/// them (user space only when `user_only`): unknown names are errors that
/// list what exists; hardware events without a PMU fall back to cpu-clock
/// with a warning; any other failure is an error naming its cause.
fn resolve_events(names: &[String], user_only: bool) -> Result<Vec<EventSpec>> {
    let names: Vec<String> = if names.is_empty() { vec!["cpu-clock".into()] } else { names.to_vec() };
    let probed = loupe_perf::probe_events_for(user_only);
    let mut out: Vec<EventSpec> = Vec::new();
    for n in &names {
        let spec = loupe_perf::parse_event(n)?;
        // By type and config: `cycles:u` is probed as `cycles`.
        let probe = probed.iter().find(|(e, _)| (e.type_, e.config) == (spec.type_, spec.config)).map(|(_, r)| r);
        let spec = match probe {
            None | Some(Ok(())) => spec,
            Some(Err(why)) if loupe_perf::is_hardware(&spec) && why.contains("no hardware PMU") => {
                eprintln!("loupe: event {} is not available on this machine (no hardware PMU); falling back to cpu-clock", spec.name);
                let modifier = spec.name.rsplit_once(':').map_or("", |(_, m)| if m == "u" || m == "k" { m } else { "" });
                loupe_perf::parse_event(&if modifier.is_empty() { "cpu-clock".into() } else { format!("cpu-clock:{modifier}") })?
            }
            Some(Err(why)) => bail!("event {} cannot be opened: {why}", spec.name),
        };
        if !out.iter().any(|e| e.name == spec.name) {
            out.push(spec);
        }
    }
    Ok(out)
}

/// What the privileges allow a recording of `scope` (the decision `-p PID`
/// makes too: `Scope::OwnProcesses`), said once when it narrows the request.
pub(crate) fn privilege_plan(scope: Scope, s: &SamplingArgs) -> Result<Plan> {
    let plan = privilege::plan(&Privileges::current(), scope, s.backend.choice())?;
    if let Some(note) = &plan.note {
        eprintln!("loupe: {note}");
    }
    Ok(plan)
}

/// The engine's line about its backend, saying why when the privileges
/// ruled BPF out of an automatic choice.
fn backend_note(engine: &Engine, s: &SamplingArgs, plan: &Plan) -> String {
    match privilege::stream_reason(&Privileges::current()) {
        Some(why) if s.backend.choice() == BackendChoice::Auto && plan.backend == BackendChoice::Stream => why.to_string(),
        _ => engine.backend_note.clone(),
    }
}

/// A database directory this run is creating, removed again unless the
/// run [`keep`](NewDir::keep)s it: a failed run leaves nothing behind, and
/// never removes what existed before.
struct NewDir(Option<std::path::PathBuf>);

impl NewDir {
    /// Remembers the outermost missing directory on the way to `path`.
    fn before(path: &std::path::Path) -> NewDir {
        let mut top = None;
        let mut p = Some(path);
        while let Some(d) = p.filter(|d| !d.as_os_str().is_empty() && !d.exists()) {
            top = Some(d.to_path_buf());
            p = d.parent();
        }
        NewDir(top)
    }

    fn keep(mut self) {
        self.0 = None;
    }
}

impl Drop for NewDir {
    fn drop(&mut self) {
        if let Some(d) = &self.0 {
            let _ = std::fs::remove_dir_all(d);
        }
    }
}

/// Creates (or opens) the database, shared with `--group` when given; the
/// group is looked up first so a wrong name creates nothing.
fn create_db(path: &std::path::Path, share: &ShareArg) -> Result<Database> {
    let gid = share.group.as_deref().map(|g| loupe_files::group_id(g).with_context(|| format!("--group {g}"))).transpose()?;
    let db = Database::create(path).with_context(|| format!("cannot use database {}", path.display()))?;
    if let Some(gid) = gid {
        loupe_files::share(path, gid).with_context(|| format!("cannot share database {}", path.display()))?;
    }
    Ok(db)
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

fn sampler_config(s: &SamplingArgs, plan: &Plan) -> Result<SamplerConfig> {
    let branch_stack = branch_stack(s.lbr)?;
    // Branch stacks come with a hardware event's samples: cycles unless the user named events.
    let names = if branch_stack != 0 && s.events.is_empty() { vec!["cycles".to_string()] } else { s.events.clone() };
    let events = resolve_events(&names, plan.user_only)?;
    let mut cfg = SamplerConfig { events, freq_hz: s.freq, branch_stack, exclude_kernel: plan.user_only, ..SamplerConfig::default() };
    if branch_stack != 0 && !cfg.events.iter().any(loupe_perf::is_hardware) {
        bail!("--lbr records branches with the samples of a hardware event; add one, e.g. -e cycles");
    }
    if branch_stack != 0 {
        // Up to 32 records of 24 bytes make a sample ~15x larger.
        cfg.ring_pages = cfg.ring_pages.max(512);
    }
    if let Some(bytes) = s.stacks() {
        cfg.callchain = true;
        cfg.user_stack_bytes = bytes;
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
        if !a.pids.is_empty() {
            bail!("record --data profiles a command or the whole machine; -p is not supported with it");
        }
        return crate::data::record(a);
    }
    if let Some(cmd) = a.command.first() {
        if find_command(cmd).is_none() {
            eprintln!("loupe: command not found: {cmd}");
            return Ok(127);
        }
    }
    if let Some(gone) = a.pids.iter().find(|&&p| loupe_perf::has_exited(p)) {
        bail!("-p {gone}: no such process");
    }
    let flush_every = seconds(a.flush_every, "--flush-every")?;
    let duration = a.duration.map(|d| seconds(d, "--duration")).transpose()?;
    let scope = if a.command.is_empty() && a.pids.is_empty() { Scope::SystemWide } else { Scope::OwnProcesses };
    let plan = privilege_plan(scope, &a.sampling)?;
    // A bad --ship URL or server is refused before anything is created.
    let shipping = crate::fleet::start(&a.ship, &a.db.db)?;
    let created = NewDir::before(&a.db.db);
    let db = create_db(&a.db.db, &a.share)?;
    let mut cfg = sampler_config(&a.sampling, &plan)?;
    let stop = stop_flag()?;
    let mut child = match a.command.split_first() {
        Some((cmd, args)) => {
            let c = GatedChild::spawn(cmd, args)?;
            if !a.all_cpus {
                cfg.target = Target::Process { pid: c.pid };
                cfg.enable_on_exec = true;
            }
            Some(c)
        }
        None => None,
    };
    if !a.pids.is_empty() {
        cfg.target = Target::Attach { pids: a.pids.clone() };
    }
    let mut engine = Engine::new(&cfg, db, flush_every, plan.backend).map_err(|e| anyhow::anyhow!("{e}"))?;
    let counters = match (&child, a.command.first().and_then(|c| find_command(c))) {
        (Some(c), Some(exe)) if !a.count.is_empty() => {
            Some(crate::count::start(&exe, c.pid, &a.count, a.count_hits, engine.sampler.dup_fds()?)?)
        }
        _ => None,
    };
    eprintln!("loupe: backend {}", backend_note(&engine, &a.sampling, &plan));
    engine.sink = shipping.as_ref().map(|s| s.sink());
    if a.sampling.off_cpu {
        let follow: Vec<u32> = child.as_ref().map(|c| vec![c.pid as u32]).unwrap_or_else(|| a.pids.iter().map(|&p| p as u32).collect());
        engine.enable_off_cpu(&follow).map_err(|e| anyhow::anyhow!("--off-cpu: {e}"))?;
    }
    start(&mut engine, &cfg.target, &a.pids)?;
    let started = Instant::now();
    if let Some(c) = &mut child {
        c.release()?;
    }
    let mut status = 0;
    loop {
        engine.step().map_err(|e| anyhow::anyhow!("{e}"))?;
        if let Some(c) = &mut child {
            if let Some(s) = c.try_wait()? {
                status = s;
                break;
            }
        } else if stop.load(Ordering::Relaxed)
            || duration.is_some_and(|d| started.elapsed() >= d)
            || (!a.pids.is_empty() && a.pids.iter().all(|&p| loupe_perf::has_exited(p)))
        {
            break;
        }
    }
    let counted = counters.map(crate::count::Counters::stop).transpose()?;
    engine.sampler.disable()?;
    engine.flush_final().map_err(|e| anyhow::anyhow!("{e}"))?;
    if let Some(c) = counted {
        c.finish(&a.db.db)?;
    }
    created.keep();
    summarize(&engine, started.elapsed());
    if let Some(s) = shipping {
        s.finish();
    }
    Ok(status.clamp(0, 255) as u8)
}

/// Describes the processes already running that the sampler will see
/// (their mappings produce no mmap records) and enables it; a command's
/// events enable themselves at its exec.
fn start(engine: &mut Engine, target: &Target, pids: &[i32]) -> Result<()> {
    match target {
        Target::Process { .. } => return Ok(()),
        Target::Attach { .. } => {
            for &p in pids {
                engine.collector.scan_pid(p as u32);
            }
            let threads: usize = pids.iter().map(|&p| loupe_perf::threads_of(p).len()).sum();
            eprintln!("loupe: attached to {} process(es), {threads} thread(s)", pids.len());
        }
        _ => engine.collector.scan_all(),
    }
    engine.sampler.enable()?;
    if let Target::Attach { .. } = target {
        // Children started between the open and now inherited disabled events, which wrote no fork, exec or
        // mmap records: their mappings come from /proc, else their samples would find none (issue 25).
        for child in loupe_perf::descendants_of(pids) {
            engine.collector.scan_pid(child as u32);
        }
    }
    Ok(())
}

fn summarize(e: &Engine, took: Duration) {
    eprintln!("loupe: {}", e.closing_line(took));
    let (py_notes, py_stacks, py_failed) = e.collector.python_notes();
    if py_stacks > 0 {
        eprintln!("loupe: {py_stacks} stacks with Python frames ({py_failed} more not readable: changing or exiting)");
        let in_kernel = e.collector.python_stacks_read_in_kernel();
        if in_kernel > 0 {
            eprintln!("loupe: {in_kernel} of them read by the BPF program at sample time");
        }
    }
    for n in py_notes {
        eprintln!("loupe: {n}");
    }
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
            "loupe: in the kernel: {} samples, {} counted there ({} walked by unwind tables, {} of them to the depth limit); to stack copies: {} outside code with frame pointers ({} at the leaf) before the process was described to the table walker, {} where the table walk stopped ({} no table, {} expression, {} read fault), {} of processes not yet described, {} with no room",
            c.samples,
            c.counted,
            c.unwind_walked + c.unwind_depth,
            c.unwind_depth,
            c.streamed_leaf + c.streamed_chain,
            c.streamed_leaf,
            c.streamed_no_table + c.streamed_expression + c.streamed_read_fault,
            c.streamed_no_table,
            c.streamed_expression,
            c.streamed_read_fault,
            c.streamed_unknown,
            c.streamed_stackid + c.streamed_table_full
        );
    }
    if let Some(c) = e.off_cpu().map(|o| o.counters()) {
        eprintln!(
            "loupe: off-CPU: {} context switches, {} blocks counted; not counted: {} begun before recording, {} with no room (stacks missing in {})",
            c.switches,
            c.counted,
            c.no_start,
            c.start_full + c.table_full,
            c.stack_full
        );
        let walks = c.unwind_walked + c.unwind_depth + c.unwind_stopped + c.unwind_unknown;
        if walks > 0 {
            eprintln!(
                "loupe: off-CPU user chains: {} walked by unwind tables ({} of them to the depth limit); by frame pointers: {} where the table walk stopped, {} of processes not yet described",
                c.unwind_walked + c.unwind_depth,
                c.unwind_depth,
                c.unwind_stopped,
                c.unwind_unknown
            );
        }
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
    let plan = privilege_plan(Scope::SystemWide, &a.sampling)?;
    let cfg = sampler_config(&a.sampling, &plan)?;
    let opts = DaemonOptions {
        db: a.db.db.clone(),
        flush_every: seconds(a.flush_every, "--flush-every")?,
        epoch_every: (a.epoch_every != 0.0).then(|| seconds(a.epoch_every, "--epoch-every")).transpose()?,
        stats_every: a.stats.map(|s| seconds(s, "--stats")).transpose()?,
        backend: plan.backend,
        max_overhead_pct: a.max_overhead.0,
        off_cpu: a.sampling.off_cpu,
    };
    let shipping = crate::fleet::start(&a.ship, &opts.db)?;
    let created = NewDir::before(&opts.db);
    create_db(&opts.db, &a.share)?;
    let stop = stop_flag()?;
    eprintln!("loupe: daemon {} collecting into {} (flush every {} s)", std::process::id(), opts.db.display(), a.flush_every);
    let manager = a.optimize.as_deref().filter(|_| !crate::agents::runs_morph(&a.agents));
    let manager = manager.map(|c| crate::optimize_manage::spawn(&opts.db, c)).transpose()?;
    let agents = crate::agents::start(&a.agents, &opts.db, a.optimize.as_deref(), Arc::clone(&stop))?;
    let report = daemon::run_daemon_with(&cfg, &opts, &stop, shipping.as_ref().map(|s| s.sink())).map_err(|e| anyhow::anyhow!("{e}"));
    crate::agents::finish(agents, &stop);
    if let Some(s) = shipping {
        s.finish();
    }
    if let Some(m) = manager {
        crate::optimize_manage::stop(m);
    }
    let report = report?;
    created.keep();
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
        let started = crate::flags::iso_local(e.started_unix);
        writeln!(out, "{mark}{:>6}  started {started}  {:>10} samples  {} profiles", e.id, samples, index.entries.len())?;
    }
    Ok(0)
}

pub fn events(a: EventsArgs, out: &mut dyn Write) -> Result<u8> {
    let user_only = !Privileges::current().kernel_samples();
    if user_only {
        eprintln!("loupe: probing user space only: kernel samples need CAP_PERFMON or kernel.perf_event_paranoid <= 1");
    }
    let mut rows: Vec<(String, &str, Result<(), String>)> = loupe_perf::probe_events_for(user_only)
        .into_iter()
        .map(|(e, r)| {
            let kind = if loupe_perf::is_hardware(&e) { "hardware" } else { "software" };
            (e.name, kind, r)
        })
        .collect();
    // Not an event: what `--lbr` needs with the hardware events' samples.
    rows.push((
        "branch-stack".into(),
        "hardware",
        loupe_perf::probe_branch_stack(Lbr::User.branch_sample_type()).map_err(|e| e.to_string()),
    ));
    if a.format == Format::Json {
        let list: Vec<serde_json::Value> = rows
            .iter()
            .map(|(name, kind, r)| serde_json::json!({ "name": name, "kind": kind, "available": r.is_ok(), "reason": r.as_ref().err() }))
            .collect();
        writeln!(out, "{}", serde_json::to_string_pretty(&serde_json::json!({ "events": list }))?)?;
        return Ok(0);
    }
    for (name, kind, r) in rows {
        match r {
            Ok(()) if name == "branch-stack" => writeln!(out, "{name:<26} {kind:<9} available (--lbr)")?,
            Ok(()) => writeln!(out, "{name:<26} {kind:<9} available")?,
            Err(why) => writeln!(out, "{name:<26} {kind:<9} unavailable: {why}")?,
        }
    }
    Ok(0)
}
