//! The loop the daemon runs: undo what a killed daemon left pending, then
//! every interval look at each allowed process with each enabled agent,
//! try what they propose, keep or revert, log it all.

use crate::error::{Error, ErrorKind, Result};
use crate::log::{self, Entry, Event, Log};
use crate::metric::Metric;
use crate::target::{AllowList, Target};
use crate::trial::{self, Plan};
use crate::{Agent, Observation};
use serde_json::json;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// The `[agents]` section of the daemon's configuration.
#[derive(Clone, Debug)]
pub struct Config {
    pub allow: AllowList,
    /// How trials measure; without one, agents observe and log but never act.
    pub metric: Option<Metric>,
    /// Time between rounds.
    pub interval: Duration,
    pub plan: Plan,
}

/// (agent, pid, start): one agent's history with one process.
type Key = (String, u32, u64);

pub struct Runner {
    db: PathBuf,
    cfg: Config,
    agents: Vec<Box<dyn Agent>>,
    log: Log,
    /// Processes each agent has decided on (tried, or left alone with this reason).
    seen: BTreeMap<Key, String>,
    tried: BTreeSet<Key>,
    /// The action in a trial now, for the status file.
    current: Option<serde_json::Value>,
    started: f64,
}

impl Runner {
    pub fn new(db: &Path, cfg: Config, agents: Vec<Box<dyn Agent>>) -> Result<Runner> {
        let log = Log::open(db)?;
        Ok(Runner {
            db: db.to_path_buf(),
            cfg,
            agents,
            log,
            seen: BTreeMap::new(),
            tried: BTreeSet::new(),
            current: None,
            started: log::now(),
        })
    }

    /// Runs until `stop`: recovery, then a round every interval.
    pub fn run(&mut self, stop: &AtomicBool) -> Result<()> {
        self.start()?;
        while !stop.load(Ordering::Relaxed) {
            self.round(stop)?;
            let next = Instant::now() + self.cfg.interval;
            while Instant::now() < next && !stop.load(Ordering::Relaxed) {
                std::thread::sleep(Duration::from_millis(100));
            }
        }
        self.write_status()
    }

    /// Logs the configuration and what cannot run here, and undoes pending actions.
    pub fn start(&mut self) -> Result<()> {
        let names: Vec<&str> = self.agents.iter().map(|a| a.name()).collect();
        let allow: Vec<String> = self.cfg.allow.entries.iter().map(|a| format!("{a:?}")).collect();
        let metric = self.cfg.metric.as_ref().map(|m| m.describe());
        let summary = match (&self.cfg.metric, self.cfg.allow.entries.is_empty()) {
            (_, true) => format!("agents {names:?} started with an empty allow-list: no process will be touched"),
            (None, false) => format!("agents {names:?} started without a metric: they observe and log, never act"),
            (Some(_), false) => format!("agents {names:?} started"),
        };
        self.log.write(&Entry::new("runner", Event::Started, summary).evidence(json!({"agents": names, "allow": allow,
            "metric": metric, "plan": self.cfg.plan, "interval_s": self.cfg.interval.as_secs_f64(), "daemon_pid": std::process::id()})))?;
        for a in &self.agents {
            if let Some(why) = a.unavailable() {
                eprintln!("loupe: agent {}: unavailable: {why}", a.name());
                self.log.write(&Entry::new(a.name(), Event::Unavailable, why))?;
            }
        }
        self.recover()?;
        self.write_status()
    }

    /// Undoes every action the log shows applied and never closed.
    pub fn recover(&mut self) -> Result<()> {
        for p in log::pending(&log::read(&self.db)?) {
            let (Some(t), Some(id)) = (p.target.clone(), p.action) else { continue };
            if !t.alive() {
                self.log.write(
                    &Entry::new(&p.agent, Event::Ended, "the process ended before its pending action was undone").on(&t).action(id),
                )?;
                continue;
            }
            let Some(agent) = self.agents.iter_mut().find(|a| a.name() == p.agent) else {
                let why =
                    format!("action {id} of agent {} is pending on process {} but that agent is not enabled: not undone", p.agent, t.pid);
                eprintln!("loupe: warning: {why}");
                continue;
            };
            match agent.undo(&t, &p.way_back) {
                Ok(done) => self.log.write(
                    &Entry::new(&p.agent, Event::Recovered, "undone at start: a previous daemon stopped before deciding")
                        .on(&t)
                        .action(id)
                        .evidence(json!({"undo": done})),
                )?,
                Err(e) => self.revert_failed(&p.agent, &t, id, &e)?,
            }
        }
        Ok(())
    }

