//! The core clock while recording, stored with the profile (the epoch's
//! [`loupe_store::Clock`]) so that `loupe calc` converts a clock event's period (ns) to
//! cycles with the rate the samples were taken at, not the rate of the
//! machine (or the load) at analysis time.
//!
//! The TSC does not serve: on this VM it ticks at a fixed 2.6 GHz
//! (`constant_tsc`, `tsc_known_freq`) while the cores run at 3.3-3.9 GHz,
//! and a time sample's period counts nanoseconds of core time, not ticks.
//! It is stored beside the measurement ([`loupe_store::Clock::tsc_mhz`]) for the record.

use loupe_perf::thread_cpu_ns;

/// Core clock in GHz, measured: a chain of dependent one-cycle adds of a
/// register runs at one add per cycle on every x86-64 core. (Adds of an
/// immediate do not serve: Intel's cores since Golden Cove fold chains of
/// them in the renamer, and a Sapphire Rapids VM read 14-17 GHz at 2.9.)
/// Timed in this thread's CPU time, the clock `cpu-clock` samples count, so other busy processes do
/// not slow it; best of twenty ~5 ms runs (about 0.1 s of CPU). (The median
/// of 41 runs was tried: on the shared, loaded VM single runs read up to
/// 4.4 GHz against a median of 3.6, but on the quiet machine the median,
/// 3.55, made the divide chain's counts 10-20% low: the workload ran at the
/// best run's clock.)
pub fn measure_ghz() -> f64 {
    (0..20).map(|_| chain_ghz(add_chain, 1.0)).fold(0.0, f64::max)
}

/// One run of `chain` (200,000 rounds of 100 dependent instructions of
/// `latency` cycles each, ~5 ms) in cycles per ns of this thread's CPU time;
/// 0 when the clock did not move.
fn chain_ghz(chain: fn(u64), latency: f64) -> f64 {
    let iters: u64 = 200_000;
    let t = thread_cpu_ns();
    chain(iters);
    match thread_cpu_ns() - t {
        0 => 0.0,
        ns => iters as f64 * 100.0 * latency / ns as f64,
    }
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

/// `fn $name(iters)`: `iters` rounds of 100 `$insn`s, each depending on the
/// last through register `x`; the other operand, `k`, comes from a register
/// the compiler cannot see through.
macro_rules! latency_chain {
    ($name:ident, $insn:literal) => {
        #[cfg(target_arch = "x86_64")]
        fn $name(iters: u64) {
            let (mut x, mut n, k) = (1u64, iters, std::hint::black_box(3u64));
            // SAFETY: register-only arithmetic and a local loop; no memory, no stack.
            unsafe {
                std::arch::asm!(
                    "2:",
                    ".rept 100",
                    $insn,
                    ".endr",
                    "dec {n}",
                    "jnz 2b",
                    x = inout(reg) x,
                    n = inout(reg) n,
                    k = in(reg) k,
                    options(nomem, nostack),
                );
            }
            std::hint::black_box((x, n));
        }
    };
}

latency_chain!(add_chain, "add {x}, {k}");

#[cfg(not(target_arch = "x86_64"))]
fn add_chain(_: u64) {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn measured_clock_is_a_plausible_x86_rate() {
        // Checks that the dependent-add chain reads a core clock between 0.5 and 7 GHz (any real x86-64 core).
        let g = measure_ghz();
        assert!((0.5..7.0).contains(&g), "{g} GHz");
    }

    #[cfg(target_arch = "x86_64")]
    #[test]
    fn add_chain_agrees_with_a_multiply_chain() {
        // Checks the add chain against another latency no renamer folds: dependent 64-bit multiplies take 3
        // cycles on every x86-64 core since Nehalem and Zen. Best of 20 runs each, interleaved; within 15%.
        let (mut add, mut mul) = (0.0f64, 0.0f64);
        for _ in 0..20 {
            add = add.max(chain_ghz(add_chain, 1.0));
            mul = mul.max(chain_ghz(mul_chain, 3.0));
        }
        assert!((add / mul - 1.0).abs() < 0.15, "add chain {add:.2} GHz, multiply chain {mul:.2} GHz");
    }

    latency_chain!(mul_chain, "imul {x}, {k}");
}
