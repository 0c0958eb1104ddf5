//! The overhead budget (`loupe daemon --max-overhead PCT`): measure what one
//! sample costs on this host and pick the highest rate that fits.
//!
//! A sample costs the interrupted program two things: the interrupt itself
//! (entry, the handler — BPF program or perf ring write — and exit; about
//! 14 µs in a Firecracker VM, a few µs on bare metal) and the daemon's CPU
//! to drain and merge it. The first is a property of the host and backend,
//! so it is measured once at start: spinning threads, one per CPU, count
//! their own progress in alternating windows at a high and a near-zero
//! sampling rate; the drop in progress divided by the extra samples counted
//! is the cost of one sample. The load-dependent parts — the handler's
//! hash-table miss rate (DCPI Table VI) and the daemon's CPU per sample
//! under churn — are re-measured every interval, and the rate is re-chosen.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// What one sample costs, as measured on this host.
#[derive(Clone, Copy, Debug, Default, PartialEq, serde::Serialize)]
pub struct SampleCost {
    /// Time the interrupted CPU loses per sample, in microseconds.
    pub interrupt_us: f64,
    /// Median relative slowdown of the spinning threads at the high rate.
    pub slowdown: f64,
    /// Samples per second per CPU counted in the high and low windows.
    pub high_hz: f64,
    pub low_hz: f64,
    /// Window pairs measured.
    pub pairs: usize,
}

/// How the calibration drives sampling: set the rate (samples/s per CPU)
/// and return how many samples were taken since the previous call.
pub trait RateSwitch {
    fn set_rate(&mut self, hz: u64) -> u64;
}

/// Measures the per-sample interrupt cost with `pairs` alternating
/// (high, low) windows of `window` each. Takes about `2 * pairs * window`.
pub fn measure_sample_cost(switch: &mut dyn RateSwitch, high_hz: u64, low_hz: u64, pairs: usize, window: Duration) -> SampleCost {
    let spin = Spinners::start(loupe_perf::online_cpus().len());
    let mut ratios = Vec::with_capacity(pairs);
    let (mut high_rate, mut low_rate) = (Vec::new(), Vec::new());
    for i in 0..pairs {
        // Alternate which comes first so a drift in speed does not bias one side.
        let order = if i % 2 == 0 { [high_hz, low_hz] } else { [low_hz, high_hz] };
        let mut speed = [0.0; 2];
        for hz in order {
            switch.set_rate(hz);
            let (progress, secs) = spin.measure(window);
            let samples = switch.set_rate(low_hz);
            let per_cpu_hz = samples as f64 / secs / spin.threads as f64;
            let slot = usize::from(hz == low_hz);
            speed[slot] = progress / secs;
            if slot == 0 { &mut high_rate } else { &mut low_rate }.push(per_cpu_hz);
        }
        if speed[1] > 0.0 {
            ratios.push(speed[0] / speed[1]);
        }
    }
    spin.stop();
    let slowdown = (1.0 - median(&mut ratios)).max(0.0);
    let (high, low) = (median(&mut high_rate), median(&mut low_rate));
    let interrupt_us = if high > low { slowdown / (high - low) * 1e6 } else { 0.0 };
    SampleCost { interrupt_us, slowdown, high_hz: high, low_hz: low, pairs }
}

/// The highest rate (samples/s per CPU) whose cost fits `budget` (a
/// fraction of each CPU), given the interrupt cost and the daemon's CPU per
/// sample (seconds), within `[min_hz, max_hz]`.
///
/// Per CPU, a rate r costs r * (interrupt + daemon): the daemon's work is
/// spread over the CPUs the samples came from.
pub fn rate_for_budget(budget: f64, interrupt_s: f64, daemon_s: f64, min_hz: u64, max_hz: u64) -> u64 {
    let per_sample = interrupt_s + daemon_s;
    if per_sample <= 0.0 || !budget.is_finite() {
        return max_hz;
    }
    ((budget / per_sample) as u64).clamp(min_hz, max_hz)
}

fn median(v: &mut [f64]) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    v.sort_by(|a, b| a.total_cmp(b));
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// One busy thread per CPU, pinned, each counting units of fixed work.
struct Spinners {
    threads: usize,
    counters: Arc<Vec<PaddedCounter>>,
    stop: Arc<AtomicBool>,
    handles: Vec<std::thread::JoinHandle<()>>,
}

#[repr(align(128))]
#[derive(Default)]
struct PaddedCounter(AtomicU64);

impl Spinners {
    fn start(threads: usize) -> Spinners {
        let threads = threads.max(1);
        let counters: Arc<Vec<PaddedCounter>> = Arc::new((0..threads).map(|_| PaddedCounter::default()).collect());
        let stop = Arc::new(AtomicBool::new(false));
        let handles = (0..threads)
            .map(|cpu| {
                let (counters, stop) = (Arc::clone(&counters), Arc::clone(&stop));
                std::thread::spawn(move || {
                    pin_to_cpu(cpu);
                    let mut x = cpu as u64 + 1;
                    while !stop.load(Ordering::Relaxed) {
                        for _ in 0..2000 {
                            x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                        }
                        std::hint::black_box(x);
                        counters[cpu].0.fetch_add(1, Ordering::Relaxed);
                    }
                })
            })
            .collect();
        // Let them get onto their CPUs.
        std::thread::sleep(Duration::from_millis(20));
        Spinners { threads, counters, stop, handles }
    }

    fn total(&self) -> u64 {
        self.counters.iter().map(|c| c.0.load(Ordering::Relaxed)).sum()
    }

    /// Work done over one window, and the window's length in seconds.
    fn measure(&self, window: Duration) -> (f64, f64) {
        let (t0, n0) = (Instant::now(), self.total());
        std::thread::sleep(window);
        let (n1, secs) = (self.total(), t0.elapsed().as_secs_f64());
        ((n1 - n0) as f64, secs)
    }

    fn stop(self) {
        self.stop.store(true, Ordering::Relaxed);
        for h in self.handles {
            let _ = h.join();
        }
    }
}

fn pin_to_cpu(cpu: usize) {
    // SAFETY: a zeroed cpu_set_t is a valid empty set; CPU_SET and
    // sched_setaffinity only touch the set we own.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn budget_rate_follows_cost_and_clamps() {
        // Checks r = budget / (interrupt + daemon), e.g. 1% / 14 µs = 714/s, and the clamps.
        assert_eq!(rate_for_budget(0.01, 14e-6, 0.0, 10, 10_000), 714);
        assert_eq!(rate_for_budget(0.01, 14e-6, 6e-6, 10, 10_000), 500);
        assert_eq!(rate_for_budget(0.01, 1e-6, 0.0, 10, 5_000), 5_000);
        assert_eq!(rate_for_budget(0.0001, 14e-6, 0.0, 10, 5_000), 10);
        assert_eq!(rate_for_budget(0.01, 0.0, 0.0, 10, 5_000), 5_000);
    }

    #[test]
    fn median_of_even_and_odd() {
        // Checks the median used to resist noisy windows.
        assert_eq!(median(&mut [3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&mut [4.0, 1.0, 2.0, 3.0]), 2.5);
        assert_eq!(median(&mut []), 0.0);
    }
}
