//! The tracked processes' code mappings as the kernel reports them. A perf
//! event that never samples, opened on each root with inherit, carries every
//! executable mmap, exec and fork of the process tree in order, stamped with
//! CLOCK_MONOTONIC like the probes' events. Maps snapshots written from it
//! hold even for a process that exited before the tracker read its first
//! allocation event, when `/proc/PID/maps` is already gone.

use crate::log::Record as LogRecord;
use loupe_model::maps::{parse_exec_mappings, Mapping};
use loupe_perf::{sys, EventSpec, Mmap, Record, Sampler, SamplerConfig, Target};
use std::collections::HashMap;

/// The executable mappings of each process, replayed from perf records.
#[derive(Debug, Default)]
pub struct ExecMaps {
    procs: HashMap<u32, Vec<Mapping>>,
}

impl ExecMaps {
    /// Starts `pid` from its current maps (a root that already runs).
    pub fn seed(&mut self, pid: u32, maps_text: &str) {
        self.procs.insert(pid, parse_exec_mappings(maps_text));
    }

    /// Applies one record; the process whose mappings it changed, if any.
    pub fn apply(&mut self, r: &Record) -> Option<u32> {
        match r {
            Record::Mmap(m) => {
                insert(self.procs.entry(m.pid).or_default(), mapping(m));
                Some(m.pid)
            }
            Record::Comm { pid, exec: true, .. } => {
                // The new image's mappings follow as MMAP records.
                self.procs.insert(*pid, Vec::new());
                None
            }
            Record::Fork { pid, ppid, .. } if pid != ppid => {
                let parent = self.procs.get(ppid).cloned().unwrap_or_default();
                self.procs.insert(*pid, parent);
                Some(*pid)
            }
            _ => None,
        }
    }

    /// `pid`'s mappings in the `/proc/PID/maps` format (device and inode 0).
    pub fn text(&self, pid: u32) -> String {
        let maps = self.procs.get(&pid).map(Vec::as_slice).unwrap_or_default();
        maps.iter().map(|m| format!("{:x}-{:x} {} {:08x} 00:00 {} {}\n", m.start, m.end, m.perms, m.pgoff, m.inode, m.path)).collect()
    }
}

fn mapping(m: &Mmap) -> Mapping {
    let bit = |set: bool, c: char| if set { c } else { '-' };
    let prot = m.prot as i32;
    let perms: String = [
        bit(prot & libc::PROT_READ != 0, 'r'),
        bit(prot & libc::PROT_WRITE != 0, 'w'),
        bit(prot & libc::PROT_EXEC != 0, 'x'),
        if m.flags as i32 & libc::MAP_SHARED != 0 { 's' } else { 'p' },
    ]
    .into_iter()
    .collect();
    Mapping { start: m.addr, end: m.addr + m.len, pgoff: m.pgoff, perms, inode: 0, path: m.filename.clone(), deleted: false }
}

/// Puts `new` in `maps`, cutting what it overlaps (an mmap replaces them).
fn insert(maps: &mut Vec<Mapping>, new: Mapping) {
    let mut out = Vec::with_capacity(maps.len() + 2);
    for m in maps.drain(..) {
        if m.end <= new.start || m.start >= new.end {
            out.push(m);
            continue;
        }
        if m.start < new.start {
            out.push(Mapping { end: new.start, ..m.clone() });
        }
        if m.end > new.end {
            out.push(Mapping { start: new.end, pgoff: m.pgoff + (new.end - m.start), ..m });
        }
    }
    out.push(new);
    out.sort_by_key(|m| m.start);
    *maps = out;
}

/// The sideband events and the records read but not yet applied.
pub struct Sideband {
    samplers: Vec<Sampler>,
    pending: Vec<Record>,
    maps: ExecMaps,
}

