//! `loupe stats` (DCPI's dcpistats, §3.3 and Figure 3): the same buckets in
//! N sample sets, with the statistics that show which ones vary most across
//! runs, sorted by the normalized range `(max − min) / sum`.
//!
//! ```
//! use loupe_analysis::stats::stats;
//! let rows = stats(vec![("smooth", vec![10, 30]), ("fft", vec![50, 52])]);
//! assert_eq!(rows[0].key, "smooth"); // range 20 of 40 beats 2 of 102
//! ```

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
}

/// One row per bucket `(key, count in each set)`; every count vector has one
/// entry per set. Buckets with no samples anywhere are dropped. Sorted by
/// normalized range, then by sum, descending.
pub fn stats<K>(buckets: Vec<(K, Vec<u64>)>) -> Vec<StatsRow<K>> {
    let mut rows: Vec<StatsRow<K>> = buckets.into_iter().filter_map(|(key, c)| row(key, &c)).collect();
    rows.sort_by(|x, y| y.range.total_cmp(&x.range).then_with(|| y.sum.cmp(&x.sum)));
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
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn figure3_columns_by_hand() {
        // Checks range%, mean, sample standard deviation, min, max and N for counts 2, 4, 4, 4, 5, 5, 7, 9.
        let rows = stats(vec![("p", vec![2, 4, 4, 4, 5, 5, 7, 9])]);
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
        let rows = stats(vec![("big", vec![5000, 5100, 4950]), ("erratic", vec![10, 0, 30]), ("none", vec![0, 0, 0])]);
        assert_eq!(rows.len(), 2);
        assert_eq!(rows[0].key, "erratic");
        assert_eq!((rows[0].n, rows[0].min, rows[0].range), (2, 0, 0.75));
        assert!((rows[1].range - 150.0 / 15050.0).abs() < 1e-12);
    }
}
