//! Hardware data breakpoints through perf_event_open (PERF_TYPE_BREAKPOINT,
//! the debug registers): one event per CPU and watched range, every access
//! a sample (period 1) with the instruction pointer, thread, CPU and
//! CLOCK_MONOTONIC time. Like DProf, a range is watched on every CPU at
//! once, so threads created later are covered too; samples of other
//! processes that touch the same virtual address are the caller's to drop.
//!
//! x86 data breakpoints are traps: the reported IP is the instruction
//! *after* the access (same function except in rare tail positions).

use loupe_perf::ring::Ring;
use loupe_perf::sys::{self, PerfEventAttr};
use loupe_perf::{Format, Layout};
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};

pub const PERF_TYPE_BREAKPOINT: u32 = 5;
/// x86 has no read-only data breakpoint: reads are watched as read/write.
pub const HW_BREAKPOINT_W: u32 = 2;
pub const HW_BREAKPOINT_RW: u32 = 3;
const FLAG_EXCLUDE_KERNEL: u64 = 1 << 5;
const FLAG_EXCLUDE_HV: u64 = 1 << 6;
const FLAG_USE_CLOCKID: u64 = 1 << 25;
/// PERF_EVENT_IOC_MODIFY_ATTRIBUTES, `_IOW('$', 11, __u64 *)`: breakpoints only.
const IOC_MODIFY_ATTRIBUTES: libc::c_ulong = 0x4008_240b;
const SAMPLE_TYPE: u64 = sys::SAMPLE_IP | sys::SAMPLE_TID | sys::SAMPLE_TIME | sys::SAMPLE_CPU;

/// One access to a watched range.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Hit {
    pub ip: u64,
    pub pid: u32,
    pub tid: u32,
    pub time_ns: u64,
    pub cpu: u32,
}

/// The attribute of a breakpoint on `len` bytes (1, 2, 4 or 8, aligned) at `addr`.
pub fn attr(addr: u64, len: u64, bp_type: u32) -> PerfEventAttr {
    PerfEventAttr {
        type_: PERF_TYPE_BREAKPOINT,
        size: sys::ATTR_SIZE,
        sample_period_or_freq: 1,
        sample_type: SAMPLE_TYPE,
        flags: FLAG_EXCLUDE_KERNEL | FLAG_EXCLUDE_HV | FLAG_USE_CLOCKID | sys::flag::DISABLED,
        wakeup_events_or_watermark: 1,
        bp_type,
        config1: addr,
        config2: len,
        clockid: libc::CLOCK_MONOTONIC,
        ..Default::default()
    }
}

/// How every breakpoint's samples are laid out.
const LAYOUT: Layout = Layout::new(Format::new(SAMPLE_TYPE));

/// The hit of a PERF_RECORD_SAMPLE of `SAMPLE_TYPE` (whole record, header included).
pub fn parse_sample(rec: &[u8]) -> Option<Hit> {
    let s = loupe_perf::parse_sample(&LAYOUT, rec).ok()?;
    Some(Hit { ip: s.ip?, pid: s.pid?, tid: s.tid?, time_ns: s.time?, cpu: s.cpu? })
}

/// A breakpoint event on `cpu`; a CPU whose debug registers are all taken
/// (by other breakpoints: another Loupe watching or counting, a debugger)
/// answers ENOSPC, which says nothing to a user by itself.
fn open_on(a: &PerfEventAttr, cpu: u32) -> io::Result<OwnedFd> {
    sys::perf_event_open(a, -1, cpu as i32, -1).map_err(|e| match e.raw_os_error() {
        Some(libc::ENOSPC) => io::Error::other(format!(
            "no free hardware breakpoint on CPU {cpu}: its four debug registers are held by other breakpoints \
             (another `loupe` watching or counting, a debugger); try again when they end"
        )),
        _ => e,
    })
}

/// One watched range on every CPU.
pub struct Watch {
    events: Vec<(OwnedFd, Ring)>,
    pub addr: u64,
    pub len: u64,
}

impl Watch {
    /// Opens, maps and enables the breakpoint on each CPU of `cpus`.
    pub fn open(addr: u64, len: u64, bp_type: u32, cpus: &[u32]) -> io::Result<Watch> {
        let a = attr(addr, len, bp_type);
        let mut events = Vec::with_capacity(cpus.len());
        for &cpu in cpus {
            let fd = open_on(&a, cpu)?;
            let ring = Ring::map(fd.as_raw_fd(), 16)?;
            events.push((fd, ring));
        }
        for (fd, _) in &events {
            sys::ioctl(fd.as_raw_fd(), sys::IOC_ENABLE, 0)?;
        }
        Ok(Watch { events, addr, len })
    }

    /// Every hit queued so far, in no particular order across CPUs.
    pub fn drain(&mut self, out: &mut Vec<Hit>) {
        for (_, ring) in &mut self.events {
            ring.read(|rec| out.extend(parse_sample(rec)));
        }
    }

    /// Opens the events disabled at `addr`, to be [`Watch::retarget`]ed later:
    /// opening and mapping is most of the cost of setting a breakpoint, so
    /// a watcher does it once, not while the watched process is stopped.
    pub fn open_idle(addr: u64, len: u64, cpus: &[u32]) -> io::Result<Watch> {
        let a = attr(addr, len, HW_BREAKPOINT_RW);
        let mut events = Vec::with_capacity(cpus.len());
        for &cpu in cpus {
            let fd = open_on(&a, cpu)?;
            let ring = Ring::map(fd.as_raw_fd(), 16)?;
            events.push((fd, ring));
        }
        Ok(Watch { events, addr, len })
    }

