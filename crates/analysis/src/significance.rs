//! Exact tests for sample counts, and multiple-comparison control.
//!
//! Sample counts of one bucket in two profiles are (close to) Poisson. Given
//! their sum `n = a + b`, the count in B is binomial with
//! `p = r / (1 + r)`, where `r` is the expected ratio B/A of a bucket that
//! did not change. That conditional test is exact for any `n`, even 1 or 2
//! samples, so no count threshold is needed (McKenney's "statistical
//! variations can cause false alarms").

/// ln Γ(x) for x > 0 (Lanczos, g = 7, 9 terms; relative error below 1e-13).
fn ln_gamma(x: f64) -> f64 {
    const C: [f64; 9] = [
        0.999_999_999_999_809_9,
        676.520_368_121_885_1,
        -1_259.139_216_722_402_8,
        771.323_428_777_653_1,
        -176.615_029_162_140_6,
        12.507_343_278_686_905,
        -0.138_571_095_265_720_12,
        9.984_369_578_019_572e-6,
        1.505_632_735_149_311_6e-7,
    ];
    if x < 0.5 {
        // Reflection keeps the series in its accurate range.
        let pi = std::f64::consts::PI;
        return (pi / (pi * x).sin()).ln() - ln_gamma(1.0 - x);
    }
    let x = x - 1.0;
    let t = x + 7.5;
    let s: f64 = C[0] + C.iter().enumerate().skip(1).map(|(i, c)| c / (x + i as f64)).sum::<f64>();
    0.5 * (2.0 * std::f64::consts::PI).ln() + (x + 0.5) * t.ln() - t + s.ln()
}

/// Continued fraction of the incomplete beta function (modified Lentz).
fn beta_cf(a: f64, b: f64, x: f64) -> f64 {
    const TINY: f64 = 1e-300;
    let (qab, qap, qam) = (a + b, a + 1.0, a - 1.0);
    let mut c = 1.0;
    let mut d = 1.0 - qab * x / qap;
    d = 1.0 / if d.abs() < TINY { TINY } else { d };
    let mut h = d;
    let step = |d: &mut f64, c: &mut f64, aa: f64| {
        *d = 1.0 + aa * *d;
        *d = 1.0 / if d.abs() < TINY { TINY } else { *d };
        *c = 1.0 + aa / *c;
        if c.abs() < TINY {
            *c = TINY;
        }
    };
    // Convergence takes O(sqrt(max(a, b))) steps; counts of millions stay well inside the bound.
    for m in 1..100_000 {
        let m = m as f64;
        let m2 = 2.0 * m;
        step(&mut d, &mut c, m * (b - m) * x / ((qam + m2) * (a + m2)));
        h *= d * c;
        step(&mut d, &mut c, -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2)));
        let del = d * c;
        h *= del;
        if (del - 1.0).abs() < 1e-15 {
            break;
        }
    }
    h
}

/// The regularized incomplete beta function I_x(a, b).
fn beta_inc(a: f64, b: f64, x: f64) -> f64 {
    if x <= 0.0 {
        return 0.0;
    }
    if x >= 1.0 {
        return 1.0;
    }
    let ln_front = ln_gamma(a + b) - ln_gamma(a) - ln_gamma(b) + a * x.ln() + b * (1.0 - x).ln();
    let front = ln_front.exp();
    if x < (a + 1.0) / (a + b + 2.0) {
        front * beta_cf(a, b, x) / a
    } else {
        1.0 - front * beta_cf(b, a, 1.0 - x) / b
    }
}

/// P(X >= k) for X ~ Binomial(n, p).
pub fn binom_upper(k: u64, n: u64, p: f64) -> f64 {
    if k == 0 {
        return 1.0;
    }
    if k > n {
        return 0.0;
    }
    beta_inc(k as f64, (n - k + 1) as f64, p).clamp(0.0, 1.0)
}

/// P(X <= k) for X ~ Binomial(n, p).
pub fn binom_lower(k: u64, n: u64, p: f64) -> f64 {
    if k >= n {
        return 1.0;
    }
    (1.0 - beta_inc((k + 1) as f64, (n - k) as f64, p)).clamp(0.0, 1.0)
}

/// Two-sided exact p-value that a bucket with `a` samples in A and `b` in B
/// changed by more than the factor `1 + min_change` away from the expected
/// ratio `null_ratio` (B/A of an unchanged bucket).
///
/// With `min_change = 0` this is the conditional binomial test of
/// `b | a + b ~ Bin(a + b, r / (1 + r))`, doubled one-sided (central) form.
/// With `min_change > 0` the null hypothesis is the whole interval
/// `[r / (1 + δ), r (1 + δ)]`, each tail tested against its nearer end, so
/// changes smaller than δ are never called significant however many samples
/// there are.
pub fn change_p_value(a: u64, b: u64, null_ratio: f64, min_change: f64) -> f64 {
    let n = a + b;
    if n == 0 {
        return 1.0;
    }
    let share = |r: f64| r / (1.0 + r);
    let hi = share(null_ratio * (1.0 + min_change));
    let lo = share(null_ratio / (1.0 + min_change));
    let up = binom_upper(b, n, hi);
    let down = binom_lower(b, n, lo);
    (2.0 * up.min(down)).min(1.0)
}

