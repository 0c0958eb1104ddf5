//! The decision log: one JSON line per decision, with its evidence, in
//! `DB/agents/decisions.jsonl` (0600, appended). An action's way back is
//! written before the action, so a daemon killed mid-trial leaves behind
//! what a later one needs to undo it ([`pending`]).

use crate::error::{Error, ErrorKind, Result};
use std::io::Write;
use std::path::{Path, PathBuf};

/// The agents' directory in a database.
pub fn dir(db: &Path) -> PathBuf {
    db.join("agents")
}

pub fn path(db: &Path) -> PathBuf {
    dir(db).join("decisions.jsonl")
}

pub fn status_path(db: &Path) -> PathBuf {
    dir(db).join("status.json")
}

/// What an entry records.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Event {
    /// The runner started: agents, allow-list, metric.
    Started,
    /// An agent cannot run on this machine (and why).
    Unavailable,
    /// A process was looked at and nothing will be done (and why).
    LeftAlone,
    /// An action is about to be tried; its way back is recorded.
    Applied,
    /// The trial showed a gain: the action stays.
    Kept,
    /// The action was taken back (no gain, a regression, the daemon stopping).
    Reverted,
    /// Taking the action back failed: the process is left changed.
    RevertFailed,
    /// An action a killed daemon left pending was taken back at start.
    Recovered,
    /// The process ended while the action was in force.
    Ended,
    /// Something failed (observation, the metric); nothing is left changed.
    Error,
    /// A decision of an agent that measures by itself (Morph's manager).
    Decision,
}

impl Event {
    /// Ends an action's life in the log: nothing more to undo after it.
    fn closes(self) -> bool {
        matches!(self, Event::Kept | Event::Reverted | Event::Recovered | Event::Ended | Event::Error)
    }
}

#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Entry {
    /// Unix time, seconds.
    pub time: f64,
    pub agent: String,
    pub event: Event,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target: Option<crate::target::Target>,
    /// Ties an action's entries together (applied .. kept/reverted).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub action: Option<u64>,
    /// One sentence a person reads.
    pub summary: String,
    #[serde(default, skip_serializing_if = "serde_json::Value::is_null")]
    pub evidence: serde_json::Value,
    #[serde(default, skip_serializing_if = "serde_json::Value::is_null")]
    pub way_back: serde_json::Value,
}

impl Entry {
    pub fn new(agent: &str, event: Event, summary: impl Into<String>) -> Entry {
        Entry {
            time: now(),
            agent: agent.into(),
            event,
            target: None,
            action: None,
            summary: summary.into(),
            evidence: serde_json::Value::Null,
            way_back: serde_json::Value::Null,
        }
    }

    pub fn on(mut self, t: &crate::target::Target) -> Entry {
        self.target = Some(t.clone());
        self
    }

    pub fn action(mut self, id: u64) -> Entry {
        self.action = Some(id);
        self
    }

    pub fn evidence(mut self, v: serde_json::Value) -> Entry {
        self.evidence = v;
        self
    }
}

pub fn now() -> f64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs_f64()).unwrap_or(0.0)
}

/// The log of one database.
pub struct Log {
    path: PathBuf,
}

impl Log {
    pub fn open(db: &Path) -> Result<Log> {
        let d = dir(db);
        loupe_files::create_dir_all(&d).map_err(|e| Error::new(ErrorKind::Log, format!("cannot create {}: {e}", d.display())))?;
        Ok(Log { path: path(db) })
    }

    /// Appends one entry and syncs it: a decision not on disk did not happen.
    pub fn write(&self, e: &Entry) -> Result<()> {
        let bad = |x: &dyn std::fmt::Display| Error::new(ErrorKind::Log, format!("cannot write {}: {x}", self.path.display()));
        let mut line = serde_json::to_string(e).map_err(|x| bad(&x))?;
        line.push('\n');
        let mut f = loupe_files::append(&self.path).map_err(|x| bad(&x))?;
        f.write_all(line.as_bytes()).map_err(|x| bad(&x))?;
        f.sync_data().map_err(|x| bad(&x))
    }
}

