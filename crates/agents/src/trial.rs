//! Measuring an action: alternating windows with the action off and on, in
//! ABBA order (off on, on off, ...) so a drift of the machine's speed over
//! the trial weighs on both sides alike and an action that is slow to apply
//! (a collapse copies memory) is applied only once per two phases. The
//! verdict is the sign test over paired windows — the same exact binomial
//! test `loupe diff` uses (`loupe_analysis::significance`) — and the
//! median ratio with the distribution-free interval that test inverts to.

use crate::error::{Error, ErrorKind, Result};
use crate::metric::Metric;
use crate::target::Target;
use loupe_analysis::significance::{binom_lower, binom_upper};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// How a trial runs and decides.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Plan {
    /// Pairs of phases (off+on or on+off); at least 1.
    pub rounds: usize,
    /// Windows measured per phase.
    pub windows: usize,
    /// Length of one window.
    pub window: Duration,
    /// Wait after switching before measuring (caches, the scheduler settle).
    pub settle: Duration,
    /// Significance level of the sign test (one-sided).
    pub level: f64,
    /// Smallest median gain worth keeping (0.02: 2%).
    pub min_gain: f64,
}

impl Default for Plan {
    fn default() -> Plan {
        Plan { rounds: 4, windows: 4, window: Duration::from_millis(500), settle: Duration::from_millis(300), level: 0.05, min_gain: 0.02 }
    }
}

/// The metric's values per window, paired off/on.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct Windows {
    pub off: Vec<f64>,
    pub on: Vec<f64>,
}

/// What the windows say.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct Verdict {
    pub pairs: usize,
    /// Pairs where the action was better / worse.
    pub better: usize,
    pub worse: usize,
    /// Median of on/off (off/on for lower-is-better metrics): above 1 is a gain.
    pub median_ratio: f64,
    /// Distribution-free confidence interval of that median, and its level.
    pub ci: (f64, f64),
    pub ci_level: f64,
    /// One-sided sign-test p-values that the action helps / hurts.
    pub p_better: f64,
    pub p_worse: f64,
    pub outcome: Outcome,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Outcome {
    /// Significantly better by at least the minimum gain: keep.
    Better,
    /// Significantly worse: revert.
    Worse,
    /// Neither: revert (an action must earn its place).
    NoChange,
}

impl Outcome {
    pub fn keep(self) -> bool {
        self == Outcome::Better
    }
}

/// The verdict on paired windows.
pub fn judge(w: &Windows, higher_is_better: bool, level: f64, min_gain: f64) -> Verdict {
    let mut ratios: Vec<f64> = w
        .off
        .iter()
        .zip(&w.on)
        .filter(|(a, b)| a.is_finite() && b.is_finite() && **a > 0.0 && **b > 0.0)
        .map(|(&off, &on)| if higher_is_better { on / off } else { off / on })
        .collect();
    ratios.sort_by(f64::total_cmp);
    let n = ratios.len();
    let better = ratios.iter().filter(|&&r| r > 1.0).count();
    let worse = ratios.iter().filter(|&&r| r < 1.0).count();
    // Ties carry no sign: the test runs over the pairs that moved.
    let moved = (better + worse) as u64;
    let p_better = binom_upper(better as u64, moved, 0.5);
    let p_worse = binom_upper(worse as u64, moved, 0.5);
    let median_ratio = median(&ratios);
    let (ci, ci_level) = median_ci(&ratios, 1.0 - 2.0 * level);
    let outcome = if p_better <= level && median_ratio >= 1.0 + min_gain {
        Outcome::Better
    } else if p_worse <= level {
        Outcome::Worse
    } else {
        Outcome::NoChange
    };
    Verdict { pairs: n, better, worse, median_ratio, ci, ci_level, p_better, p_worse, outcome }
}

fn median(sorted: &[f64]) -> f64 {
    let n = sorted.len();
    match n {
        0 => f64::NAN,
        _ if n % 2 == 1 => sorted[n / 2],
        _ => (sorted[n / 2 - 1] + sorted[n / 2]) / 2.0,
    }
}

/// The interval between order statistics k and n+1-k (1-based) holds the
/// median with probability 1 - 2 P(Bin(n, 1/2) <= k - 1); the widest k
/// whose coverage still reaches `want`, or the whole range when n is too
/// small for it (its coverage is then stated, not assumed).
fn median_ci(sorted: &[f64], want: f64) -> ((f64, f64), f64) {
    let n = sorted.len();
    if n == 0 {
        return ((f64::NAN, f64::NAN), 0.0);
    }
    let coverage = |k: usize| 1.0 - 2.0 * binom_lower(k as u64 - 1, n as u64, 0.5);
    let mut k = 1;
    while k < n.div_ceil(2) && coverage(k + 1) >= want {
        k += 1;
    }
    ((sorted[k - 1], sorted[n - k]), coverage(k).max(0.0))
}