    /// Moves the (disabled) breakpoint to `len` bytes at `addr` and enables it.
    pub fn retarget(&mut self, addr: u64, len: u64, bp_type: u32) -> io::Result<()> {
        let a = attr(addr, len, bp_type);
        for (fd, _) in &self.events {
            // SAFETY: the kernel reads one perf_event_attr of the size it declares through the pointer, valid for the call.
            if unsafe { libc::ioctl(fd.as_raw_fd(), IOC_MODIFY_ATTRIBUTES, &a as *const PerfEventAttr) } < 0 {
                return Err(io::Error::last_os_error());
            }
        }
        for (fd, _) in &self.events {
            sys::ioctl(fd.as_raw_fd(), sys::IOC_ENABLE, 0)?;
        }
        (self.addr, self.len) = (addr, len);
        Ok(())
    }

    /// Hits the rings had no room for (PERF_RECORD_LOST) are not counted
    /// here; the rings are sized for a few thousand hits per poll.
    pub fn disable(&self) {
        for (fd, _) in &self.events {
            let _ = sys::ioctl(fd.as_raw_fd(), sys::IOC_DISABLE, 0);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_a_breakpoint_sample_record() {
        // Checks the record layout for IP|TID|TIME|CPU: ip, pid, tid, time, cpu in that order after the header.
        let mut rec = Vec::new();
        rec.extend_from_slice(&sys::RECORD_SAMPLE.to_ne_bytes());
        rec.extend_from_slice(&0u16.to_ne_bytes());
        rec.extend_from_slice(&40u16.to_ne_bytes());
        rec.extend_from_slice(&0x401234u64.to_ne_bytes());
        rec.extend_from_slice(&10u32.to_ne_bytes());
        rec.extend_from_slice(&11u32.to_ne_bytes());
        rec.extend_from_slice(&999u64.to_ne_bytes());
        rec.extend_from_slice(&1u32.to_ne_bytes());
        rec.extend_from_slice(&0u32.to_ne_bytes());
        assert_eq!(parse_sample(&rec), Some(Hit { ip: 0x401234, pid: 10, tid: 11, time_ns: 999, cpu: 1 }));
        rec[0] = 2; // PERF_RECORD_LOST
        assert_eq!(parse_sample(&rec), None);
    }

    #[test]
    fn a_retargeted_idle_breakpoint_counts_only_accesses_to_its_new_address() {
        // Checks open_idle + retarget: nothing counted while idle, then exactly 300 hits on the new word, none on the old.
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            assert!(std::env::var_os("LOUPE_ALLOW_UNPRIVILEGED").is_some(), "privileged test: run as root (CI does)");
            return;
        }
        let cells = Box::into_raw(Box::new([0u64; 2]));
        // SAFETY: cells points to the live boxed array; the two words are in bounds.
        let (a, b) = unsafe { (&raw mut (*cells)[0], &raw mut (*cells)[1]) };
        let mut w = Watch::open_idle(a as u64, 8, &loupe_perf::online_cpus()).unwrap();
        let write = |p: *mut u64, n: u64| {
            for i in 0..n {
                // SAFETY: p is one of the two live words above.
                unsafe { std::ptr::write_volatile(p, i) };
            }
        };
        write(a, 100);
        w.retarget(b as u64, 8, HW_BREAKPOINT_RW).unwrap();
        write(a, 100);
        write(b, 300);
        w.disable();
        let mut hits = Vec::new();
        w.drain(&mut hits);
        // SAFETY: cells came from Box::into_raw and is freed once.
        drop(unsafe { Box::from_raw(cells) });
        // SAFETY: gettid has no preconditions.
        let tid = unsafe { libc::gettid() } as u32;
        assert_eq!(hits.iter().filter(|h| h.tid == tid).count(), 300);
    }

    #[test]
    fn counts_every_write_to_a_watched_word_of_this_process() {
        // Checks the debug registers end to end: 1,000 volatile writes to a watched u64 give exactly 1,000 hits of this thread.
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            assert!(std::env::var_os("LOUPE_ALLOW_UNPRIVILEGED").is_some(), "privileged test: run as root (CI does)");
            return;
        }
        let target = Box::new(0u64);
        let addr = &*target as *const u64 as u64;
        let cpus = loupe_perf::online_cpus();
        let mut w = Watch::open(addr, 8, HW_BREAKPOINT_W, &cpus).unwrap();
        let p = Box::into_raw(target);
        for i in 0..1000u64 {
            // SAFETY: p points to the live boxed u64 above.
            unsafe { std::ptr::write_volatile(p, i) };
        }
        w.disable();
        let mut hits = Vec::new();
        w.drain(&mut hits);
        // SAFETY: p came from Box::into_raw and is freed once.
        drop(unsafe { Box::from_raw(p) });
        // SAFETY: gettid has no preconditions.
        let tid = unsafe { libc::gettid() } as u32;
        assert_eq!(hits.iter().filter(|h| h.tid == tid).count(), 1000);
        assert!(hits.windows(2).all(|w| w[0].cpu != w[1].cpu || w[0].time_ns <= w[1].time_ns));
    }
}