impl Sideband {
    /// Opens and enables the events on `roots` (and, by inherit, all they start).
    pub fn open(roots: &[u32]) -> Result<Sideband, loupe_perf::Error> {
        // The software "dummy" event counts nothing and never samples: it only carries sideband records.
        let dummy = EventSpec::new("dummy", sys::PERF_TYPE_SOFTWARE, 9);
        let mut maps = ExecMaps::default();
        let mut samplers = Vec::new();
        for &pid in roots {
            let cfg = SamplerConfig {
                events: vec![dummy.clone()],
                target: Target::Process { pid: pid as i32 },
                ring_pages: 16,
                monotonic_clock: true,
                ..SamplerConfig::default()
            };
            let s = Sampler::open(&cfg)?;
            s.enable()?;
            samplers.push(s);
            // Read after enabling: a mapping made in between is in both, and replayed twice harmlessly.
            if let Ok(text) = std::fs::read_to_string(format!("/proc/{pid}/maps")) {
                maps.seed(pid, &text);
            }
        }
        Ok(Sideband { samplers, pending: Vec::new(), maps })
    }

    /// Maps snapshots for every change the kernel recorded up to `now_ns`
    /// (CLOCK_MONOTONIC, taken before this call), or all of them when
    /// `all`. A later record from another CPU cannot precede one already
    /// applied: a process's records are written in order, each before its
    /// next begins, and only records stamped before `now_ns` are applied.
    pub fn read(&mut self, now_ns: u64, all: bool) -> Vec<LogRecord> {
        for s in &mut self.samplers {
            s.drain(&mut self.pending);
        }
        self.pending.sort_by_key(|r| r.time().unwrap_or(0));
        let ready = if all { self.pending.len() } else { self.pending.partition_point(|r| r.time().unwrap_or(0) <= now_ns) };
        let mut out = Vec::new();
        for r in self.pending.drain(..ready) {
            if let Some(pid) = self.maps.apply(&r) {
                let time_ns = r.time().unwrap_or(0);
                out.push(LogRecord::Maps { pid, time_ns, text: self.maps.text(pid) });
            }
        }
        out
    }

    /// Records the rings had no room for.
    pub fn lost(&self) -> u64 {
        self.samplers.iter().map(Sampler::lost).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mmap(pid: u32, addr: u64, len: u64, pgoff: u64, path: &str) -> Record {
        Record::Mmap(Mmap {
            pid,
            tid: pid,
            addr,
            len,
            pgoff,
            prot: (libc::PROT_READ | libc::PROT_EXEC) as u32,
            flags: libc::MAP_PRIVATE as u32,
            filename: path.into(),
            build_id: None,
            time: 1,
        })
    }

    #[test]
    fn replays_exec_mmap_and_fork_into_maps_text() {
        // Checks that exec clears a process's mappings, mmaps add them in the maps format, and a fork copies the parent's.
        let mut m = ExecMaps::default();
        m.seed(7, "00400000-00401000 r-xp 00000000 08:01 5 /bin/old\n00600000-00601000 rw-p 00000000 08:01 5 /bin/old\n");
        assert_eq!(m.text(7), "400000-401000 r-xp 00000000 00:00 5 /bin/old\n");
        assert_eq!(m.apply(&Record::Comm { pid: 7, tid: 7, comm: "new".into(), exec: true, time: 1 }), None);
        assert_eq!(m.text(7), "");
        assert_eq!(m.apply(&mmap(7, 0x55000000, 0x2000, 0x1000, "/bin/new")), Some(7));
        assert_eq!(m.text(7), "55000000-55002000 r-xp 00001000 00:00 0 /bin/new\n");
        assert_eq!(m.apply(&Record::Fork { pid: 8, ppid: 7, tid: 8, ptid: 7, time: 2 }), Some(8));
        assert_eq!(m.text(8), m.text(7));
        // A new thread is no new process.
        assert_eq!(m.apply(&Record::Fork { pid: 7, ppid: 7, tid: 9, ptid: 7, time: 3 }), None);
    }

    #[test]
    fn an_mmap_over_older_mappings_cuts_them() {
        // Checks that mapping over the middle of a region leaves its two ends, the upper one with its file offset moved on.
        let mut m = ExecMaps::default();
        m.apply(&mmap(1, 0x1000, 0x4000, 0, "/lib/a.so"));
        m.apply(&mmap(1, 0x2000, 0x1000, 0, "/lib/b.so"));
        assert_eq!(
            m.text(1),
            "1000-2000 r-xp 00000000 00:00 0 /lib/a.so\n2000-3000 r-xp 00000000 00:00 0 /lib/b.so\n3000-5000 r-xp 00002000 00:00 0 /lib/a.so\n"
        );
    }
}
