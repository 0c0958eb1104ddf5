//! Lines up the rows of several `top` reports (one per run or side) by
//! bucket, the input of [`crate::diff`] and [`crate::stats`].

use crate::top::TopReport;
use std::collections::BTreeMap;

/// A bucket: image, and procedure and line/address as the grouping has them.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct BucketKey {
    pub image: String,
    pub procedure: Option<String>,
    pub line: Option<String>,
}

/// One entry per bucket present in any report, with its count (first event
/// of each report) in every report, 0 where absent. Ordered by key.
pub fn align(reports: &[TopReport]) -> Vec<(BucketKey, Vec<u64>)> {
    let mut out: BTreeMap<BucketKey, Vec<u64>> = BTreeMap::new();
    for (i, r) in reports.iter().enumerate() {
        for row in &r.rows {
            let key = BucketKey { image: row.image.clone(), procedure: row.procedure.clone(), line: row.line.clone() };
            out.entry(key).or_insert_with(|| vec![0; reports.len()])[i] += row.counts.first().copied().unwrap_or(0);
        }
    }
    out.into_iter().collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::top::TopRow;
    use loupe_model::EventName;

    fn report(rows: &[(&str, &str, u64)]) -> TopReport {
        let rows = rows
            .iter()
            .map(|&(img, p, n)| TopRow { image: img.into(), procedure: Some(p.into()), line: None, counts: vec![n] })
            .collect::<Vec<_>>();
        let total = rows.iter().map(|r| r.counts[0]).sum();
        TopReport { events: vec![EventName::new("cpu-clock")], totals: vec![total], unknown: vec![0], rows, unnamed: Default::default() }
    }

    #[test]
    fn buckets_missing_on_one_side_get_zero() {
        // Checks alignment by (image, procedure): f in both, g only in A, h only in B; same name in two images stays apart.
        let a = report(&[("/bin/x", "f", 5), ("/bin/x", "g", 2), ("/lib/y", "f", 1)]);
        let b = report(&[("/bin/x", "f", 7), ("/bin/x", "h", 3)]);
        let got: Vec<(String, String, Vec<u64>)> = align(&[a, b]).into_iter().map(|(k, v)| (k.image, k.procedure.unwrap(), v)).collect();
        let want = [("/bin/x", "f", vec![5, 7]), ("/bin/x", "g", vec![2, 0]), ("/bin/x", "h", vec![0, 3]), ("/lib/y", "f", vec![1, 0])];
        assert_eq!(got, want.map(|(i, p, v)| (i.to_string(), p.to_string(), v)));
    }
}
