//! Differential profiles (McKenney, "Differential Profiling"): combine the
//! same bucket of two profiles — A, the less stressed run, and B, the more
//! stressed one — and sort the buckets by how they changed.
//!
//! * ratio: `m_B / m_A`, descending;
//! * weighted: `d = w_A m_B − w_B m_A` (his equation 3), descending;
//! * saturation: the load at which the bucket reaches `M_S` by linear
//!   projection through the two measurements (equation 4), ascending;
//! * powerlaw: the same by a power-law projection (equation 5), ascending.
//!
//! Each bucket also gets an exact significance test of its change (see
//! [`crate::significance`]); rows whose change is not significant after
//! Benjamini–Hochberg control sort below the significant ones.
//!
//! ```
//! use loupe_analysis::diff::{diff, DiffParams, Mode};
//! let rows = diff(vec![("poly2", 1, 12), ("log", 409, 554), ("poly1", 60, 70)],
//!                 &DiffParams { work: Some((3.0, 4.0)), ..DiffParams::new(Mode::Ratio) }).unwrap();
//! assert_eq!(rows[0].key, "poly2");
//! assert!(rows[0].significant && !rows[1].significant);
//! ```

use crate::significance::{bh_adjust, change_p_value, median_ratio};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    Ratio,
    Weighted,
    Saturation,
    PowerLaw,
}

impl Mode {
    pub fn name(self) -> &'static str {
        match self {
            Mode::Ratio => "ratio",
            Mode::Weighted => "weighted",
            Mode::Saturation => "saturation",
            Mode::PowerLaw => "powerlaw",
        }
    }
    /// Projected loads sort ascending (nearest to saturation first); the others descending.
    pub fn ascending(self) -> bool {
        matches!(self, Mode::Saturation | Mode::PowerLaw)
    }
}

#[derive(Clone, Debug, PartialEq)]
pub struct DiffParams {
    pub mode: Mode,
    /// Work done in A and B (`w_A`, `w_B`). Also sets the ratio an unchanged
    /// bucket is expected to have, `w_B / w_A`. Without it that ratio is
    /// estimated from the profiles ([`median_ratio`]) and used as `w_B / w_A`.
    pub work: Option<(f64, f64)>,
    /// Offered loads `l_A`, `l_B` (saturation and powerlaw modes).
    pub load: Option<(f64, f64)>,
    /// The saturation measurement `M_S`, in the units of [`DiffParams::scale`]'d measurements.
    pub saturation: f64,
    /// Measurements are `count / scale` per side (e.g. the side's total, so a
    /// measurement is a fraction of all samples); `(1, 1)` keeps counts.
    pub scale: (f64, f64),
    /// Significance level for the Benjamini–Hochberg-controlled test; 1 marks
    /// every row significant (McKenney's plain ordering).
    pub level: f64,
    /// Relative changes up to this size are treated as no change (0 = exact null).
    pub min_change: f64,
}

impl DiffParams {
    pub fn new(mode: Mode) -> DiffParams {
        DiffParams { mode, work: None, load: None, saturation: 1.0, scale: (1.0, 1.0), level: 0.05, min_change: 0.0 }
    }
}

#[derive(Clone, Debug, PartialEq)]
pub struct DiffRow<K> {
    pub key: K,
    pub a: u64,
    pub b: u64,
    pub score: f64,
    /// Exact two-sided p-value of the change.
    pub p_value: f64,
    /// Benjamini–Hochberg adjusted p-value; significant when `<= level`.
    pub q_value: f64,
    pub significant: bool,
}

#[derive(Clone, Debug, PartialEq)]
pub enum DiffError {
    /// Saturation and powerlaw modes need the two loads.
    NeedLoad,
    /// A parameter out of range, named.
    Bad(String),
}

impl std::fmt::Display for DiffError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DiffError::NeedLoad => write!(f, "saturation and powerlaw modes need the two loads (--load L_A L_B)"),
            DiffError::Bad(s) => write!(f, "{s}"),
        }
    }
}

impl std::error::Error for DiffError {}

/// The mode's score of one bucket from its two measurements.
pub fn score(mode: Mode, m_a: f64, m_b: f64, work: (f64, f64), load: (f64, f64), m_s: f64) -> f64 {
    match mode {
        Mode::Ratio => ratio(m_a, m_b),
        Mode::Weighted => work.0 * m_b - work.1 * m_a,
        Mode::Saturation => linear_saturation(m_a, m_b, load, m_s),
        Mode::PowerLaw => powerlaw_saturation(m_a, m_b, load, m_s),
    }
}

fn ratio(m_a: f64, m_b: f64) -> f64 {
    if m_a > 0.0 {
        m_b / m_a
    } else if m_b > 0.0 {
        f64::INFINITY
    } else {
        f64::NAN
    }
}

