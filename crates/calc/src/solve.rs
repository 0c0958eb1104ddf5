//! DCPI's global constraint solver (§6.1.4, "we are currently experimenting
//! with a global constraint solver"): every class's frequency at once, as
//! the non-negative weighted least-squares fit of the classes' own
//! estimates subject to the flow constraints, instead of local propagation
//! that takes the first estimate it reaches and never revisits it.
//!
//! Minimises Σ_k w_k (x_k - d_k)² + μ Σ_e (x_lhs(e) - Σ x_rhs(e))² over
//! x >= 0 by projected Gauss-Seidel, raising μ stage by stage until the
//! flow constraints hold to a part in 10^4 of the largest estimate. An
//! estimate's error is relative (a stall inflates S/M by a factor), so its
//! weight is its sample count over d_k², times a factor for how it was made.
//!
//! Not the default (`loupe calc --solver global`): measured with
//! bench/calc_accuracy.py on the same recordings (BENCHMARKS.md), it is
//! worse than local propagation — real programs 6.4% -> 2.8% of samples
//! within 10%, calcwork 31.8% -> 27.4% — though it fixes insertion sort
//! (92.7% -> 100%) and SQLite's VDBE within 5% (4.7% -> 11.5%). The class
//! estimates are biased, not noisy: a stalled class is high by 2-100x, a
//! jump-table case whose samples skid to the dispatch is low by 60x, and a
//! fit spreads those errors over the good neighbours that local
//! propagation would have left alone. Tried, also worse: weights 100/1/0.01
//! for medium/low/ΣS-ΣM estimates (1.3% within 10%), and absolute rather
//! than relative weights (3.2%).

use crate::estimate::{Confidence, Freq, How};

/// One flow equation: class `lhs` equals the sum of classes `rhs`.
pub type Equation = (usize, Vec<usize>);

/// Solver settings: weight factors per kind of estimate.
pub const WEIGHT_ISSUE_MEDIUM: f64 = 4.0;
pub const WEIGHT_ISSUE_LOW: f64 = 1.0;
pub const WEIGHT_LOOP: f64 = 1.0;
pub const WEIGHT_SAMPLE_SUM: f64 = 0.25;
pub const WEIGHT_COUNTED: f64 = 1e6;
/// An adjusted estimate keeps its label only within this factor of its own value.
pub const KEEP_LABEL: f64 = 0.1;

fn factor(f: &Freq) -> f64 {
    match (f.how, f.confidence) {
        (How::IssuePoints { .. }, Confidence::Low) => WEIGHT_ISSUE_LOW,
        (How::IssuePoints { .. }, _) => WEIGHT_ISSUE_MEDIUM,
        (How::Loop { .. }, _) => WEIGHT_LOOP,
        // Measured, not inferred: the fit moves everything else first.
        (How::Counted { .. }, _) => WEIGHT_COUNTED,
        _ => WEIGHT_SAMPLE_SUM,
    }
}