/// Runs the alternating phases: `set(true)` applies the action, `set(false)`
/// takes it back. Starts and ends with whatever `set` was last told; the
/// caller decides what to leave. Stops early (an error) when `stop` is set
/// or the process ends.
pub fn run(plan: &Plan, metric: &Metric, target: &Target, set: &mut dyn FnMut(bool) -> Result<()>, stop: &AtomicBool) -> Result<Windows> {
    let mut w = Windows::default();
    let mut state = false;
    for round in 0..plan.rounds.max(1) {
        let order = if round % 2 == 0 { [false, true] } else { [true, false] };
        for on in order {
            if on != state {
                set(on)?;
                state = on;
            }
            let values = measure_phase(plan, metric, target, stop)?;
            if on {
                w.on.extend(values)
            } else {
                w.off.extend(values)
            }
        }
    }
    Ok(w)
}

fn measure_phase(plan: &Plan, metric: &Metric, target: &Target, stop: &AtomicBool) -> Result<Vec<f64>> {
    sleep_unless_stopped(plan.settle, stop)?;
    let mut last = metric.read(target)?;
    let mut out = Vec::with_capacity(plan.windows);
    for _ in 0..plan.windows.max(1) {
        sleep_unless_stopped(plan.window, stop)?;
        if !target.alive() {
            return Err(Error::new(ErrorKind::Process, format!("process {} ({}) ended during the trial", target.pid, target.comm)));
        }
        let now = metric.read(target)?;
        out.push(metric.value(&last, &now));
        last = now;
    }
    Ok(out)
}

fn sleep_unless_stopped(d: Duration, stop: &AtomicBool) -> Result<()> {
    let end = std::time::Instant::now() + d;
    while std::time::Instant::now() < end {
        if stop.load(Ordering::Relaxed) {
            return Err(Error::new(ErrorKind::Apply, "the daemon is stopping"));
        }
        std::thread::sleep((end - std::time::Instant::now()).min(Duration::from_millis(50)));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn windows(off: &[f64], on: &[f64]) -> Windows {
        Windows { off: off.to_vec(), on: on.to_vec() }
    }

    // Eight pairs all 20% better: p = 1/256, kept, the interval brackets 1.2.
    #[test]
    fn consistent_gain_is_kept() {
        let off = [100.0, 90.0, 110.0, 95.0, 105.0, 100.0, 98.0, 102.0];
        let on: Vec<f64> = off.iter().map(|v| v * 1.2).collect();
        let v = judge(&windows(&off, &on), true, 0.05, 0.02);
        assert_eq!((v.pairs, v.better, v.worse), (8, 8, 0));
        assert!((v.p_better - 1.0 / 256.0).abs() < 1e-12);
        assert!((v.median_ratio - 1.2).abs() < 1e-9 && v.ci.0 <= 1.2 && v.ci.1 >= 1.2);
        assert_eq!(v.outcome, Outcome::Better);
    }

    // A lower-is-better metric that rose is a regression, reverted.
    #[test]
    fn regression_on_lower_is_better() {
        let off = [1.0; 8];
        let on = [1.5; 8];
        let v = judge(&windows(&off, &on), false, 0.05, 0.02);
        assert_eq!(v.outcome, Outcome::Worse);
        assert!(v.median_ratio < 1.0);
    }

    // Half better, half worse: no change; a significant 1% gain under a 2% minimum is not kept.
    #[test]
    fn noise_and_small_gains_are_not_kept() {
        let v = judge(&windows(&[100.0; 8], &[101.0, 99.0, 101.0, 99.0, 101.0, 99.0, 101.0, 99.0]), true, 0.05, 0.02);
        assert_eq!(v.outcome, Outcome::NoChange);
        let v = judge(&windows(&[100.0; 8], &[101.0; 8]), true, 0.05, 0.02);
        assert!(v.p_better < 0.05);
        assert_eq!(v.outcome, Outcome::NoChange);
    }

    // Windows without work (NaN, zero) are left out of the pairs.
    #[test]
    fn empty_windows_dropped() {
        let v = judge(&windows(&[0.0, f64::NAN, 100.0], &[50.0, 50.0, 130.0]), true, 0.05, 0.0);
        assert_eq!(v.pairs, 1);
    }

    // Order-statistic interval: 20 pairs give [x(6), x(15)] at 95.9% coverage (tables of the sign-test interval).
    #[test]
    fn median_interval_matches_tables() {
        let xs: Vec<f64> = (1..=20).map(f64::from).collect();
        let ((lo, hi), cov) = median_ci(&xs, 0.95);
        assert_eq!((lo, hi), (6.0, 15.0));
        assert!((cov - 0.9586).abs() < 1e-3, "{cov}");
        let ((lo, hi), cov) = median_ci(&[1.0, 2.0, 3.0], 0.95);
        assert_eq!((lo, hi), (1.0, 3.0));
        assert!((cov - 0.75).abs() < 1e-9);
    }
}
