//! Per-interval counters of a traced process (PEM's hardware/OS frequency
//! strips): counting perf events opened on the process with `inherit`, read
//! by the recorder every interval and logged as `HW::Counters::Interval`
//! records into the same buffer, on the same CLOCK_MONOTONIC clock as the
//! application's events. Hardware counters are used where the PMU has them;
//! the software ones (page faults, context switches, migrations, task-clock)
//! always are.

use loupe_perf::sys::{self, PerfEventAttr};
use std::os::fd::OwnedFd;

/// Counters tried, in trace order; those the machine lacks are left out.
pub const WANTED: &[&str] =
    &["page-faults", "context-switches", "cpu-migrations", "task-clock", "instructions", "cycles", "cache-misses", "dTLB-load-misses"];

/// PERF_TYPE_HW_CACHE, data TLB, read, miss (perf's dTLB-load-misses).
const DTLB_LOAD_MISSES: (u32, u64) = (3, 3 | (1 << 16));

/// Open counters on one process and its future children.
pub struct Counters {
    fds: Vec<(String, OwnedFd)>,
    last: Vec<u64>,
}

impl Counters {
    /// Opens every available counter of [`WANTED`] on `pid`, enabled when it
    /// execs. Returns the counters and, for each one left out, why.
    pub fn open(pid: i32) -> (Counters, Vec<String>) {
        let mut fds = Vec::new();
        let mut skipped = Vec::new();
        for name in WANTED {
            let (type_, config) = match *name {
                "dTLB-load-misses" => DTLB_LOAD_MISSES,
                _ => loupe_perf::parse_event(name).map(|e| (e.type_, e.config)).expect("known event"),
            };
            let attr = PerfEventAttr {
                type_,
                size: sys::ATTR_SIZE,
                config,
                flags: sys::flag::DISABLED | sys::flag::INHERIT | sys::flag::ENABLE_ON_EXEC,
                ..Default::default()
            };
            match sys::perf_event_open(&attr, pid, -1, -1) {
                Ok(fd) => fds.push((name.to_string(), fd)),
                Err(err) => skipped.push(format!("{name}: {err}")),
            }
        }
        let last = vec![0; fds.len()];
        (Counters { fds, last }, skipped)
    }

    pub fn names(&self) -> Vec<String> {
        self.fds.iter().map(|(n, _)| n.clone()).collect()
    }

    /// Counts since the previous call.
    pub fn deltas(&mut self) -> Vec<u64> {
        let mut out = Vec::with_capacity(self.fds.len());
        for (i, (_, fd)) in self.fds.iter().enumerate() {
            let v = loupe_perf::counting::read_count(fd).unwrap_or(self.last[i]);
            out.push(v.saturating_sub(self.last[i]));
            self.last[i] = v;
        }
        out
    }
}
