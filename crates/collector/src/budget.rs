//! The overhead budget (`loupe daemon --max-overhead PCT`): measure what one
//! sample costs on this host and pick the highest rate that fits.
//!
//! A sample costs the interrupted program two things: the interrupt itself
//! (entry, the handler — BPF program or perf ring write — and exit; about
//! 14 µs in a Firecracker VM, a few µs on bare metal) and the daemon's CPU
//! to drain and merge it. Both are measured from the collection itself:
//! the daemon's CPU per sample and the BPF program's run time (the kernel's
//! per-program statistics) every re-check, and the interrupt's entry and
//! exit once at start, on the daemon's own thread ([`measure_interrupt_cost`]:
//! a few milliseconds on one CPU, whatever the number of CPUs; nothing else
//! is made to spin).
//!
//! Lowering the rate never loses a record: the rate moves the period of
//! the next samples, and records already taken stay in the rings until
//! drained. A ring that overflowed anyway (the daemon starved of CPU) makes
//! the budget lower its ceiling ([`ceiling_after_loss`]).

use loupe_perf::{Record, Sampler, SamplerConfig, Target};
use std::time::Instant;

/// What one sample's interrupt costs the thread it interrupts, measured on
/// the calling thread by [`measure_interrupt_cost`].
#[derive(Clone, Copy, Debug, Default, PartialEq, serde::Serialize)]
pub struct InterruptCost {
    /// Time the interrupted thread loses per sample, in microseconds:
    /// the median over window pairs.
    pub interrupt_us: f64,
    /// Window pairs kept (those in which the thread never blocked) and the samples
    /// their sampled windows took.
    pub pairs: usize,
    pub samples: u64,
    /// CPU time the measurement took, seconds (part of start-up).
    pub cpu_seconds: f64,
}

/// Rate of the measurement's samples, per second: high enough that their
/// cost stands well above the noise of a 2 ms window (14 µs x 20 = 14%).
const PROBE_HZ: u64 = 10_000;
/// Length of one window of fixed work, about.
const PROBE_WINDOW_NS: u64 = 2_000_000;
/// Window pairs wanted, and the most tried (a pair in which the thread
/// blocked is discarded).
const PROBE_PAIRS: usize = 8;
const PROBE_TRIES: usize = 16;

/// Measures the interrupt cost of one sample with the collection's sample
/// format (`cfg`: call chains, stack copy), on the calling thread only.
///
/// A per-thread event on this thread samples at `PROBE_HZ` in alternate
/// windows of the same fixed work; the extra time of a sampled window
/// divided by its samples is the cost of one. The time is wall time less
/// the time the thread waited behind others (so a loaded machine does not
/// inflate it), not the thread's CPU time: a kernel with IRQ time
/// accounting leaves the handler out of the latter. About 40 ms of one CPU.
pub fn measure_interrupt_cost(cfg: &SamplerConfig) -> Result<InterruptCost, loupe_perf::Error> {
    let cpu0 = loupe_perf::thread_cpu_ns();
    // SAFETY: gettid has no preconditions.
    let tid = unsafe { libc::gettid() };
    let probe = SamplerConfig {
        target: Target::Thread { tid },
        freq_hz: PROBE_HZ,
        enable_on_exec: false,
        ring_pages: probe_ring_pages(cfg),
        ..cfg.clone()
    };
    let mut sampler = Sampler::open(&probe)?;
    let work = work_for(PROBE_WINDOW_NS);
    let mut records: Vec<Record> = Vec::new();
    let mut per_sample = Vec::with_capacity(PROBE_PAIRS);
    let mut samples = 0;
    for i in 0..PROBE_TRIES {
        if per_sample.len() == PROBE_PAIRS {
            break;
        }
        // Alternate which comes first so a drift in speed biases neither.
        let (mut off, mut on) = (Window::default(), Window::default());
        for sampled in [i % 2 == 0, i % 2 != 0] {
            if sampled {
                sampler.enable()?;
                on = Window::run(work);
                sampler.disable()?;
            } else {
                off = Window::run(work);
            }
        }
        let before = sampler.samples_seen() + sampler.lost();
        records.clear();
        sampler.drain(&mut records);
        let n = sampler.samples_seen() + sampler.lost() - before;
        if on.blocked || off.blocked || n == 0 {
            continue;
        }
        samples += n;
        per_sample.push((on.on_cpu_ns - off.on_cpu_ns) / n as f64);
    }
    let pairs = per_sample.len();
    let interrupt_us = (median(&mut per_sample) / 1e3).max(0.0);
    let cpu_seconds = (loupe_perf::thread_cpu_ns() - cpu0) as f64 / 1e9;
    Ok(InterruptCost { interrupt_us, pairs, samples, cpu_seconds })
}

