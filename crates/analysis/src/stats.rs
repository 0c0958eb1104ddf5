//! `loupe stats` (DCPI's dcpistats, §3.3 and Figure 3): the same buckets in
//! N sample sets, with the statistics that show which ones vary most across
//! runs, sorted by the normalized range `(max − min) / sum`.
//!
//! A bucket with a handful of samples has a large normalized range from
//! sampling noise alone (one sample in one run: 100%). So every row also
//! carries a Poisson dispersion test of its counts, controlled across rows
//! with Benjamini–Hochberg, and rows whose variation is not significant sort
//! below the ones whose variation is.
//!
//! ```
//! use loupe_analysis::stats::stats;
//! let rows = stats(vec![("smooth", vec![10, 30]), ("fft", vec![50, 52])], 0.05);
//! assert_eq!(rows[0].key, "smooth"); // range 20 of 40 beats 2 of 102
//! ```

use crate::significance::{bh_adjust, dispersion_p_value};

#[derive(Clone, Debug, PartialEq)]
pub struct StatsRow<K> {
    pub key: K,
    /// (max − min) / sum, as a fraction.
    pub range: f64,
    pub sum: u64,
    /// Sets in which the bucket has samples.
    pub n: usize,
    /// Mean, standard deviation (n − 1 denominator), min and max over all
    /// sets; a set without the bucket counts as 0 there.
    pub mean: f64,
    pub std_dev: f64,
    pub min: u64,
    pub max: u64,
    /// Dispersion test p-value, and whether it passes Benjamini–Hochberg at the level given.
    pub p_value: f64,
    pub significant: bool,
}

/// One row per bucket `(key, count in each set)`; every count vector has one
/// entry per set. Buckets with no samples anywhere are dropped. Sorted by
/// normalized range, then by sum, descending; rows whose variation is
/// significant at `level` first.
pub fn stats<K>(buckets: Vec<(K, Vec<u64>)>, level: f64) -> Vec<StatsRow<K>> {
    let mut rows: Vec<StatsRow<K>> = buckets.into_iter().filter_map(|(key, c)| row(key, &c)).collect();
    let q = bh_adjust(&rows.iter().map(|r| r.p_value).collect::<Vec<_>>());
    for (r, q) in rows.iter_mut().zip(q) {
        r.significant = q <= level;
    }
    rows.sort_by(|x, y| y.significant.cmp(&x.significant).then_with(|| y.range.total_cmp(&x.range)).then_with(|| y.sum.cmp(&x.sum)));
    rows
}

fn row<K>(key: K, counts: &[u64]) -> Option<StatsRow<K>> {
    let sum: u64 = counts.iter().sum();
    if sum == 0 {
        return None;
    }
    let (min, max) = (*counts.iter().min()?, *counts.iter().max()?);
    let mean = sum as f64 / counts.len() as f64;
    let ss: f64 = counts.iter().map(|&c| (c as f64 - mean).powi(2)).sum();
    let std_dev = if counts.len() > 1 { (ss / (counts.len() - 1) as f64).sqrt() } else { 0.0 };
    Some(StatsRow {
        key,
        range: (max - min) as f64 / sum as f64,
        sum,
        n: counts.iter().filter(|&&c| c > 0).count(),
        mean,
        std_dev,
        min,
        max,
        p_value: dispersion_p_value(counts),
        significant: false,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn figure3_columns_by_hand() {
        // Checks range%, mean, sample standard deviation, min, max and N for counts 2, 4, 4, 4, 5, 5, 7, 9.
        let rows = stats(vec![("p", vec![2, 4, 4, 4, 5, 5, 7, 9])], 0.05);
        let r = &rows[0];
        assert_eq!((r.sum, r.n, r.min, r.max), (40, 8, 2, 9));
        assert_eq!(r.mean, 5.0);
        // Squared deviations sum to 32; 32 / 7.
        assert!((r.std_dev - (32.0f64 / 7.0).sqrt()).abs() < 1e-12);
        assert!((r.range - 7.0 / 40.0).abs() < 1e-12);
    }

    #[test]
    fn sorted_by_normalized_range_not_by_size() {
        // Checks DCPI's order: a small, erratic procedure ranks above a large, steady one; absent sets count 0.
        let rows = stats(vec![("big", vec![5000, 5100, 4950]), ("erratic", vec![10, 0, 30]), ("none", vec![0, 0, 0])], 1.0);
        assert_eq!(rows.len(), 2);
        assert_eq!(rows[0].key, "erratic");
        assert_eq!((rows[0].n, rows[0].min, rows[0].range), (2, 0, 0.75));
        assert!((rows[1].range - 150.0 / 15050.0).abs() < 1e-12);
    }

    #[test]
    fn sampling_noise_sorts_below_real_variation() {
        // Checks that one stray sample (range 100%) sorts below a big procedure that really varies (range ~21%),
        // and that a steady big one is not significant: D = (0 + 100^2 + 100^2)/5000 = 4, 2 df, p = e^-2.
        let rows = stats(vec![("stray", vec![1, 0, 0]), ("varies", vec![1000, 1500, 2000]), ("steady", vec![5000, 4900, 5100])], 0.05);
        assert_eq!(rows[0].key, "varies");
        assert!(rows[0].significant && !rows[1].significant && !rows[2].significant);
        assert_eq!(rows[1].key, "stray");
        let steady = rows.iter().find(|r| r.key == "steady").unwrap();
        assert!((steady.p_value - (-2.0f64).exp()).abs() < 1e-12);
    }
}