    /// One look at every allowed process with every agent.
    pub fn round(&mut self, stop: &AtomicBool) -> Result<()> {
        self.note_ended()?;
        let targets = self.cfg.allow.targets();
        for i in 0..self.agents.len() {
            if stop.load(Ordering::Relaxed) {
                break;
            }
            if let Some(r) = self.agents[i].own_round(&self.log, stop) {
                if let Err(e) = r {
                    let name = self.agents[i].name();
                    self.log.write(&Entry::new(name, Event::Error, format!("round failed: {e}")))?;
                }
                continue;
            }
            if self.agents[i].unavailable().is_some() {
                continue;
            }
            for t in &targets {
                if stop.load(Ordering::Relaxed) {
                    break;
                }
                self.consider(i, t, stop)?;
            }
        }
        self.write_status()
    }

    fn consider(&mut self, i: usize, t: &Target, stop: &AtomicBool) -> Result<()> {
        let name = self.agents[i].name();
        let key = (name.to_string(), t.pid, t.start);
        if self.tried.contains(&key) {
            return Ok(());
        }
        let obs = match self.agents[i].observe(t, stop) {
            Ok(o) => o,
            Err(e) => {
                let s = format!("observation failed: {e}");
                if self.seen.get(&key) != Some(&s) {
                    self.log.write(&Entry::new(name, Event::Error, s.clone()).on(t))?;
                    self.seen.insert(key, s);
                }
                return Ok(());
            }
        };
        match obs {
            Observation::LeaveAlone { why, evidence } => {
                // Logged when first seen and when the reason's kind changes, not every round.
                let kind: String = why.split(':').next().unwrap_or("").to_string();
                if self.seen.get(&key) != Some(&kind) {
                    self.log.write(&Entry::new(name, Event::LeftAlone, why).on(t).evidence(evidence))?;
                    self.seen.insert(key, kind);
                }
                Ok(())
            }
            Observation::Propose(p) => {
                self.tried.insert(key);
                let Some(metric) = self.cfg.metric.clone() else {
                    let s = format!("would {}; not tried: no metric is configured (agents-metric)", p.what);
                    return self.log.write(&Entry::new(name, Event::LeftAlone, s).on(t).evidence(p.evidence));
                };
                self.trial(i, t, p, &metric, stop)
            }
        }
    }

    fn trial(&mut self, i: usize, t: &Target, mut p: crate::Proposal, metric: &Metric, stop: &AtomicBool) -> Result<()> {
        let name = self.agents[i].name();
        let id = log::action_id();
        let applied = Entry { way_back: p.action.way_back(), ..Entry::new(name, Event::Applied, p.what.clone()) };
        self.log.write(&applied.on(t).action(id).evidence(p.evidence.clone()))?;
        self.current = Some(json!({"agent": name, "action": id, "pid": t.pid, "comm": t.comm, "what": p.what, "since": log::now()}));
        self.write_status()?;
        let mut reports = Vec::new();
        let mut state = false;
        let plan = match self.agents[i].before_after() {
            true => Plan { rounds: 1, windows: self.cfg.plan.rounds * self.cfg.plan.windows, ..self.cfg.plan.clone() },
            false => self.cfg.plan.clone(),
        };
        let ran = trial::run(
            &plan,
            metric,
            t,
            &mut |on| {
                let r = if on { p.action.apply() } else { p.action.revert() }?;
                state = on;
                reports.push(json!({"on": on, "result": r}));
                Ok(())
            },
            stop,
        );
        self.current = None;
        let windows = match ran {
            Ok(w) => w,
            Err(e) => return self.abandon(name, t, id, &mut *p.action, state, &e, reports),
        };
        let v = trial::judge(&windows, metric.higher_is_better(), self.cfg.plan.level, self.cfg.plan.min_gain);
        let evidence = json!({"metric": metric.describe(), "verdict": v, "windows": windows, "switches": reports});
        let gain = format!(
            "median {:+.1}% ({:.0}% interval {:+.1}% .. {:+.1}%), {} of {} window pairs better, p = {:.3}",
            (v.median_ratio - 1.0) * 100.0,
            v.ci_level * 100.0,
            (v.ci.0 - 1.0) * 100.0,
            (v.ci.1 - 1.0) * 100.0,
            v.better,
            v.pairs,
            v.p_better
        );
        if v.outcome.keep() {
            if !state {
                if let Err(e) = p.action.apply() {
                    return self.abandon(name, t, id, &mut *p.action, false, &e, reports);
                }
            }
            return self.log.write(&Entry::new(name, Event::Kept, format!("kept: {gain}")).on(t).action(id).evidence(evidence));
        }
        let why = match v.outcome {
            trial::Outcome::Worse => format!("reverted: a regression, {gain}; p(worse) = {:.3}", v.p_worse),
            _ => format!("reverted: no significant gain of at least {:.0}%, {gain}", self.cfg.plan.min_gain * 100.0),
        };
        match if state { p.action.revert().map(Some) } else { Ok(None) } {
            Ok(undo) => {
                let mut evidence = evidence;
                evidence["undo"] = json!(undo);
                self.log.write(&Entry::new(name, Event::Reverted, why).on(t).action(id).evidence(evidence))
            }
            Err(e) => self.revert_failed(name, t, id, &e),
        }
    }