/// Equation 4: `s = (M_S − m_B)(l_B − l_A)/(m_B − m_A) + l_B`. A bucket that
/// does not grow never saturates (infinite load).
pub fn linear_saturation(m_a: f64, m_b: f64, (l_a, l_b): (f64, f64), m_s: f64) -> f64 {
    if m_b <= m_a {
        return f64::INFINITY;
    }
    (m_s - m_b) * (l_b - l_a) / (m_b - m_a) + l_b
}

/// Equation 5, `ln s = ln(M_S/m_B) ln(l_B/l_A) / ln(m_B/m_A) + ln l_B`,
/// returned as the load itself (`e^s`), so both projections read alike.
pub fn powerlaw_saturation(m_a: f64, m_b: f64, (l_a, l_b): (f64, f64), m_s: f64) -> f64 {
    if m_b <= m_a || m_b <= 0.0 {
        return f64::INFINITY;
    }
    let growth = (m_b / m_a).ln(); // +inf when m_A = 0: saturation right at l_B
    ((m_s / m_b).ln() * (l_b / l_a).ln() / growth + l_b.ln()).exp()
}

/// Scores, tests and sorts buckets `(key, count in A, count in B)`. Buckets
/// with no samples on either side are dropped.
pub fn diff<K>(buckets: Vec<(K, u64, u64)>, p: &DiffParams) -> Result<Vec<DiffRow<K>>, DiffError> {
    check(p)?;
    let buckets: Vec<(K, u64, u64)> = buckets.into_iter().filter(|(_, a, b)| a + b > 0).collect();
    let pairs: Vec<(u64, u64)> = buckets.iter().map(|(_, a, b)| (*a, *b)).collect();
    let work = match p.work {
        Some(w) => w,
        None => (1.0, median_ratio(&pairs).unwrap_or(1.0)),
    };
    let null_ratio = null_ratio(p, work);
    let load = p.load.unwrap_or((1.0, 2.0));
    let pvals: Vec<f64> = pairs.iter().map(|&(a, b)| change_p_value(a, b, null_ratio, p.min_change)).collect();
    let qvals = bh_adjust(&pvals);
    let mut rows: Vec<DiffRow<K>> = buckets
        .into_iter()
        .zip(pvals.into_iter().zip(qvals))
        .map(|((key, a, b), (p_value, q_value))| {
            let (m_a, m_b) = (a as f64 / p.scale.0, b as f64 / p.scale.1);
            let score = score(p.mode, m_a, m_b, work, load, p.saturation);
            DiffRow { key, a, b, score, p_value, q_value, significant: q_value <= p.level }
        })
        .collect();
    sort_rows(&mut rows, p.mode);
    Ok(rows)
}

/// A measured row: key, measurement in A and in B, score.
pub type MeasuredRow<K> = (K, f64, f64, f64);

/// Scores and orders measurements that are not sample counts (a lock's
/// held fraction, McKenney's "Pinpointing Contention" step 4). They carry
/// no sampling noise to test, so there is no p-value.
pub fn diff_measured<K>(rows: Vec<(K, f64, f64)>, p: &DiffParams) -> Result<Vec<MeasuredRow<K>>, DiffError> {
    check(p)?;
    let work = p.work.unwrap_or((1.0, 1.0));
    let load = p.load.unwrap_or((1.0, 2.0));
    let mut out: Vec<MeasuredRow<K>> =
        rows.into_iter().map(|(k, a, b)| (k, a, b, score(p.mode, a / p.scale.0, b / p.scale.1, work, load, p.saturation))).collect();
    out.sort_by(|x, y| {
        let o = x.3.is_nan().cmp(&y.3.is_nan()).then_with(|| x.3.total_cmp(&y.3));
        if p.mode.ascending() || x.3.is_nan() != y.3.is_nan() {
            o
        } else {
            o.reverse()
        }
    });
    Ok(out)
}

/// The B/A count ratio of a bucket that did not change, in raw counts. For
/// ratio and weighted profiles that is the ratio of the work done (a bucket
/// that scales with the work is unremarkable); for projections it is an
/// unchanged measurement, since a projection through a change that is only
/// noise may land at any load.
fn null_ratio(p: &DiffParams, work: (f64, f64)) -> f64 {
    if p.mode.ascending() {
        p.scale.1 / p.scale.0
    } else {
        work.1 / work.0
    }
}