/// Regularized upper incomplete gamma Q(a, x) = Γ(a, x) / Γ(a).
fn gamma_q(a: f64, x: f64) -> f64 {
    if x <= 0.0 {
        return 1.0;
    }
    let front = (-x + a * x.ln() - ln_gamma(a)).exp();
    if x < a + 1.0 {
        // Series for P(a, x).
        let (mut term, mut sum, mut ap) = (1.0 / a, 1.0 / a, a);
        for _ in 0..100_000 {
            ap += 1.0;
            term *= x / ap;
            sum += term;
            if term.abs() < sum.abs() * 1e-15 {
                break;
            }
        }
        (1.0 - sum * front).clamp(0.0, 1.0)
    } else {
        // Continued fraction for Q(a, x) (modified Lentz).
        const TINY: f64 = 1e-300;
        let mut b = x + 1.0 - a;
        let mut c = 1.0 / TINY;
        let mut d = 1.0 / b;
        let mut h = d;
        for i in 1..100_000 {
            let an = -(i as f64) * (i as f64 - a);
            b += 2.0;
            d = an * d + b;
            d = 1.0 / if d.abs() < TINY { TINY } else { d };
            c = b + an / c;
            if c.abs() < TINY {
                c = TINY;
            }
            let del = d * c;
            h *= del;
            if (del - 1.0).abs() < 1e-15 {
                break;
            }
        }
        (front * h).clamp(0.0, 1.0)
    }
}

/// P(χ²_k >= x).
pub fn chi2_upper(x: f64, k: f64) -> f64 {
    gamma_q(k / 2.0, x / 2.0)
}

/// Poisson index-of-dispersion test: p-value that counts of one bucket in
/// N runs vary more than sampling alone would make them vary, if every run
/// had the same expected count. `Σ (c − mean)² / mean` is χ² with N − 1
/// degrees of freedom under that hypothesis.
pub fn dispersion_p_value(counts: &[u64]) -> f64 {
    let n = counts.len();
    let sum: u64 = counts.iter().sum();
    if n < 2 || sum == 0 {
        return 1.0;
    }
    let mean = sum as f64 / n as f64;
    let d: f64 = counts.iter().map(|&c| (c as f64 - mean).powi(2)).sum::<f64>() / mean;
    chi2_upper(d, (n - 1) as f64)
}

/// Benjamini–Hochberg step-up adjusted p-values (q-values), in input order.
/// Rejecting every hypothesis with `q <= level` controls the false discovery
/// rate at `level`; when no bucket changed at all, it also bounds the chance
/// of even one false alarm in the whole table by `level`.
pub fn bh_adjust(p: &[f64]) -> Vec<f64> {
    let m = p.len();
    let mut order: Vec<usize> = (0..m).collect();
    order.sort_by(|&i, &j| p[i].total_cmp(&p[j]));
    let mut q = vec![1.0; m];
    let mut running = 1.0f64;
    // From the largest p down: q_(k) = min over j >= k of p_(j) m / j.
    for (rank, &i) in order.iter().enumerate().rev() {
        running = running.min(p[i] * m as f64 / (rank + 1) as f64);
        q[i] = running.min(1.0);
    }
    q
}

