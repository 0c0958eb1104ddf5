//! The cheap clock of the logging path: the TSC, converted to nanoseconds
//! with the kernel's own factors (`time_mult`/`time_shift` of a perf mmap
//! page, published when `cap_user_time` is set, i.e. the TSC is stable and
//! synchronized across CPUs) and anchored to CLOCK_MONOTONIC once, when the
//! recorder creates the buffer. The anchor lives in the buffer's global
//! header so every writer (Rust, C) converts identically; `loupe trace
//! record` measures at the end how far the TSC clock has drifted from
//! CLOCK_MONOTONIC and writes it to trace.json. Where the kernel does not
//! publish the factors (no usable TSC, not x86-64) writers keep
//! `clock_gettime(CLOCK_MONOTONIC)`.

/// TSC-to-CLOCK_MONOTONIC conversion: `ns = ns_base + ((tsc - tsc_base) * mult) >> shift`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TscClock {
    pub mult: u32,
    pub shift: u32,
    pub tsc_base: u64,
    pub ns_base: u64,
}

/// The TSC, read after every earlier load has completed (RDTSCP waits for
/// them), so a timestamp read after loading the buffer head is not taken before it.
#[inline]
pub fn rdtscp() -> u64 {
    #[cfg(target_arch = "x86_64")]
    {
        let mut aux = 0u32;
        // SAFETY: RDTSCP has no memory effects beyond writing `aux`, a local.
        unsafe { core::arch::x86_64::__rdtscp(&mut aux) }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        0
    }
}

impl TscClock {
    #[inline]
    pub fn ns(&self, tsc: u64) -> u64 {
        let d = tsc.wrapping_sub(self.tsc_base) as u128;
        self.ns_base.wrapping_add(((d * self.mult as u128) >> self.shift) as u64)
    }

    #[inline]
    pub fn now(&self) -> u64 {
        self.ns(rdtscp())
    }

    /// The kernel's factors from a perf mmap page and an anchor taken now;
    /// None where the kernel does not offer user-space time.
    pub fn calibrate() -> Option<TscClock> {
        let (mult, shift) = kernel_factors()?;
        let (tsc_base, ns_base) = anchor();
        Some(TscClock { mult, shift, tsc_base, ns_base })
    }

    /// Factors measured against CLOCK_MONOTONIC over `span` (for kernels
    /// that do not publish theirs, e.g. under kvm-clock): the rate error is
    /// about 100 ns / span, so 50 ms gives a few ppm of drift, which
    /// `loupe trace record` measures and reports. None without a TSC.
    pub fn measure(span: std::time::Duration) -> Option<TscClock> {
        if !cfg!(target_arch = "x86_64") {
            return None;
        }
        let (t1, n1) = anchor();
        std::thread::sleep(span);
        let (t2, n2) = anchor();
        let (ticks, ns) = ((t2 - t1) as u128, (n2 - n1) as u128);
        let shift = (0..=32u32).rev().find(|&sh| (ns << sh) / ticks <= u32::MAX as u128)?;
        Some(TscClock { mult: ((ns << shift) / ticks) as u32, shift, tsc_base: t2, ns_base: n2 })
    }

    /// This clock minus CLOCK_MONOTONIC now, in ns (the conversion's drift since the anchor).
    pub fn drift(&self) -> i64 {
        (0..16)
            .map(|_| {
                let a = crate::buffer::now();
                let t = self.now();
                let b = crate::buffer::now();
                (b - a, t as i64 - (a + (b - a) / 2) as i64)
            })
            .min()
            .map_or(0, |(_, d)| d)
    }
}

/// A TSC reading and the CLOCK_MONOTONIC time at that moment: the TSC read
/// between the two clock reads that were closest together of 32 tries.
fn anchor() -> (u64, u64) {
    let (mut best, mut tsc, mut ns) = (u64::MAX, 0, 0);
    for _ in 0..32 {
        let a = crate::buffer::now();
        let t = rdtscp();
        let b = crate::buffer::now();
        if b - a < best {
            (best, tsc, ns) = (b - a, t, a + (b - a) / 2);
        }
    }
    (tsc, ns)
}

/// `time_mult`, `time_shift` of a perf mmap page if `cap_user_time` is set.
fn kernel_factors() -> Option<(u32, u32)> {
    if !cfg!(target_arch = "x86_64") {
        return None;
    }
    use loupe_perf::sys;
    use std::os::fd::AsRawFd;
    let attr = sys::PerfEventAttr { type_: sys::PERF_TYPE_SOFTWARE, size: sys::ATTR_SIZE, config: 9, ..Default::default() }; // dummy
    let fd = sys::perf_event_open(&attr, 0, -1, -1).ok()?;
    let page = loupe_perf::ring::page_size();
    // SAFETY: mapping one read-only page of a perf fd (its control page), checked for failure.
    let p = unsafe { libc::mmap(std::ptr::null_mut(), page, libc::PROT_READ, libc::MAP_SHARED, fd.as_raw_fd(), 0) };
    if p == libc::MAP_FAILED {
        return None;
    }
    // SAFETY: offsets of struct perf_event_mmap_page inside the mapped page: capabilities at 40, time_shift at 50, time_mult at 52.
    let (caps, shift, mult) = unsafe {
        let b = p as *const u8;
        ((b.add(40) as *const u64).read_volatile(), (b.add(50) as *const u16).read_volatile(), (b.add(52) as *const u32).read_volatile())
    };
    // SAFETY: unmapping the page mapped above.
    unsafe { libc::munmap(p, page) };
    let cap_user_time = caps & (1 << 3) != 0;
    (cap_user_time && mult != 0).then_some((mult, shift as u32))
}

#[cfg(test)]
mod tests {
    use super::*;

    // The conversion with hand-picked factors: mult 2^31 >> shift 31 is one ns per tick; 3/2 ns per tick at mult 3, shift 1.
    #[test]
    fn conversion() {
        let c = TscClock { mult: 1 << 31, shift: 31, tsc_base: 1000, ns_base: 5_000 };
        assert_eq!(c.ns(1000), 5_000);
        assert_eq!(c.ns(1_000_000_000_000 + 1000), 1_000_000_005_000);
        let c = TscClock { mult: 3, shift: 1, tsc_base: 10, ns_base: 0 };
        assert_eq!(c.ns(14), 6);
    }

    // The kernel's or else the measured factors: the clock agrees with CLOCK_MONOTONIC within 20 us
    // right after calibration and after 100 ms of sleep.
    #[test]
    fn tracks_monotonic() {
        let c = TscClock::calibrate().or_else(|| TscClock::measure(std::time::Duration::from_millis(50))).expect("x86-64 has a TSC");
        assert!(c.drift().abs() < 20_000, "{} ns", c.drift());
        std::thread::sleep(std::time::Duration::from_millis(100));
        assert!(c.drift().abs() < 20_000, "{} ns", c.drift());
    }
}