/// Data pages for the probe's ring: twice one window's records, so none is
/// lost (a lost record costs the kernel less than a written one).
fn probe_ring_pages(cfg: &SamplerConfig) -> usize {
    let callchain = if cfg.callchain { 128 * 8 } else { 0 };
    let record = 256 + callchain + cfg.user_stack_bytes as usize + if cfg.user_stack_bytes > 0 { 8 * 20 } else { 0 };
    let per_window = (PROBE_HZ * PROBE_WINDOW_NS / 1_000_000_000) as usize + 4;
    (2 * per_window * record / loupe_perf::ring::page_size()).next_power_of_two().max(8)
}

/// One window of fixed work: the time this thread was on a CPU for it
/// (wall time less the time it waited behind other threads) and whether
/// it blocked.
#[derive(Default)]
struct Window {
    on_cpu_ns: f64,
    blocked: bool,
}

impl Window {
    fn run(work: u64) -> Window {
        let (s0, d0) = (voluntary_switches(), run_delay_ns());
        let t = Instant::now();
        spin(work);
        let wall = t.elapsed().as_nanos() as f64;
        Window { on_cpu_ns: wall - (run_delay_ns() - d0) as f64, blocked: voluntary_switches() != s0 }
    }
}

/// Time this thread has waited on a run queue, ns (the second field of
/// /proc/thread-self/schedstat; 0 where the kernel keeps none).
fn run_delay_ns() -> u64 {
    let text = std::fs::read_to_string("/proc/thread-self/schedstat").unwrap_or_default();
    text.split_whitespace().nth(1).and_then(|f| f.parse().ok()).unwrap_or(0)
}

/// Times this thread blocked so far.
fn voluntary_switches() -> i64 {
    // SAFETY: getrusage writes into the zeroed struct we pass.
    let ru = unsafe {
        let mut ru: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_THREAD, &mut ru);
        ru
    };
    ru.ru_nvcsw
}

/// Units of [`spin`] that take about `ns` of this thread's time.
fn work_for(ns: u64) -> u64 {
    let unit = 64;
    let t = Instant::now();
    spin(unit);
    let took = t.elapsed().as_nanos().max(1) as u64;
    (unit * ns / took).max(unit)
}

fn spin(units: u64) {
    let mut x = units | 1;
    for _ in 0..units {
        for _ in 0..1000 {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        }
        std::hint::black_box(x);
    }
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

/// The ceiling after an interval at `rate` in which `lost` of `taken + lost`
/// records were lost (the rings filled before the daemon drained them):
/// the rate that would have fit, less a fifth for margin, never below
/// `min_hz` and never above `ceiling`.
pub fn ceiling_after_loss(ceiling: u64, rate: u64, taken: u64, lost: u64, min_hz: u64) -> u64 {
    if lost == 0 {
        return ceiling;
    }
    let fit = rate as f64 * taken as f64 / (taken + lost) as f64;
    ((0.8 * fit) as u64).clamp(min_hz, ceiling.max(min_hz))
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
    fn a_loss_lowers_the_ceiling_to_what_fit() {
        // Checks the ceiling after a lossy interval: 80% of the rate that would have fit, clamped; none without loss.
        assert_eq!(ceiling_after_loss(1000, 1000, 750, 250, 10), 600);
        assert_eq!(ceiling_after_loss(1000, 500, 1000, 0, 10), 1000);
        assert_eq!(ceiling_after_loss(1000, 1000, 0, 500, 10), 10);
        assert_eq!(ceiling_after_loss(400, 1000, 999, 1, 10), 400);
    }

    #[test]
    fn median_of_even_and_odd() {
        // Checks the median used to resist noisy windows.
        assert_eq!(median(&mut [3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&mut [4.0, 1.0, 2.0, 3.0]), 2.5);
        assert_eq!(median(&mut []), 0.0);
    }

    #[test]
    fn the_interrupt_probe_measures_a_cost_on_one_thread() {
        // Checks the probe on this machine: samples were taken, pairs kept, a positive cost below 1 ms per sample
        // and the measurement's own CPU time within its bound.
        let cost = match measure_interrupt_cost(&SamplerConfig::default()) {
            Ok(c) => c,
            Err(e) if matches!(e.kind(), loupe_perf::ErrorKind::Permission) => return,
            Err(e) => panic!("{e}"),
        };
        eprintln!("{cost:?}");
        assert!(cost.samples > 0 && cost.pairs > 0, "{cost:?}");
        assert!(cost.interrupt_us > 0.0 && cost.interrupt_us < 1000.0, "{cost:?}");
        assert!(cost.cpu_seconds < 0.2, "{cost:?}");
    }
}
