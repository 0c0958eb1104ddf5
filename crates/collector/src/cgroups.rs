//! The cgroup of each process, read from `/proc/PID/cgroup` when the
//! collector first sees it (at its fork, or its scan) and again at each
//! exec: systemd and container runtimes move a process into its cgroup
//! between fork and exec. A process gone before it could be read inherits
//! its parent's. Kept per process, like comm, so the store stays one
//! record per process (threads of a process share a cgroup under v2).

use loupe_perf::Record;
use std::collections::{BTreeMap, HashMap};

#[derive(Default)]
pub(crate) struct ProcessCgroups {
    known: HashMap<u32, String>,
    /// Set or changed since the last [`take_new`](Self::take_new).
    new: BTreeMap<u32, String>,
}

impl ProcessCgroups {
    /// Follows a side-band record: a new process, or an exec.
    pub(crate) fn see(&mut self, r: &Record) {
        match r {
            Record::Fork { pid, ppid, tid, .. } if pid == tid && pid != ppid => {
                let inherited = self.known.get(ppid).cloned();
                self.read(*pid, inherited);
            }
            Record::Comm { pid, exec: true, .. } => {
                let before = self.known.get(pid).cloned();
                self.read(*pid, before);
            }
            _ => {}
        }
    }

    /// Reads a process's cgroup now (a scan of a running process).
    pub(crate) fn scan(&mut self, pid: u32) {
        if !self.known.contains_key(&pid) {
            self.read(pid, None);
        }
    }

    fn read(&mut self, pid: u32, fallback: Option<String>) {
        let text = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).unwrap_or_default();
        let Some(path) = loupe_model::cgroup::parse_proc_cgroup(&text).or(fallback) else { return };
        if self.known.get(&pid) != Some(&path) {
            self.known.insert(pid, path.clone());
            self.new.insert(pid, path);
        }
    }

    pub(crate) fn take_new(&mut self) -> BTreeMap<u32, String> {
        std::mem::take(&mut self.new)
    }
}
