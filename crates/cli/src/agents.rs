//! `loupe agents list|status|log`, the daemon's agents thread, and Morph's
//! manager as an agent (`morph`): the runner lives in `loupe-agents`; this
//! file wires it to the daemon's flags and prints what it wrote.

use crate::flags::{AgentsArgs, AgentsCommand, AgentsLogArgs, AgentsShowArgs, DaemonAgentsArgs, Format};
use anyhow::{bail, Context, Result};
use loupe_agents::log::{self, Entry, Event, Log};
use loupe_agents::runner::{Config, Runner};
use loupe_agents::target::{AllowList, Target};
use loupe_agents::trial::Plan;
use loupe_agents::{Agent, Observation};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

pub fn run(a: AgentsArgs, out: &mut dyn Write) -> Result<u8> {
    match a.command {
        AgentsCommand::List(l) => list(l.format, out),
        AgentsCommand::Status(s) => status(&s, out),
        AgentsCommand::Log(l) => print_log(&l, out),
    }
}

fn list(format: Format, out: &mut dyn Write) -> Result<u8> {
    let scratch = std::env::temp_dir();
    let rows: Vec<serde_json::Value> = loupe_agents::KNOWN
        .iter()
        .map(|(name, what)| {
            let unavailable = loupe_agents::build(name, &scratch).ok().and_then(|a| a.unavailable());
            serde_json::json!({"name": name, "does": what, "unavailable": unavailable})
        })
        .collect();
    if format == Format::Json {
        writeln!(out, "{}", serde_json::to_string_pretty(&rows)?)?;
        return Ok(0);
    }
    for r in &rows {
        let state = r["unavailable"].as_str().map(|w| format!("unavailable here: {w}")).unwrap_or_else(|| "available".into());
        writeln!(out, "{:<10} {state}\n           {}", r["name"].as_str().unwrap_or(""), r["does"].as_str().unwrap_or(""))?;
    }
    Ok(0)
}

fn status(a: &AgentsShowArgs, out: &mut dyn Write) -> Result<u8> {
    let p = log::status_path(&a.db.db);
    let text = std::fs::read_to_string(&p)
        .with_context(|| format!("no agents status in {} (has a daemon run with --agents-enable?)", a.db.db.display()))?;
    let v: serde_json::Value = serde_json::from_str(&text).with_context(|| format!("{}: bad JSON", p.display()))?;
    if a.format == Format::Json {
        writeln!(out, "{}", serde_json::to_string_pretty(&v)?)?;
        return Ok(0);
    }
    let alive = v["daemon_pid"].as_u64().is_some_and(|pid| Path::new(&format!("/proc/{pid}")).exists());
    writeln!(out, "daemon {} ({}), updated {}", v["daemon_pid"], if alive { "running" } else { "not running" }, when(&v["updated"]))?;
    for ag in v["agents"].as_array().into_iter().flatten() {
        let state = ag["unavailable"].as_str().map(|w| format!("unavailable: {w}")).unwrap_or_else(|| "on".into());
        writeln!(out, "agent {:<10} {state}", ag["name"].as_str().unwrap_or(""))?;
    }
    writeln!(out, "allow: {}", v["allow"])?;
    writeln!(out, "metric: {}", v["metric"].as_str().unwrap_or("none (agents observe, never act)"))?;
    match v["in_trial"].as_object() {
        Some(t) => writeln!(out, "in trial: {} on pid {} ({}): {}", t["agent"], t["pid"], t["comm"], t["what"].as_str().unwrap_or(""))?,
        None => writeln!(out, "in trial: nothing")?,
    }
    for (title, key) in [("kept", "kept"), ("pending (not yet undone)", "pending")] {
        let items = v[key].as_array().cloned().unwrap_or_default();
        writeln!(out, "{title}: {}", items.len())?;
        for k in items {
            writeln!(out, "  {} pid {}: {}", k["agent"].as_str().unwrap_or(""), k["pid"], k["summary"].as_str().unwrap_or(""))?;
        }
    }
    Ok(0)
}

fn when(v: &serde_json::Value) -> String {
    v.as_f64()
        .and_then(|t| chrono::DateTime::from_timestamp(t as i64, 0))
        .map(|d| d.format("%Y-%m-%d %H:%M:%S UTC").to_string())
        .unwrap_or_else(|| "never".into())
}

