//! Per-process image maps: which image is loaded where, kept current from
//! the kernel's mmap/comm/fork/exit records (DCPI §4.3.2).
//!
//! Pure bookkeeping: image identities arrive already resolved (as indices
//! into the collector's image table), so this module is testable on literal
//! record sequences.

use foldhash::HashMap;
use std::collections::BTreeMap;

/// One executable mapping: `[start, end)` maps file offset `pgoff` of `image`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Mapping {
    pub start: u64,
    pub end: u64,
    pub pgoff: u64,
    pub image: u32,
}

impl Mapping {
    /// The image offset of runtime address `ip` inside this mapping.
    pub fn offset_of(&self, ip: u64) -> u64 {
        ip - self.start + self.pgoff
    }
}

#[derive(Clone, Debug, Default)]
pub struct Process {
    pub comm: u32,
    maps: BTreeMap<u64, Mapping>,
    /// Drain number at which the process exited; reaped a few drains later so
    /// samples drained after the exit record still resolve.
    exited_at: Option<u64>,
}

impl Process {
    pub fn lookup(&self, ip: u64) -> Option<&Mapping> {
        let (_, m) = self.maps.range(..=ip).next_back()?;
        (ip < m.end).then_some(m)
    }

    /// Inserts a mapping, cutting away whatever it overlaps (as mmap does).
    pub fn map(&mut self, new: Mapping) {
        let overlapping: Vec<u64> = self.maps.range(..new.end).rev().take_while(|(_, m)| m.end > new.start).map(|(s, _)| *s).collect();
        for s in overlapping {
            let old = self.maps.remove(&s).expect("key just listed");
            if old.start < new.start {
                self.maps.insert(old.start, Mapping { end: new.start, ..old });
            }
            if old.end > new.end {
                let cut = new.end - old.start;
                self.maps.insert(new.end, Mapping { start: new.end, pgoff: old.pgoff + cut, ..old });
            }
        }
        self.maps.insert(new.start, new);
    }

    pub fn mappings(&self) -> impl Iterator<Item = &Mapping> {
        self.maps.values()
    }
}

/// All processes the daemon knows about.
#[derive(Default)]
pub struct Processes {
    procs: HashMap<u32, Process>,
    reaped: u64,
}

/// How many drains an exited process is kept for late samples.
const REAP_AFTER_DRAINS: u64 = 2;

impl Processes {
    pub fn get(&self, pid: u32) -> Option<&Process> {
        self.procs.get(&pid)
    }

    pub fn get_or_insert(&mut self, pid: u32) -> &mut Process {
        self.procs.entry(pid).or_default()
    }

    pub fn insert(&mut self, pid: u32, p: Process) {
        self.procs.insert(pid, p);
    }

    pub fn len(&self) -> usize {
        self.procs.len()
    }

    pub fn is_empty(&self) -> bool {
        self.procs.is_empty()
    }

    pub fn reaped(&self) -> u64 {
        self.reaped
    }

    /// A new process inherits its parent's address space and name; a new
    /// thread (pid == ppid) changes nothing.
    pub fn fork(&mut self, pid: u32, ppid: u32) {
        if pid == ppid {
            return;
        }
        let child = match self.procs.get(&ppid) {
            Some(parent) => Process { comm: parent.comm, maps: parent.maps.clone(), exited_at: None },
            None => Process::default(),
        };
        self.procs.insert(pid, child);
    }

    /// A name change; on exec the old address space is gone too (the kernel
    /// reports the exec's comm before the new image's mmaps).
    pub fn comm(&mut self, pid: u32, comm: u32, exec: bool) {
        let p = self.get_or_insert(pid);
        p.comm = comm;
        if exec {
            p.maps.clear();
        }
    }

    pub fn exit(&mut self, pid: u32, tid: u32, drain: u64) {
        if pid != tid {
            return;
        }
        if let Some(p) = self.procs.get_mut(&pid) {
            p.exited_at.get_or_insert(drain);
        }
    }

    /// Drops processes that exited long enough ago; keeps memory bounded
    /// under process churn.
    pub fn reap(&mut self, drain: u64) {
        let before = self.procs.len();
        self.procs.retain(|_, p| p.exited_at.is_none_or(|d| drain < d + REAP_AFTER_DRAINS));
        self.reaped += (before - self.procs.len()) as u64;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(start: u64, end: u64, pgoff: u64, image: u32) -> Mapping {
        Mapping { start, end, pgoff, image }
    }

    #[test]
    fn lookup_converts_to_file_offset() {
        // Checks that an address resolves to pgoff + distance from the mapping start.
        let mut p = Process::default();
        p.map(m(0x1000, 0x3000, 0x2000, 7));
        let hit = p.lookup(0x1800).unwrap();
        assert_eq!((hit.image, hit.offset_of(0x1800)), (7, 0x2800));
        assert!(p.lookup(0x3000).is_none());
        assert!(p.lookup(0xfff).is_none());
    }

    #[test]
    fn new_mapping_splits_what_it_overlaps() {
        // Checks mmap-over semantics: the old mapping keeps its head and tail with adjusted pgoff.
        let mut p = Process::default();
        p.map(m(0x1000, 0x5000, 0, 1));
        p.map(m(0x2000, 0x3000, 0, 2));
        assert_eq!(p.lookup(0x1500).unwrap().image, 1);
        assert_eq!(p.lookup(0x2500).unwrap().image, 2);
        let tail = p.lookup(0x3500).unwrap();
        assert_eq!((tail.image, tail.offset_of(0x3500)), (1, 0x2500));
        assert_eq!(p.mappings().count(), 3);
    }

    #[test]
    fn fork_copies_and_exec_clears() {
        // Checks that a child sees its parent's maps until it execs, and threads are ignored.
        let mut ps = Processes::default();
        ps.get_or_insert(10).map(m(0x1000, 0x2000, 0, 1));
        ps.fork(11, 10);
        ps.fork(10, 10);
        assert_eq!(ps.get(11).unwrap().lookup(0x1100).unwrap().image, 1);
        ps.comm(11, 5, true);
        assert!(ps.get(11).unwrap().lookup(0x1100).is_none());
        assert_eq!(ps.get(11).unwrap().comm, 5);
        assert!(ps.get(10).unwrap().lookup(0x1100).is_some());
    }

    #[test]
    fn exited_processes_survive_two_drains_then_go() {
        // Checks that late samples still resolve right after exit, and memory is reclaimed after.
        let mut ps = Processes::default();
        ps.get_or_insert(10);
        ps.exit(10, 11, 5);
        ps.reap(100);
        assert!(ps.get(10).is_some(), "thread exit must not end the process");
        ps.exit(10, 10, 5);
        ps.reap(6);
        assert!(ps.get(10).is_some());
        ps.reap(7);
        assert!(ps.get(10).is_none());
        assert_eq!(ps.reaped(), 1);
    }
}
