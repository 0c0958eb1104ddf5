//! The processes agents may act on: what /proc says of them, and the
//! configuration's allow-list. Loupe itself is never a target, whatever the
//! list says: an agent slowing the profiler would corrupt its own evidence.

use crate::error::{Error, ErrorKind, Result};
use std::path::Path;

/// One process as an agent sees it.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Target {
    pub pid: u32,
    pub comm: String,
    /// The cgroup v2 path (`0::/PATH` in /proc/PID/cgroup), "" when unknown.
    pub cgroup: String,
    /// Start time in clock ticks since boot (/proc/PID/stat field 22): with
    /// the pid, names one process for ever, so a recorded way back is never
    /// applied to a later process that reused the number.
    pub start: u64,
}

/// Field 22 (starttime) and the utime + stime ticks of a /proc/PID/stat line.
pub fn stat_fields(stat: &str) -> Option<(u64, u64)> {
    // The comm may hold spaces and parentheses: fields count from the last ')'.
    let rest = &stat[stat.rfind(')')? + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    let num = |i: usize| f.get(i).and_then(|s| s.parse::<u64>().ok());
    // rest starts at field 3 (state): utime is 14, stime 15, starttime 22.
    Some((num(19)?, num(11)? + num(12)?))
}

/// The cgroup v2 path of a /proc/PID/cgroup text.
pub fn cgroup_of(text: &str) -> String {
    text.lines().find_map(|l| l.strip_prefix("0::")).unwrap_or("").to_string()
}

impl Target {
    /// Reads `pid` from `proc` (normally /proc).
    pub fn read_in(proc: &Path, pid: u32) -> Result<Target> {
        let dir = proc.join(pid.to_string());
        let bad = |what: &str, e: std::io::Error| Error::new(ErrorKind::Process, format!("{}: {what}: {e}", dir.display()));
        let stat = std::fs::read_to_string(dir.join("stat")).map_err(|e| bad("stat", e))?;
        let (start, _) =
            stat_fields(&stat).ok_or_else(|| Error::new(ErrorKind::Process, format!("{}/stat: unexpected format", dir.display())))?;
        let comm = std::fs::read_to_string(dir.join("comm")).map_err(|e| bad("comm", e))?.trim_end().to_string();
        let cgroup = cgroup_of(&std::fs::read_to_string(dir.join("cgroup")).unwrap_or_default());
        Ok(Target { pid, comm, cgroup, start })
    }

    pub fn read(pid: u32) -> Result<Target> {
        Target::read_in(Path::new("/proc"), pid)
    }

    /// Whether the same process still runs (same pid and start time).
    pub fn alive(&self) -> bool {
        Target::read(self.pid).is_ok_and(|t| t.start == self.start)
    }

    /// The process's user + system CPU time, seconds, all its threads. Read
    /// from its CPU-time clock (nanoseconds) where the kernel lends it: the
    /// ticks of /proc/PID/stat are 10 ms, 2% of a half-second window.
    pub fn cpu_seconds(&self) -> Result<f64> {
        if let Some(s) = process_clock_seconds(self.pid) {
            return Ok(s);
        }
        let stat = std::fs::read_to_string(format!("/proc/{}/stat", self.pid))
            .map_err(|e| Error::new(ErrorKind::Process, format!("/proc/{}/stat: {e}", self.pid)))?;
        let (_, ticks) =
            stat_fields(&stat).ok_or_else(|| Error::new(ErrorKind::Process, format!("/proc/{}/stat: unexpected format", self.pid)))?;
        Ok(ticks as f64 / clock_ticks())
    }

    /// The process's threads.
    pub fn threads(&self) -> Vec<u32> {
        let mut t: Vec<u32> = std::fs::read_dir(format!("/proc/{}/task", self.pid))
            .map(|d| d.flatten().filter_map(|e| e.file_name().to_str()?.parse().ok()).collect())
            .unwrap_or_default();
        t.sort_unstable();
        t
    }
}

fn process_clock_seconds(pid: u32) -> Option<f64> {
    let mut clock: libc::clockid_t = 0;
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: both out-pointers are valid for the calls; a process that is gone gives an error, not UB.
    let ok = unsafe { libc::clock_getcpuclockid(pid as libc::pid_t, &mut clock) == 0 && libc::clock_gettime(clock, &mut ts) == 0 };
    ok.then_some(ts.tv_sec as f64 + ts.tv_nsec as f64 * 1e-9)
}

pub fn clock_ticks() -> f64 {
    // SAFETY: sysconf has no preconditions.
    let t = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if t > 0 {
        t as f64
    } else {
        100.0
    }
}

/// One allow-list entry: `comm:NAME` (or a bare NAME), `pid:N`,
/// `cgroup:PATH` (that cgroup and those below it).
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub enum Allow {
    Comm(String),
    Pid(u32),
    Cgroup(String),
}

impl Allow {
    pub fn parse(s: &str) -> Result<Allow> {
        let bad = |why: &str| Error::new(ErrorKind::Config, format!("allow-list entry `{s}`: {why}"));
        match s.split_once(':') {
            Some(("comm", n)) if !n.is_empty() => Ok(Allow::Comm(n.to_string())),
            Some(("pid", n)) => n.parse().map(Allow::Pid).map_err(|_| bad("pid:N needs a number")),
            Some(("cgroup", p)) if p.starts_with('/') => Ok(Allow::Cgroup(p.trim_end_matches('/').to_string())),
            Some(("cgroup", _)) => Err(bad("cgroup:PATH needs the path from the cgroup root, starting with /")),
            Some((k, _)) => Err(bad(&format!("unknown kind `{k}` (comm:NAME, pid:N or cgroup:PATH)"))),
            None if !s.is_empty() => Ok(Allow::Comm(s.to_string())),
            None => Err(bad("empty")),
        }
    }

    pub fn matches(&self, t: &Target) -> bool {
        match self {
            Allow::Comm(c) => &t.comm == c,
            Allow::Pid(p) => t.pid == *p,
            Allow::Cgroup(c) => t.cgroup == *c || (t.cgroup.starts_with(c.as_str()) && t.cgroup[c.len()..].starts_with('/')),
        }
    }
}

/// The allow-list: a process is touched only when an entry names it and it
/// is not Loupe.
#[derive(Clone, Debug, Default)]
pub struct AllowList {
    pub entries: Vec<Allow>,
}

impl AllowList {
    pub fn parse(items: &[String]) -> Result<AllowList> {
        Ok(AllowList { entries: items.iter().map(|s| Allow::parse(s)).collect::<Result<_>>()? })
    }

    /// Why `t` may not be touched, or `None` when it may.
    pub fn refuse(&self, t: &Target) -> Option<String> {
        // The list first: reading every process's executable link each round would cost more.
        if !self.entries.iter().any(|a| a.matches(t)) {
            return Some("not on the allow-list".into());
        }
        is_loupe(t).then(|| "Loupe itself is never acted on".into())
    }

    /// The processes under `proc` that entries name (Loupe left out).
    pub fn targets(&self) -> Vec<Target> {
        let Ok(dir) = std::fs::read_dir("/proc") else { return Vec::new() };
        let mut out: Vec<Target> = dir
            .flatten()
            .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
            .filter_map(|pid| Target::read(pid).ok())
            .filter(|t| self.refuse(t).is_none())
            .collect();
        out.sort_by_key(|t| t.pid);
        out
    }
}

/// This process, any process running the same executable, or one named
/// `loupe`.
pub fn is_loupe(t: &Target) -> bool {
    if t.pid == std::process::id() || t.comm == "loupe" {
        return true;
    }
    let exe = |pid: String| std::fs::read_link(format!("/proc/{pid}/exe")).ok();
    let own = exe("self".into());
    own.is_some() && own == exe(t.pid.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn target(pid: u32, comm: &str, cgroup: &str) -> Target {
        Target { pid, comm: comm.into(), cgroup: cgroup.into(), start: 1 }
    }

    // Fields after a comm holding spaces and parentheses: starttime and CPU ticks.
    #[test]
    fn stat_line_fields() {
        let line = "42 (a (b) c) S 1 42 42 0 -1 4194304 100 0 0 0 7 3 0 0 20 0 1 0 12345 1000 10 0";
        assert_eq!(stat_fields(line), Some((12345, 10)));
    }

    // Each entry kind matches what it names and nothing else; a cgroup covers its children only.
    #[test]
    fn allow_entries_match() {
        let t = target(7, "web", "/system.slice/web.service");
        assert!(Allow::parse("web").unwrap().matches(&t));
        assert!(Allow::parse("comm:web").unwrap().matches(&t));
        assert!(!Allow::parse("comm:we").unwrap().matches(&t));
        assert!(Allow::parse("pid:7").unwrap().matches(&t));
        assert!(!Allow::parse("pid:8").unwrap().matches(&t));
        assert!(Allow::parse("cgroup:/system.slice").unwrap().matches(&t));
        assert!(Allow::parse("cgroup:/system.slice/web.service/").unwrap().matches(&t));
        assert!(!Allow::parse("cgroup:/system.sl").unwrap().matches(&t));
        for bad in ["pid:x", "cgroup:rel", "user:root", ""] {
            assert_eq!(Allow::parse(bad).unwrap_err().kind(), ErrorKind::Config, "{bad}");
        }
    }

    // The allow-list cannot name Loupe: this test process, by pid or by a comm entry.
    #[test]
    fn loupe_is_never_allowed() {
        let me = Target::read(std::process::id()).unwrap();
        let list = AllowList::parse(&[format!("pid:{}", me.pid), format!("comm:{}", me.comm), "loupe".into()]).unwrap();
        assert!(list.refuse(&me).unwrap().contains("Loupe"));
        assert!(list.refuse(&target(1, "loupe", "")).unwrap().contains("Loupe"));
        assert!(list.targets().iter().all(|t| t.pid != me.pid));
        assert_eq!(AllowList::default().refuse(&target(1, "x", "")).as_deref(), Some("not on the allow-list"));
    }
}
