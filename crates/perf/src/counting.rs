//! Counting (not sampling) events on a set of threads: the large-page
//! agent's dTLB misses per instruction. Hardware events need a PMU; where
//! there is none the open fails, and the caller says so and falls back.

use crate::events::{no_pmu, parse_event, EventSpec};
use crate::sys::{self, PerfEventAttr};
use std::os::fd::{AsRawFd, OwnedFd};

/// One event counted on each of some threads, summed.
pub struct ThreadCounter {
    pub event: EventSpec,
    fds: Vec<OwnedFd>,
}

/// Why an event cannot be counted here, in words for a log.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Unavailable(pub String);

impl ThreadCounter {
    /// Counts `event` (a perf name) on each of `tids` from now on. Threads
    /// that ended meanwhile are left out; an event the machine cannot count
    /// is `Unavailable` with the reason.
    pub fn open(event: &str, tids: &[u32]) -> Result<ThreadCounter, Unavailable> {
        let e = parse_event(event).map_err(|err| Unavailable(err.to_string()))?;
        let attr = PerfEventAttr { type_: e.type_, size: sys::ATTR_SIZE, config: e.config, ..Default::default() };
        let mut fds = Vec::new();
        for &tid in tids {
            match sys::perf_event_open(&attr, tid as i32, -1, -1) {
                Ok(fd) => fds.push(fd),
                Err(err) if err.raw_os_error() == Some(libc::ESRCH) => {}
                Err(err) => return Err(Unavailable(why(&e, &err))),
            }
        }
        if fds.is_empty() {
            return Err(Unavailable("no thread left to count".into()));
        }
        Ok(ThreadCounter { event: e, fds })
    }

    /// The sum over the threads so far.
    pub fn read(&self) -> u64 {
        self.fds.iter().filter_map(read_count).sum()
    }
}

fn why(e: &EventSpec, err: &std::io::Error) -> String {
    if no_pmu(e, err) {
        format!("{} cannot be counted: no hardware PMU on this machine", e.name)
    } else {
        format!("{} cannot be counted: {err}", e.name)
    }
}

/// The value of a counting event opened without a read format (one u64).
pub fn read_count(fd: &OwnedFd) -> Option<u64> {
    let mut v = 0u64;
    // SAFETY: read(2) of 8 bytes into a live u64; a counting perf fd without read_format yields one u64.
    let n = unsafe { libc::read(fd.as_raw_fd(), &mut v as *mut u64 as *mut libc::c_void, 8) };
    (n == 8).then_some(v)
}

/// Misses per thousand instructions; None without instructions.
pub fn per_kilo(misses: u64, instructions: u64) -> Option<f64> {
    (instructions > 0).then(|| misses as f64 * 1000.0 / instructions as f64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn software_events_count_this_thread_and_missing_hardware_says_why() {
        // Checks: task-clock counted on this thread grows with work; a hardware event either counts or names its cause.
        // SAFETY: gettid has no preconditions.
        let me = unsafe { libc::gettid() } as u32;
        let c = match ThreadCounter::open("task-clock", &[me]) {
            Ok(c) => c,
            Err(Unavailable(why)) => {
                eprintln!("skipping: {why}");
                return;
            }
        };
        // 30 ms of this thread's own CPU time (its CPU clock: a loaded machine gives it less wall time).
        let cpu_ns = || {
            let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
            // SAFETY: a valid out-pointer for the call.
            unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
            ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
        };
        let (start, mut x) = (cpu_ns(), 0u64);
        while cpu_ns() - start < 30_000_000 {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1);
        }
        std::hint::black_box(x);
        assert!(c.read() >= 25_000_000, "task-clock {} ns after 30 ms of this thread's CPU time", c.read());
        match ThreadCounter::open("dTLB-load-misses", &[me]) {
            Ok(d) => drop(d.read()),
            Err(Unavailable(why)) => assert!(why.starts_with("dTLB-load-misses cannot be counted: "), "{why}"),
        }
    }

    #[test]
    fn per_kilo_instructions() {
        // Checks the ratio and that no instructions give no figure.
        assert_eq!(per_kilo(5, 1000), Some(5.0));
        assert_eq!(per_kilo(3, 0), None);
    }
}
