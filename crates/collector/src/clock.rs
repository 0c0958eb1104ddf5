//! The core clock while recording, stored with the profile (epoch metadata
//! `cpu_ghz`) so that `loupe calc` converts a clock event's period (ns) to
//! cycles with the rate the samples were taken at, not the rate of the
//! machine (or the load) at analysis time.
//!
//! The TSC does not serve: on this VM it ticks at a fixed 2.6 GHz
//! (`constant_tsc`, `tsc_known_freq`) while the cores run at 3.3-3.9 GHz,
//! and a time sample's period counts nanoseconds of core time, not ticks.
//! It is stored beside the measurement (`tsc_mhz`) for the record.

use loupe_perf::thread_cpu_ns;

/// Epoch metadata key of the median clock reading, GHz.
pub const META_GHZ: &str = "cpu_ghz";
/// Epoch metadata key of every reading (space-separated GHz).
pub const META_READINGS: &str = "cpu_ghz_readings";
/// Epoch metadata key of the TSC's nominal rate, MHz.
pub const META_TSC: &str = "tsc_mhz";

/// Core clock in GHz, measured: a chain of dependent one-cycle adds runs
/// at one add per cycle on every x86-64 core. Timed in this thread's CPU
/// time, the clock `cpu-clock` samples count, so other busy processes do
/// not slow it; best of twenty ~5 ms runs (about 0.1 s of CPU). (The median
/// of 41 runs was tried: on the shared, loaded VM single runs read up to
/// 4.4 GHz against a median of 3.6, but on the quiet machine the median,
/// 3.55, made the divide chain's counts 10-20% low: the workload ran at the
/// best run's clock.)
pub fn measure_ghz() -> f64 {
    let mut best = 0.0f64;
    for _ in 0..20 {
        let iters: u64 = 200_000;
        let t = thread_cpu_ns();
        add_chain(iters);
        let ns = (thread_cpu_ns() - t) as f64;
        if ns > 0.0 {
            best = best.max(iters as f64 * 100.0 / ns);
        }
    }
    best
}

/// The TSC's rate as the kernel reports it (`cpu MHz` of /proc/cpuinfo
/// when the TSC is constant), for the record; None without one.
pub fn tsc_mhz() -> Option<f64> {
    let text = std::fs::read_to_string("/proc/cpuinfo").ok()?;
    if !text.contains("constant_tsc") {
        return None;
    }
    text.lines().find(|l| l.starts_with("cpu MHz"))?.split(':').nth(1)?.trim().parse().ok()
}

/// The median of clock readings (GHz); None when there are none.
pub fn median(readings: &[f64]) -> Option<f64> {
    let mut v: Vec<f64> = readings.iter().copied().filter(|x| x.is_finite() && *x > 0.0).collect();
    v.sort_by(f64::total_cmp);
    let n = v.len();
    match n {
        0 => None,
        _ if n % 2 == 1 => Some(v[n / 2]),
        _ => Some((v[n / 2 - 1] + v[n / 2]) / 2.0),
    }
}

/// Readings stored as [`META_READINGS`]; unparsable words are skipped.
pub fn parse_readings(text: &str) -> Vec<f64> {
    text.split_whitespace().filter_map(|w| w.parse().ok()).collect()
}

#[cfg(target_arch = "x86_64")]
fn add_chain(iters: u64) {
    let mut x = 0u64;
    let mut n = iters;
    // SAFETY: register-only arithmetic and a local loop; no memory, no stack.
    unsafe {
        std::arch::asm!(
            "2:",
            ".rept 100",
            "add {x}, 1",
            ".endr",
            "dec {n}",
            "jnz 2b",
            x = inout(reg) x,
            n = inout(reg) n,
            options(nomem, nostack),
        );
    }
    std::hint::black_box((x, n));
}

#[cfg(not(target_arch = "x86_64"))]
fn add_chain(_: u64) {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_of_readings() {
        // Checks the median of odd and even counts of readings, skipping non-positive ones.
        assert_eq!(median(&[3.7, 3.5, 3.9]), Some(3.7));
        assert_eq!(median(&[3.6, 3.8, 0.0]), Some(3.7));
        assert_eq!(median(&[]), None);
        assert_eq!(parse_readings("3.71 x 3.69"), vec![3.71, 3.69]);
    }

    #[test]
    fn measured_clock_is_a_plausible_x86_rate() {
        // Checks that the dependent-add chain reads a core clock between 0.5 and 7 GHz (any real x86-64 core).
        let g = measure_ghz();
        assert!((0.5..7.0).contains(&g), "{g} GHz");
    }
}