fn print_log(a: &AgentsLogArgs, out: &mut dyn Write) -> Result<u8> {
    let mut entries: Vec<Entry> = log::read(&a.db.db)?
        .into_iter()
        .filter(|e| a.agent.as_ref().is_none_or(|n| &e.agent == n))
        .filter(|e| a.pid.is_none_or(|p| e.target.as_ref().is_some_and(|t| t.pid == p)))
        .collect();
    if let Some(n) = a.last {
        entries = entries.split_off(entries.len().saturating_sub(n));
    }
    if a.format == Format::Json {
        writeln!(out, "{}", serde_json::to_string_pretty(&entries)?)?;
        return Ok(0);
    }
    for e in &entries {
        let who = e.target.as_ref().map(|t| format!(" pid {} ({})", t.pid, t.comm)).unwrap_or_default();
        let event = serde_json::to_value(e.event)?.as_str().unwrap_or("").to_string();
        writeln!(out, "{} {} {event}{who}: {}", when(&serde_json::json!(e.time)), e.agent, e.summary)?;
    }
    Ok(0)
}

/// The runner's configuration from the daemon's flags (checked before the daemon starts).
pub fn config(a: &DaemonAgentsArgs) -> Result<Config> {
    let allow = AllowList::parse(&a.agents_allow)?;
    let metric = a.agents_metric.as_deref().map(loupe_agents::metric::Metric::parse).transpose()?;
    if !(a.agents_interval > 0.0 && a.agents_window > 0.0) {
        bail!("--agents-interval and --agents-window must be positive");
    }
    if !(a.agents_level > 0.0 && a.agents_level < 0.5) {
        bail!("--agents-level must lie in (0, 0.5), not {}", a.agents_level);
    }
    let plan = Plan {
        rounds: a.agents_rounds.max(1),
        windows: a.agents_windows.max(1),
        window: Duration::from_secs_f64(a.agents_window),
        level: a.agents_level,
        min_gain: a.agents_min_gain,
        ..Plan::default()
    };
    Ok(Config { allow, metric, interval: Duration::from_secs_f64(a.agents_interval), plan })
}

/// Whether the agents run Morph's manager (so the daemon does not start it as its own process too).
pub fn runs_morph(a: &DaemonAgentsArgs) -> bool {
    a.agents_enable.iter().any(|n| n == "morph")
}

/// Starts the agents on their own thread, niced: a trial sleeps through
/// seconds of windows, which the collection loop must never wait for.
/// `None` when no agent is enabled.
pub fn start(
    a: &DaemonAgentsArgs,
    db: &Path,
    optimize: Option<&Path>,
    stop: Arc<AtomicBool>,
) -> Result<Option<std::thread::JoinHandle<()>>> {
    if a.agents_enable.is_empty() {
        return Ok(None);
    }
    loupe_agents::runner::check_names(&a.agents_enable)?;
    let cfg = config(a)?;
    for n in a.agents_enable.iter().filter(|n| *n != "morph") {
        loupe_agents::build(n, db)?;
    }
    let morph = match (runs_morph(a), optimize) {
        (true, Some(c)) => Some((c.to_path_buf(), crate::optimize_manage::read_config(c)?)),
        (true, None) => bail!("agent morph runs the optimize manager: give its configuration with --optimize CONFIG"),
        (false, _) => None,
    };
    let names = a.agents_enable.clone();
    let db = db.to_path_buf();
    eprintln!("loupe: agents {names:?} on, allow-list {:?}", a.agents_allow);
    let handle = std::thread::Builder::new().name("loupe-agents".into()).spawn(move || {
        // SAFETY: setpriority on this thread's own id (Linux nices threads one by one); children inherit it.
        unsafe { libc::setpriority(libc::PRIO_PROCESS, libc::gettid() as libc::id_t, 10) };
        let mut agents: Vec<Box<dyn Agent>> = Vec::new();
        for n in &names {
            let built: Result<Box<dyn Agent>> = match (n.as_str(), &morph) {
                ("morph", Some((path, cfg))) => MorphAgent::new(&db, path, cfg.clone()).map(|m| Box::new(m) as Box<dyn Agent>),
                _ => loupe_agents::build(n, &db).map_err(Into::into),
            };
            match built {
                Ok(a) => agents.push(a),
                Err(e) => eprintln!("loupe: agent {n}: {e:#}"),
            }
        }
        let result = Runner::new(&db, cfg, agents).and_then(|mut r| r.run(&stop));
        if let Err(e) = result {
            eprintln!("loupe: ERROR: the agents stopped: {e}");
        }
    })?;
    Ok(Some(handle))
}

