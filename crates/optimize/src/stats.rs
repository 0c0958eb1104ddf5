//! The small statistics the manager decides with: a Poisson upper bound
//! for sampled counts, medians, and a sign test over alternating runs.

/// One-sided 95% upper bound on a Poisson mean from `s` observed samples
/// (score interval, z = 1.645): 2.7 for no sample, s + 1.645 sqrt(s) + ... above.
pub fn poisson_upper(s: f64) -> f64 {
    const Z: f64 = 1.645;
    s + Z * Z / 2.0 + Z * (s + Z * Z / 4.0).sqrt()
}

/// One-sided lower bound on a Poisson mean from `s` observed samples (the
/// same score interval) at normal quantile `z`: 1.645 for 95%, 3.09 for
/// 99.9%; 0 for no sample.
pub fn poisson_lower(s: f64, z: f64) -> f64 {
    (s + z * z / 2.0 - z * (s + z * z / 4.0).sqrt()).max(0.0)
}

pub fn median(v: &[f64]) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    let n = s.len();
    if n % 2 == 1 {
        s[n / 2]
    } else {
        (s[n / 2 - 1] + s[n / 2]) / 2.0
    }
}

/// One-sided sign-test p-value: the chance of at least `wins` wins in `n`
/// fair coin tosses.
pub fn sign_test(wins: usize, n: usize) -> f64 {
    let mut p = 0.0;
    for k in wins..=n {
        p += binom(n, k) * 0.5f64.powi(n as i32);
    }
    p
}

fn binom(n: usize, k: usize) -> f64 {
    (0..k).fold(1.0, |acc, i| acc * (n - i) as f64 / (i + 1) as f64)
}

#[cfg(test)]
mod tests {
    use super::*;

    // No sample still leaves room for about 2.7 (exact Poisson: 3.0).
    #[test]
    fn upper_bounds() {
        assert!((poisson_upper(0.0) - 2.706).abs() < 0.01);
        assert!((poisson_upper(100.0) - 118.0).abs() < 0.5);
        assert_eq!(poisson_lower(0.0, 1.645), 0.0);
        assert!((poisson_lower(1.0, 1.645) - 0.22).abs() < 0.01 && (poisson_lower(100.0, 1.645) - 84.8).abs() < 0.5);
        assert!(poisson_lower(1.0, 3.09) < 0.1);
    }

    // Medians of odd and even lengths.
    #[test]
    fn medians() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&[4.0, 1.0, 3.0, 2.0]), 2.5);
    }

    // 10 wins of 10 is 1/1024; 5 of 10 is over a half.
    #[test]
    fn sign() {
        assert!((sign_test(10, 10) - 1.0 / 1024.0).abs() < 1e-12);
        assert!((sign_test(5, 10) - 638.0 / 1024.0).abs() < 1e-12);
    }
}