/// The sample-weighted median of the ratios b/a over buckets present on both
/// sides: the ratio of a "typical" unchanged bucket (the median-of-ratios
/// normalization of count data). Robust to the few buckets that did change,
/// as long as they hold less than half of the samples. `None` when no
/// bucket has samples on both sides.
pub fn median_ratio(pairs: &[(u64, u64)]) -> Option<f64> {
    let mut r: Vec<(f64, u64)> = pairs.iter().filter(|(a, b)| *a > 0 && *b > 0).map(|&(a, b)| (b as f64 / a as f64, a + b)).collect();
    if r.is_empty() {
        return None;
    }
    r.sort_by(|x, y| x.0.total_cmp(&y.0));
    let total: u64 = r.iter().map(|x| x.1).sum();
    let mut acc = 0;
    for (ratio, w) in &r {
        acc += w;
        if 2 * acc >= total {
            return Some(*ratio);
        }
    }
    r.last().map(|x| x.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(x: f64, y: f64, tol: f64) -> bool {
        (x - y).abs() <= tol * y.abs().max(1e-300)
    }

    #[test]
    fn ln_gamma_matches_factorials() {
        // Checks ln Γ(n) = ln((n-1)!) at small and large n, and Γ(1/2) = sqrt(pi).
        assert!(close(ln_gamma(5.0), 24f64.ln(), 1e-12));
        assert!(close(ln_gamma(11.0), 3_628_800f64.ln(), 1e-12));
        assert!(close(ln_gamma(0.5), std::f64::consts::PI.sqrt().ln(), 1e-12));
    }

    #[test]
    fn binomial_tails_match_hand_sums() {
        // Checks P(X>=9), P(X>=10), P(X<=1) of Bin(10, 1/2): 11/1024, 1/1024, 11/1024.
        assert!(close(binom_upper(9, 10, 0.5), 11.0 / 1024.0, 1e-10));
        assert!(close(binom_upper(10, 10, 0.5), 1.0 / 1024.0, 1e-10));
        assert!(close(binom_lower(1, 10, 0.5), 11.0 / 1024.0, 1e-10));
        // Bin(3, 0.2): P(X>=2) = 3*0.04*0.8 + 0.008 = 0.104.
        assert!(close(binom_upper(2, 3, 0.2), 0.104, 1e-10));
        assert_eq!(binom_upper(0, 3, 0.2), 1.0);
        assert_eq!(binom_lower(3, 3, 0.2), 1.0);
    }

    #[test]
    fn binomial_tail_is_accurate_for_large_counts() {
        // Checks Bin(20000, 1/2) at its mean (~0.5028) and far in the tail against the normal approximation's order.
        let at_mean = binom_upper(10_000, 20_000, 0.5);
        assert!((at_mean - 0.502_82).abs() < 1e-4, "{at_mean}");
        let far = binom_upper(10_500, 20_000, 0.5); // z = 7.07
        assert!(far > 1e-13 && far < 1e-11, "{far}");
    }

    #[test]
    fn change_p_value_is_the_doubled_exact_tail() {
        // Checks 1 vs 9 samples with expected ratio 1: 2 * 11/1024; and equal counts give p = 1.
        assert!(close(change_p_value(1, 9, 1.0, 0.0), 22.0 / 1024.0, 1e-10));
        assert_eq!(change_p_value(50, 50, 1.0, 0.0), 1.0);
        assert_eq!(change_p_value(0, 0, 1.0, 0.0), 1.0);
    }

    #[test]
    fn min_change_tolerates_small_changes_with_many_samples() {
        // Checks that a 3% change in a million samples is significant against an exact null but not against ±5%.
        let (a, b) = (1_000_000, 1_030_000);
        assert!(change_p_value(a, b, 1.0, 0.0) < 1e-10);
        assert!(change_p_value(a, b, 1.0, 0.05) > 0.5);
        assert!(change_p_value(a, 2 * a, 1.0, 0.05) < 1e-10);
    }

    #[test]
    fn chi2_tail_matches_closed_forms() {
        // Checks P(χ²_2 >= x) = e^(-x/2) and the 5% critical values 3.841 (1 df) and 14.067 (7 df).
        assert!(close(chi2_upper(3.0, 2.0), (-1.5f64).exp(), 1e-12));
        assert!((chi2_upper(3.841_458_8, 1.0) - 0.05).abs() < 1e-7);
        assert!((chi2_upper(14.067_140_4, 7.0) - 0.05).abs() < 1e-7);
        assert_eq!(chi2_upper(0.0, 3.0), 1.0);
    }

    #[test]
    fn dispersion_separates_poisson_noise_from_real_variation() {
        // Checks D = Σ(c-m)²/m: [100, 110, 90, 100] gives D = 2 (3 df, p = 0.5724); [100, 200, 100, 200] gives D = 66.7.
        assert!((dispersion_p_value(&[100, 110, 90, 100]) - 0.572_406_7).abs() < 1e-6);
        assert!(dispersion_p_value(&[100, 200, 100, 200]) < 1e-12);
        assert_eq!(dispersion_p_value(&[0, 0, 0]), 1.0);
    }

    #[test]
    fn bh_matches_hand_computation() {
        // Checks q-values of [0.01, 0.04, 0.03, 0.2]: sorted p * m / rank, made monotone from the top:
        // 0.2 -> 0.2; 0.04 * 4/3 = 0.0533; 0.03 * 4/2 = 0.06 -> 0.0533; 0.01 * 4 = 0.04.
        let q = bh_adjust(&[0.01, 0.04, 0.03, 0.2]);
        let want = [0.04, 0.04 * 4.0 / 3.0, 0.04 * 4.0 / 3.0, 0.2];
        for (g, w) in q.iter().zip(want) {
            assert!(close(*g, w, 1e-12), "{q:?}");
        }
    }

    #[test]
    fn median_ratio_ignores_a_minority_that_changed() {
        // Checks the weighted median: (100,100) and (50,50) outweigh (10,40); empty input gives None.
        assert_eq!(median_ratio(&[(100, 100), (50, 50), (10, 40)]), Some(1.0));
        assert_eq!(median_ratio(&[(10, 40), (100, 300), (5, 0)]), Some(3.0));
        assert_eq!(median_ratio(&[(0, 4)]), None);
    }
}