/// Morph's manager as an agent: each round that its own interval allows,
/// one pass of the manager; its decisions (DB/optimize/decisions.jsonl)
/// are copied into the agents' log. It picks its programs from its
/// configuration and validates and rolls back its builds itself.
struct MorphAgent {
    db: PathBuf,
    manager: loupe_optimize::manager::Manager,
    interval: f64,
    last: Option<Instant>,
    /// Bytes of the manager's decision log already copied.
    copied: u64,
}

impl MorphAgent {
    fn new(db: &Path, config: &Path, cfg: loupe_optimize::config::Config) -> Result<MorphAgent> {
        let interval = cfg.interval;
        let manager = crate::optimize_manage::manager(db, cfg, None, 0.25, 300.0)?;
        let copied = std::fs::metadata(loupe_store::layout::decisions_log(db)).map(|m| m.len()).unwrap_or(0);
        eprintln!("loupe: agent morph: the optimize manager with {} runs under the agents", config.display());
        Ok(MorphAgent { db: db.to_path_buf(), manager, interval, last: None, copied })
    }

    fn copy_decisions(&mut self, log: &Log) -> loupe_agents::Result<()> {
        let text = std::fs::read(loupe_store::layout::decisions_log(&self.db)).unwrap_or_default();
        let new = text.get(self.copied as usize..).unwrap_or_default();
        // Only whole lines: the manager may be mid-write.
        let upto = new.iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1);
        for line in String::from_utf8_lossy(&new[..upto]).lines() {
            let Ok(d) = serde_json::from_str::<serde_json::Value>(line) else { continue };
            let summary = format!(
                "{}: {}: {}",
                d["image"].as_str().unwrap_or(""),
                d["action"].as_str().unwrap_or(""),
                d["reason"].as_str().unwrap_or("")
            );
            log.write(&Entry::new("morph", Event::Decision, summary).evidence(d))?;
        }
        self.copied += upto as u64;
        Ok(())
    }
}

impl Agent for MorphAgent {
    fn name(&self) -> &'static str {
        "morph"
    }

    fn observe(&mut self, _t: &Target, _stop: &AtomicBool) -> loupe_agents::Result<Observation> {
        Ok(Observation::LeaveAlone { why: "Morph picks its programs from its own configuration".into(), evidence: serde_json::Value::Null })
    }

    fn undo(&mut self, _t: &Target, _way_back: &serde_json::Value) -> loupe_agents::Result<serde_json::Value> {
        Err(loupe_agents::Error::new(loupe_agents::ErrorKind::Revert, "Morph's installs are rolled back by `loupe optimize rollback`"))
    }

    fn own_round(&mut self, log: &Log, stop: &AtomicBool) -> Option<loupe_agents::Result<()>> {
        if self.last.is_some_and(|l| l.elapsed().as_secs_f64() < self.interval) {
            return Some(Ok(()));
        }
        self.last = Some(Instant::now());
        let ran = self.manager.run(loupe_optimize::manager::Stop { once: true, duration: None, flag: Some(stop) });
        let copied = self.copy_decisions(log);
        Some(match ran {
            Err(e) => Err(loupe_agents::Error::new(loupe_agents::ErrorKind::Apply, format!("optimize manager: {e}"))),
            Ok(()) => copied,
        })
    }
}

/// Stops the agents' thread (the daemon is stopping) and waits for it.
pub fn finish(handle: Option<std::thread::JoinHandle<()>>, stop: &AtomicBool) {
    if let Some(h) = handle {
        stop.store(true, Ordering::Relaxed);
        let _ = h.join();
    }
}
