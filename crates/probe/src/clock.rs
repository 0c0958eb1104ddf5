//! Threads' CPU time, read up to date at a window's edges (issue 30).
//!
//! A chained count ([`crate::chain`]) scales the stretches before the first
//! window and after the last by the thread's CPU time, and measures its rate
//! in the gaps between windows. `/proc/TID/schedstat` lags a running thread by
//! up to a scheduler tick (4 ms here: as long as a gap), and the kernel
//! refuses another process's thread CPU clock (EINVAL). A per-thread
//! task-clock counting event (`perf_event_open(pid = TID, cpu = -1)`) is read
//! through an IPI to the CPU the thread runs on, so it is current to the
//! nanosecond, and it keeps its count once the thread has exited. It counts
//! from when it is opened: the thread's CPU time before that is taken from
//! schedstat once (exact for a thread not yet running, such as a gated
//! command; a tick at most otherwise). Where perf_event_open is refused, each
//! reading falls back to schedstat and [`ThreadClocks::fallback`] says why.

use loupe_perf::sys::{self, PerfEventAttr};
use std::collections::HashMap;
use std::os::fd::OwnedFd;

/// Per thread, how its CPU time is read.
enum Clock {
    /// CPU time before the counter opened (ns) + the counter.
    Counter { base: u64, fd: OwnedFd },
    /// The counter was refused: schedstat at every reading.
    Schedstat,
}

/// CPU-time readers of some threads, opened at their first reading.
#[derive(Default)]
pub struct ThreadClocks {
    each: HashMap<u32, Clock>,
    /// Why some thread's time is read from schedstat (the first refusal), if any was.
    pub fallback: Option<String>,
}

impl ThreadClocks {
    /// Readers opened on `tids` now (before they run, where the caller can: their whole CPU time is then exact).
    pub fn open(tids: &[u32]) -> ThreadClocks {
        let mut c = ThreadClocks::default();
        tids.iter().for_each(|&t| c.watch(t));
        c
    }

    /// Opens the reader of `tid` (once).
    pub fn watch(&mut self, tid: u32) {
        if self.each.contains_key(&tid) {
            return;
        }
        // Opened before the base is read: the base may then include a little of what the counter also counts
        // (under a microsecond between the two calls), never leave a gap uncounted.
        let clock = match task_clock(tid) {
            Ok(fd) => match schedstat(tid) {
                Some(base) => Clock::Counter { base, fd },
                None => return,
            },
            Err(e) if e.raw_os_error() == Some(libc::ESRCH) => return,
            Err(e) => {
                self.fallback.get_or_insert_with(|| {
                    format!("task-clock of thread {tid} refused ({e}): CPU time from /proc/TID/schedstat, up to a tick (4 ms) late")
                });
                Clock::Schedstat
            }
        };
        self.each.insert(tid, clock);
    }

    /// The CPU time of `tid` in ns, while it lives; after it has exited, the
    /// total it reached where its counter was opened in time, else while it awaits reaping.
    pub fn read(&mut self, tid: u32) -> Option<u64> {
        self.watch(tid);
        match self.each.get(&tid)? {
            Clock::Counter { base, fd } => Some(base + loupe_perf::counting::read_count(fd)?),
            Clock::Schedstat => schedstat(tid),
        }
    }
}

/// A task-clock counting event on one thread, any CPU.
fn task_clock(tid: u32) -> std::io::Result<OwnedFd> {
    const PERF_TYPE_SOFTWARE: u32 = 1;
    const PERF_COUNT_SW_TASK_CLOCK: u64 = 1;
    let attr = PerfEventAttr {
        type_: PERF_TYPE_SOFTWARE,
        size: sys::ATTR_SIZE,
        config: PERF_COUNT_SW_TASK_CLOCK,
        // The thread's own time in and out of the kernel: what schedstat and the CPU clock count.
        ..Default::default()
    };
    sys::perf_event_open(&attr, tid as i32, -1, -1)
}

/// The CPU time of `tid` from /proc/TID/schedstat, ns (while it lives or awaits reaping).
pub fn schedstat(tid: u32) -> Option<u64> {
    std::fs::read_to_string(format!("/proc/{tid}/schedstat")).ok()?.split_whitespace().next()?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    /// This thread's CPU clock, ns.
    fn own_cpu() -> u64 {
        let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
        // SAFETY: clock_gettime writes only the timespec we pass.
        unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
        ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
    }

    #[test]
    fn a_running_threads_time_is_current_and_stays_after_it_exits() {
        // Checks ThreadClocks against the thread's own CPU clock: a thread spinning while another reads its time
        // reads what the thread itself measures at the same moment (schedstat lags by up to a tick, 4 ms), and after
        // it exits its reader keeps the total the thread measured last; within 1 ms + 2% (the clocks' switch points).
        if !crate::privileged_test() {
            return;
        }
        let (tx, rx) = std::sync::mpsc::channel();
        let (ask_tx, ask_rx) = std::sync::mpsc::channel::<()>();
        let worker = std::thread::spawn(move || {
            // SAFETY: gettid has no preconditions.
            tx.send((unsafe { libc::gettid() } as u32, own_cpu())).unwrap();
            // Blocked until its reader is open: schedstat is exact for a thread that is not running.
            ask_rx.recv().unwrap();
            let mut x = 0u64;
            // Spin; on each request send own CPU time (both sides' readings bracket each other).
            let t0 = own_cpu();
            while own_cpu() - t0 < 300_000_000 {
                x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1));
                if ask_rx.try_recv().is_ok() {
                    tx.send((0, own_cpu())).unwrap();
                }
            }
            own_cpu()
        });
        let (tid, _) = rx.recv().unwrap();
        let mut clocks = ThreadClocks::open(&[tid]);
        assert!(clocks.fallback.is_none(), "{:?}", clocks.fallback);
        ask_tx.send(()).unwrap();
        for _ in 0..5 {
            std::thread::sleep(Duration::from_millis(20));
            let before = clocks.read(tid).unwrap();
            ask_tx.send(()).unwrap();
            let Ok((_, own)) = rx.recv() else { break };
            let after = clocks.read(tid).unwrap();
            // The thread answered between the two readings: its own time lies between them, less the base's lag.
            let slack = 1_000_000 + own / 50;
            assert!(own + slack >= before && own <= after + slack, "read {before}..{after}, own {own}");
        }
        let last = worker.join().unwrap();
        let total = clocks.read(tid).unwrap();
        // The task clock starts and stops at perf's context switches, the CPU clock at the scheduler's: they part by
        // a few µs per switch (a fraction of a percent on a loaded machine), the same way at every reading.
        eprintln!("after exit: read {total}, own {last}");
        assert!(total.abs_diff(last) < 1_000_000 + last / 50, "after exit: read {total}, own {last}");
    }
}