/// Every entry of a database's log; a torn last line (a kill mid-write) is dropped.
pub fn read(db: &Path) -> Result<Vec<Entry>> {
    let p = path(db);
    let text = match std::fs::read_to_string(&p) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(Error::new(ErrorKind::Log, format!("cannot read {}: {e}", p.display()))),
    };
    Ok(text.lines().filter_map(|l| serde_json::from_str(l).ok()).collect())
}

/// Actions applied and never closed: a daemon stopped before deciding, or
/// whose revert failed.
pub fn pending(entries: &[Entry]) -> Vec<Entry> {
    let mut open: Vec<Entry> = Vec::new();
    for e in entries {
        let Some(id) = e.action else { continue };
        if e.event == Event::Applied {
            open.push(e.clone());
        } else if e.event.closes() {
            open.retain(|o| o.action != Some(id));
        }
    }
    open
}

/// Actions kept and still in force (their process has not been seen to end).
pub fn kept(entries: &[Entry]) -> Vec<Entry> {
    let mut out: Vec<Entry> = Vec::new();
    for e in entries {
        match (e.event, e.action) {
            (Event::Kept, Some(_)) => out.push(e.clone()),
            (Event::Ended | Event::Reverted, Some(id)) => out.retain(|o| o.action != Some(id)),
            _ => {}
        }
    }
    out
}

/// A fresh action id (nanoseconds since the epoch: unique within one log).
pub fn action_id() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos() as u64).unwrap_or(0)
}

/// Replaces the status file atomically (temporary name, rename).
pub fn write_status(db: &Path, status: &serde_json::Value) -> Result<()> {
    let p = status_path(db);
    let tmp = p.with_extension("json.tmp");
    let text = serde_json::to_vec_pretty(status).unwrap_or_default();
    loupe_files::write(&tmp, text)
        .and_then(|()| std::fs::rename(&tmp, &p))
        .map_err(|e| Error::new(ErrorKind::Log, format!("cannot write {}: {e}", p.display())))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(event: Event, action: Option<u64>) -> Entry {
        Entry { action, ..Entry::new("a", event, "s") }
    }

    // Applied and never closed is pending; kept, reverted or recovered is not; a failed revert stays pending.
    #[test]
    fn pending_actions() {
        let es = vec![
            entry(Event::Applied, Some(1)),
            entry(Event::Applied, Some(2)),
            entry(Event::Applied, Some(3)),
            entry(Event::Applied, Some(4)),
            entry(Event::Kept, Some(1)),
            entry(Event::Reverted, Some(2)),
            entry(Event::RevertFailed, Some(4)),
            entry(Event::LeftAlone, None),
        ];
        let p: Vec<Option<u64>> = pending(&es).iter().map(|e| e.action).collect();
        assert_eq!(p, vec![Some(3), Some(4)]);
        let k: Vec<Option<u64>> = kept(&es).iter().map(|e| e.action).collect();
        assert_eq!(k, vec![Some(1)]);
    }

    // Entries round-trip through the file, which is private; a torn last line is dropped.
    #[test]
    fn log_file_round_trip() {
        let d = tempfile::tempdir().unwrap();
        let log = Log::open(d.path()).unwrap();
        log.write(&entry(Event::Applied, Some(7)).evidence(serde_json::json!({"pages": 3}))).unwrap();
        log.write(&entry(Event::Kept, Some(7))).unwrap();
        std::fs::OpenOptions::new().append(true).open(path(d.path())).unwrap().write_all(b"{\"time\": 1, \"ag").unwrap();
        let es = read(d.path()).unwrap();
        assert_eq!(es.len(), 2);
        assert_eq!(es[0].evidence["pages"], 3);
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(std::fs::metadata(path(d.path())).unwrap().permissions().mode() & 0o777, 0o600);
    }
}