fn check(p: &DiffParams) -> Result<(), DiffError> {
    if p.mode.ascending() && p.load.is_none() {
        return Err(DiffError::NeedLoad);
    }
    if let Some((a, b)) = p.work {
        if !(a > 0.0 && b > 0.0) {
            return Err(DiffError::Bad(format!("--work must be two positive numbers, not {a} {b}")));
        }
    }
    if let Some((a, b)) = p.load {
        if !(a > 0.0 && b > a) {
            return Err(DiffError::Bad(format!("--load needs 0 < L_A < L_B (B is the more stressed side), not {a} {b}")));
        }
    }
    if !(p.level > 0.0 && p.level <= 1.0) {
        return Err(DiffError::Bad(format!("--level must lie in (0, 1], not {}", p.level)));
    }
    Ok(())
}

/// Significant rows first, then by the mode's order; ties and NaN scores
/// (no samples in A, ratio 0/0) after, larger B first.
pub fn sort_rows<K>(rows: &mut [DiffRow<K>], mode: Mode) {
    rows.sort_by(|x, y| {
        y.significant.cmp(&x.significant).then_with(|| x.score.is_nan().cmp(&y.score.is_nan())).then_with(|| {
            let o = x.score.total_cmp(&y.score);
            if mode.ascending() {
                o
            } else {
                o.reverse()
            }
        })
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys<K: Clone>(rows: &[DiffRow<K>]) -> Vec<K> {
        rows.iter().map(|r| r.key.clone()).collect()
    }

    #[test]
    fn mckenney_table2_ratio_puts_the_power_law_function_first() {
        // Checks example 1 (Table 2, loads 3 and 4): poly2 (O(n^9)) first with ratio 12, the linear ones not significant.
        let p = DiffParams { work: Some((3.0, 4.0)), ..DiffParams::new(Mode::Ratio) };
        let rows = diff(vec![("log", 409, 554), ("poly1", 60, 70), ("poly2", 1, 12)], &p).unwrap();
        assert_eq!(keys(&rows), ["poly2", "log", "poly1"]);
        assert_eq!(rows[0].score, 12.0);
        assert!((rows[1].score - 554.0 / 409.0).abs() < 1e-12);
        // poly2: 2 P(X >= 12 | Bin(13, 4/7)) = 2 (13 (4/7)^12 (3/7) + (4/7)^13) = 0.01478...
        let p4 = 4.0f64 / 7.0;
        let want = 2.0 * (13.0 * p4.powi(12) * (3.0 / 7.0) + p4.powi(13));
        assert!((rows[0].p_value - want).abs() < 1e-9, "{} vs {want}", rows[0].p_value);
        assert!(rows[0].significant);
        assert!(!rows[1].significant && !rows[2].significant);
    }

    #[test]
    fn mckenney_table4_weighted_by_line_puts_the_shared_list_compare_first() {
        // Checks example 2 (Table 4, 1 vs 2 CPUs, work = CPUs): d = w1 m2 - w2 m1 for every line, line 64 first.
        let table = [
            (64, 61, 519, 397.0),
            (75, 198, 457, 61.0),
            (68, 74, 162, 14.0),
            (71, 96, 206, 14.0),
            (72, 4, 18, 10.0),
            (76, 13, 25, -1.0),
            (73, 279, 556, -2.0),
            (65, 16, 21, -11.0),
            (70, 214, 417, -11.0),
            (66, 68, 108, -28.0),
        ];
        let p = DiffParams { work: Some((1.0, 2.0)), level: 1.0, ..DiffParams::new(Mode::Weighted) };
        let rows = diff(table.iter().map(|&(l, a, b, _)| (l, a, b)).collect(), &p).unwrap();
        for &(line, _, _, d) in &table {
            assert_eq!(rows.iter().find(|r| r.key == line).unwrap().score, d, "line {line}");
        }
        // With every row significant the order is the paper's (ties 68/71 and 65/70 in either order).
        let order = keys(&rows);
        assert_eq!(order[..2], [64, 75]);
        assert_eq!(order[4..7], [72, 76, 73]);
        assert_eq!(order[9], 66);
        // At the default level only line 64's change stands out of the noise.
        let rows = diff(table.iter().map(|&(l, a, b, _)| (l, a, b)).collect(), &DiffParams { level: 0.05, ..p }).unwrap();
        assert_eq!(rows[0].key, 64);
        assert!(rows[0].significant && rows[0].p_value < 1e-30);
    }

    #[test]
    fn mckenney_table1_saturation_finds_the_disk() {
        // Checks Table 1: linear saturation loads 20, 9, 3 (CPU, memory, disk) and ascending order.
        for (m1, m2, lsl) in [(0.05, 0.10, 20.0), (0.20, 0.30, 9.0), (0.98, 0.99, 3.0)] {
            let s = linear_saturation(m1, m2, (1.0, 2.0), 1.0);
            assert!((s - lsl).abs() < 1e-9, "{m1} {m2}: {s}");
        }
        // Counts out of 100 per side, so measurements are the table's fractions.
        let p = DiffParams { load: Some((1.0, 2.0)), scale: (100.0, 100.0), level: 1.0, ..DiffParams::new(Mode::Saturation) };
        let rows = diff(vec![("cpu", 5, 10), ("memory", 20, 30), ("disk", 98, 99)], &p).unwrap();
        assert_eq!(keys(&rows), ["disk", "memory", "cpu"]);
    }

    #[test]
    fn powerlaw_projection_is_exact_for_power_laws() {
        // Checks m = 0.01 l^2 measured at l = 1, 2 saturates (m = 1) at l = 10; linear projection says 34.
        let s = powerlaw_saturation(0.01, 0.04, (1.0, 2.0), 1.0);
        assert!((s - 10.0).abs() < 1e-9, "{s}");
        assert!((linear_saturation(0.01, 0.04, (1.0, 2.0), 1.0) - 34.0).abs() < 1e-9);
        assert_eq!(powerlaw_saturation(0.04, 0.04, (1.0, 2.0), 1.0), f64::INFINITY);
    }

    #[test]
    fn lock_nearest_saturation_comes_first_though_cpu_profiles_rank_it_lower() {
        // Checks example 3: lock X (held 30% -> 60% of the time) saturates at load 3.33, lock Y
        // (5% -> 15%) at 10.5; the CPU samples in their critical sections rank Y above X by ratio and by size.
        let holds = [("X", 0.30, 0.60), ("Y", 0.05, 0.15)];
        let mut sat: Vec<(&str, f64)> = holds.iter().map(|&(k, a, b)| (k, linear_saturation(a, b, (1.0, 2.0), 1.0))).collect();
        sat.sort_by(|x, y| x.1.total_cmp(&y.1));
        assert_eq!(sat[0].0, "X");
        assert!((sat[0].1 - (0.4 / 0.3 + 2.0)).abs() < 1e-9 && (sat[1].1 - 10.5).abs() < 1e-9);
        // Lock X's hold fraction in samples out of 1000 per side feeds the same diff.
        let p = DiffParams { load: Some((1.0, 2.0)), scale: (1000.0, 1000.0), ..DiffParams::new(Mode::Saturation) };
        let rows = diff(vec![("Y", 50, 150), ("X", 300, 600)], &p).unwrap();
        assert_eq!(keys(&rows), ["X", "Y"]);
        let cpu = vec![("other", 5000, 10_000), ("X", 300, 600), ("Y", 500, 1500)];
        let rows = diff(cpu, &DiffParams::new(Mode::Ratio)).unwrap();
        assert_eq!(rows[0].key, "Y");
    }

    #[test]
    fn measured_held_fractions_rank_the_lock_nearest_saturation_first() {
        // Checks diff_measured on McKenney's two locks: X (0.30 -> 0.60) saturates at 3.33, Y (0.05 -> 0.15) at 10.5.
        let p = DiffParams { load: Some((1.0, 2.0)), ..DiffParams::new(Mode::Saturation) };
        let rows = diff_measured(vec![("Y", 0.05, 0.15), ("X", 0.30, 0.60), ("Z", 0.2, 0.1)], &p).unwrap();
        let order: Vec<&str> = rows.iter().map(|r| r.0).collect();
        assert_eq!(order, ["X", "Y", "Z"]);
        assert!((rows[1].3 - 10.5).abs() < 1e-9 && rows[2].3.is_infinite());
    }

    #[test]
    fn estimated_null_ratio_keeps_unchanged_buckets_quiet() {
        // Checks that without --work a doubled bucket is significant and unchanged ones are not,
        // although B's total grew (the median ratio, 1, is the null, not B's total / A's total).
        let rows = diff(vec![("f", 1000, 2000), ("g", 1000, 1010), ("h", 1500, 1480), ("k", 0, 0)], &DiffParams::new(Mode::Ratio)).unwrap();
        assert_eq!(rows.len(), 3);
        assert_eq!(rows[0].key, "f");
        assert!(rows[0].significant);
        assert!(rows[1..].iter().all(|r| !r.significant));
    }

    #[test]
    fn bad_parameters_are_named() {
        // Checks the load requirement of saturation mode and range checks.
        assert_eq!(diff::<u8>(vec![], &DiffParams::new(Mode::Saturation)), Err(DiffError::NeedLoad));
        let p = DiffParams { load: Some((2.0, 1.0)), ..DiffParams::new(Mode::PowerLaw) };
        assert!(diff::<u8>(vec![], &p).unwrap_err().to_string().contains("L_A < L_B"));
    }
}