    /// A trial that could not finish: take the action back if it is in force.
    #[allow(clippy::too_many_arguments)]
    fn abandon(
        &mut self,
        name: &str,
        t: &Target,
        id: u64,
        action: &mut dyn crate::Action,
        on: bool,
        e: &Error,
        reports: Vec<serde_json::Value>,
    ) -> Result<()> {
        if !t.alive() {
            return self.log.write(&Entry::new(name, Event::Ended, format!("the process ended during the trial ({e})")).on(t).action(id));
        }
        let undo = if on { action.revert() } else { Ok(serde_json::Value::Null) };
        match undo {
            Ok(u) => self.log.write(
                &Entry::new(name, Event::Reverted, format!("reverted: the trial stopped: {e}"))
                    .on(t)
                    .action(id)
                    .evidence(json!({"switches": reports, "undo": u})),
            ),
            Err(re) => self.revert_failed(name, t, id, &re),
        }
    }

    /// Loud: the process stays changed and a person must know.
    fn revert_failed(&mut self, name: &str, t: &Target, id: u64, e: &Error) -> Result<()> {
        eprintln!(
            "loupe: ERROR: agent {name} could not revert action {id} on process {} ({}): {e}; the process is left changed",
            t.pid, t.comm
        );
        self.log.write(&Entry::new(name, Event::RevertFailed, format!("REVERT FAILED, the process is left changed: {e}")).on(t).action(id))
    }

    /// Kept actions whose process ended are closed.
    fn note_ended(&mut self) -> Result<()> {
        for k in log::kept(&log::read(&self.db)?) {
            if let (Some(t), Some(id)) = (&k.target, k.action) {
                if !t.alive() {
                    self.log
                        .write(&Entry::new(&k.agent, Event::Ended, "the process ended; its kept action ended with it").on(t).action(id))?;
                }
            }
        }
        Ok(())
    }

    fn write_status(&self) -> Result<()> {
        let entries = log::read(&self.db)?;
        let kept: Vec<serde_json::Value> = log::kept(&entries)
            .iter()
            .map(|e| {
                json!({"agent": e.agent, "action": e.action, "pid": e.target.as_ref().map(|t| t.pid),
                "comm": e.target.as_ref().map(|t| t.comm.clone()), "summary": e.summary, "since": e.time})
            })
            .collect();
        let current = self.current.as_ref().and_then(|c| c["action"].as_u64());
        let pending: Vec<serde_json::Value> = log::pending(&entries)
            .iter()
            .filter(|e| e.action != current)
            .map(|e| json!({"agent": e.agent, "action": e.action, "pid": e.target.as_ref().map(|t| t.pid), "summary": e.summary}))
            .collect();
        let status = json!({
            "daemon_pid": std::process::id(),
            "started": self.started,
            "updated": log::now(),
            "agents": self.agents.iter().map(|a| json!({"name": a.name(), "unavailable": a.unavailable()})).collect::<Vec<_>>(),
            "allow": self.cfg.allow.entries.iter().map(|a| format!("{a:?}")).collect::<Vec<_>>(),
            "metric": self.cfg.metric.as_ref().map(|m| m.describe()),
            "in_trial": self.current,
            "kept": kept,
            "pending": pending,
        });
        log::write_status(&self.db, &status)
    }
}

/// Refuses a configuration that could never act as meant.
pub fn check_names(names: &[String]) -> Result<()> {
    let mut seen = BTreeSet::new();
    for n in names {
        if !seen.insert(n) {
            return Err(Error::new(ErrorKind::Config, format!("agent `{n}` is enabled twice")));
        }
    }
    Ok(())
}
