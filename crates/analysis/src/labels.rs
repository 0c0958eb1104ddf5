//! Samples per cgroup label (`top --by label:unit`): each process's
//! samples go to the label its cgroup shows ([`loupe_model::cgroup`]).

use loupe_model::{EventName, ImageTotals, ProcessKey};
use std::collections::BTreeMap;

/// The row of processes whose cgroup shows no such label (or is unknown).
pub const NO_LABEL: &str = "[none]";

/// Per label value: samples of each of `events`; rows sorted by the first
/// event's samples, descending, then by label. `label_of` gives a pid's label.
pub fn by_label(
    totals: &[ImageTotals],
    events: &[EventName],
    keep: &dyn Fn(&ProcessKey) -> bool,
    label_of: &dyn Fn(u32) -> Option<String>,
) -> Vec<(String, Vec<u64>)> {
    let mut rows: BTreeMap<String, Vec<u64>> = BTreeMap::new();
    for t in totals {
        let Some(e) = events.iter().position(|e| *e == t.event) else { continue };
        for (p, n) in t.processes.iter().filter(|(p, _)| keep(p)) {
            let label = label_of(p.pid).unwrap_or_else(|| NO_LABEL.to_string());
            rows.entry(label).or_insert_with(|| vec![0; events.len()])[e] += n;
        }
    }
    let mut out: Vec<(String, Vec<u64>)> = rows.into_iter().collect();
    out.sort_by(|a, b| b.1[0].cmp(&a.1[0]).then_with(|| a.0.cmp(&b.0)));
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use loupe_model::ImageId;

    #[test]
    fn samples_sum_per_label_across_images_and_processes() {
        // Checks known counts: two processes of one unit summed, one without a label under [none], filtered processes left out.
        let t = |img: &str, procs: &[(u32, u64)]| ImageTotals {
            image: ImageId::elf(img, None),
            event: EventName::new("cpu-clock"),
            processes: procs.iter().map(|&(p, n)| (ProcessKey::new(p, "x"), n)).collect(),
            period_sum: 0,
        };
        let totals = [t("/a", &[(1, 10), (2, 5), (3, 7)]), t("/b", &[(1, 1), (4, 100)])];
        let label = |pid: u32| match pid {
            1 | 2 => Some("a.service".to_string()),
            3 => None,
            _ => Some("b.service".to_string()),
        };
        let rows = by_label(&totals, &[EventName::new("cpu-clock")], &|p| p.pid != 4, &label);
        assert_eq!(rows, vec![("a.service".to_string(), vec![16]), (NO_LABEL.to_string(), vec![7])]);
    }
}
