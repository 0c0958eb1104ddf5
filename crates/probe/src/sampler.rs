//! Timer samples of one thread's user-mode instruction pointer, taken only
//! between windows: they say how often each reference block ran in a run
//! (during a window the traps would draw samples to the armed blocks).

use crate::RuntimeAddr;
use loupe_perf::ring::Ring;
use loupe_perf::sys::{self, PerfEventAttr};
use loupe_perf::{parse_sample, Format, Layout};
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};

const PERF_COUNT_SW_CPU_CLOCK: u64 = 0;
const FLAG_EXCLUDE_KERNEL: u64 = 1 << 5;
const FLAG_EXCLUDE_HV: u64 = 1 << 6;

pub struct Sampler {
    fd: OwnedFd,
    ring: Ring,
    layout: Layout,
}

impl Sampler {
    /// A disabled cpu-clock sampler of thread `tid`, one sample per `period_ns` of its CPU time.
    pub fn open(tid: u32, period_ns: u64) -> io::Result<Sampler> {
        let a = PerfEventAttr {
            type_: sys::PERF_TYPE_SOFTWARE,
            size: sys::ATTR_SIZE,
            config: PERF_COUNT_SW_CPU_CLOCK,
            sample_period_or_freq: period_ns,
            sample_type: sys::SAMPLE_IP,
            flags: FLAG_EXCLUDE_KERNEL | FLAG_EXCLUDE_HV | sys::flag::DISABLED,
            wakeup_events_or_watermark: 1 << 20,
            ..Default::default()
        };
        let fd = sys::perf_event_open(&a, tid as i32, -1, -1)?;
        let ring = Ring::map(fd.as_raw_fd(), 64)?;
        Ok(Sampler { fd, ring, layout: Layout::new(Format::of(&a)) })
    }

    pub fn enable(&self) -> io::Result<()> {
        sys::ioctl(self.fd.as_raw_fd(), sys::IOC_ENABLE, 0)
    }

    pub fn disable(&self) -> io::Result<()> {
        sys::ioctl(self.fd.as_raw_fd(), sys::IOC_DISABLE, 0)
    }

    /// The instruction pointers sampled since the last call.
    pub fn drain(&mut self, out: &mut Vec<RuntimeAddr>) {
        let layout = &self.layout;
        self.ring.read(|rec| out.extend(parse_sample(layout, rec).ok().and_then(|s| s.ip).map(RuntimeAddr)));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn samples_this_threads_own_code_only_while_enabled() {
        // Checks the sampler on this thread: no sample while disabled, then samples (at 10 kHz, about 50 over
        // 5 ms of CPU) while enabled.
        if !crate::privileged_test() {
            return;
        }
        // SAFETY: gettid has no preconditions.
        let tid = unsafe { libc::gettid() } as u32;
        let mut s = Sampler::open(tid, 100_000).unwrap();
        // Spins for `ms` of this thread's CPU time (not wall time: on a loaded machine 5 ms of wall clock can
        // be 1 ms of CPU), reading the clock (a syscall, in kernel mode where no sample is kept) rarely.
        let spin = |ms: u64| {
            let t = loupe_perf::thread_cpu_ns();
            let mut x = 0u64;
            while loupe_perf::thread_cpu_ns() - t < ms * 1_000_000 {
                for _ in 0..10_000 {
                    x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(1));
                }
            }
        };
        spin(5);
        let mut ips = Vec::new();
        s.drain(&mut ips);
        assert!(ips.is_empty());
        s.enable().unwrap();
        spin(5);
        s.disable().unwrap();
        s.drain(&mut ips);
        assert!((20..=80).contains(&ips.len()), "{} samples", ips.len());
    }
}