/// Solves for every class. `direct[k]` is class k's own estimate and
/// `samples[k]` its samples; `start` a starting point (local propagation's
/// answer). Classes neither estimated nor in any equation stay None.
pub fn solve(direct: &[Option<Freq>], samples: &[f64], eqs: &[Equation], start: &[Option<Freq>]) -> Vec<Option<Freq>> {
    let n = direct.len();
    let scale = direct.iter().flatten().map(|f| f.f).fold(0.0, f64::max);
    if scale <= 0.0 {
        return start.to_vec();
    }
    let total: f64 = samples.iter().sum::<f64>().max(1.0);
    // Targets and weights in units of the largest estimate.
    let t: Vec<f64> = direct.iter().map(|d| d.map_or(0.0, |f| f.f / scale)).collect();
    let w: Vec<f64> =
        (0..n).map(|k| direct[k].map_or(0.0, |f| factor(&f) * samples[k].max(1.0) / total / t[k].max(1e-3).powi(2))).collect();
    // Per class, the equations it appears in with its coefficient.
    let mut coef: Vec<Vec<(usize, f64)>> = vec![Vec::new(); n];
    for (e, (lhs, rhs)) in eqs.iter().enumerate() {
        let mut a: Vec<(usize, f64)> = vec![(*lhs, 1.0)];
        a.extend(rhs.iter().map(|&r| (r, -1.0)));
        for (k, v) in a {
            match coef[k].iter_mut().find(|(x, _)| *x == e) {
                Some(c) => c.1 += v,
                None => coef[k].push((e, v)),
            }
        }
    }
    let mut z: Vec<f64> = (0..n).map(|k| start[k].map_or(t[k], |f| f.f / scale)).collect();
    let mut r: Vec<f64> = vec![0.0; eqs.len()];
    for (k, cs) in coef.iter().enumerate() {
        for &(e, a) in cs {
            r[e] += a * z[k];
        }
    }
    let wmax = w.iter().copied().fold(0.0, f64::max).max(1e-12);
    for stage in -2..=6 {
        let mu = wmax * 10f64.powi(stage);
        for _ in 0..200 {
            let mut moved = 0.0f64;
            for k in 0..n {
                let den = w[k] + mu * coef[k].iter().map(|(_, a)| a * a).sum::<f64>();
                if den <= 0.0 {
                    continue;
                }
                let num = w[k] * t[k] - mu * coef[k].iter().map(|&(e, a)| a * (r[e] - a * z[k])).sum::<f64>();
                let new = (num / den).max(0.0);
                let d = new - z[k];
                if d != 0.0 {
                    for &(e, a) in &coef[k] {
                        r[e] += a * d;
                    }
                    z[k] = new;
                    moved = moved.max(d.abs());
                }
            }
            if moved < 1e-9 {
                break;
            }
        }
        if r.iter().all(|x| x.abs() < 1e-4) {
            break;
        }
    }
    (0..n)
        .map(|k| {
            let x = z[k] * scale;
            match direct[k] {
                Some(d) => {
                    let near = d.f > 0.0 && (x / d.f - 1.0).abs() <= KEEP_LABEL;
                    Some(Freq { f: x, confidence: if near { d.confidence } else { Confidence::Low }, ..d })
                }
                None if !coef[k].is_empty() => Some(Freq { f: x, confidence: Confidence::Low, how: How::Propagated }),
                None => start[k],
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn est(f: f64, samples_how: How) -> Option<Freq> {
        Some(Freq { f, confidence: Confidence::Low, how: samples_how })
    }

    #[test]
    fn two_estimates_of_one_sum_meet_by_their_weights() {
        // Checks a head class H = A + B with three estimates that disagree (H=10, A=4, B=4, equal samples and
        // kind): the minimum of Σ (x-d)²/d² subject to H = A + B, derived by hand with a Lagrange multiplier.
        let how = How::IssuePoints { points: 2, of: 4, spread: 1.1 };
        let direct = [est(10.0, how), est(4.0, how), est(4.0, how)];
        let eqs = vec![(0, vec![1, 2])];
        let x = solve(&direct, &[100.0; 3], &eqs, &[None; 3]);
        // Lagrange: (H-10)/100 = -λ, (A-4)/16 = λ, (B-4)/16 = λ, H = A + B
        // -> H = 10 - 100λ, A = B = 4 + 16λ, 10 - 100λ = 8 + 32λ -> λ = 1/66.
        let (h, a) = (10.0 - 100.0 / 66.0, 4.0 + 16.0 / 66.0);
        let got: Vec<f64> = x.iter().map(|f| f.unwrap().f).collect();
        assert!((got[0] - h).abs() < 1e-3 && (got[1] - a).abs() < 1e-3 && (got[2] - a).abs() < 1e-3, "{got:?}");
    }

    #[test]
    fn unestimated_arm_gets_the_difference_and_never_goes_negative() {
        // Checks H = A + B with H=10, A=7 estimated and B free: B = 3 exactly; with A=12 (above H), B = 0, not negative.
        let how = How::IssuePoints { points: 2, of: 4, spread: 1.1 };
        let eqs = vec![(0, vec![1, 2])];
        let x = solve(&[est(10.0, how), est(7.0, how), None], &[100.0, 100.0, 0.0], &eqs, &[None; 3]);
        assert!((x[2].unwrap().f - 3.0).abs() < 1e-3, "{x:?}");
        assert_eq!(x[2].unwrap().how, How::Propagated);
        let y = solve(&[est(10.0, how), est(12.0, how), None], &[100.0, 100.0, 0.0], &eqs, &[None; 3]);
        assert!(y[2].unwrap().f >= 0.0 && y[2].unwrap().f < 1e-3, "{y:?}");
        let sum = y[1].unwrap().f + y[2].unwrap().f;
        assert!((y[0].unwrap().f - sum).abs() < 1e-3 && y[0].unwrap().f > 10.0 && y[1].unwrap().f < 12.0, "{y:?}");
    }
}
