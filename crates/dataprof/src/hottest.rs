//! What to watch with hardware breakpoints (DProf §4.3): the hottest heap
//! type in the access samples (or a named one), its most common allocation
//! site and object size, and its hottest fields as aligned 1/2/4/8-byte
//! ranges (the debug registers' lengths). Pure: no IO.

use std::collections::HashMap;

/// One access sample that landed in a heap block of the allocation log.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HeapAccess {
    pub type_name: String,
    pub field: String,
    /// The allocation site's label (`make_msg (queue.c:44)`).
    pub site: String,
    /// The block's size in bytes.
    pub size: u64,
    /// The access's offset from the block's start.
    pub offset: u64,
    /// The access's width in bytes.
    pub width: u64,
}

/// A range to watch and the samples that chose it.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct HotField {
    pub field: String,
    pub offset: u64,
    pub len: u64,
    pub samples: u64,
}

#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Choice {
    pub type_name: String,
    /// Heap samples of the type, all sites and sizes.
    pub type_samples: u64,
    pub site: String,
    pub size: u64,
    /// Samples of the type in blocks of this site and size.
    pub samples: u64,
    /// At most four, hottest first.
    pub fields: Vec<HotField>,
}

/// The hottest type (or `want`), its commonest (site, size), and up to four
/// hottest fields of those objects. Accesses are grouped by field and
/// 8-byte word (a field wider than a debug register is watched at its
/// hottest word); each group's range is the smallest aligned 1/2/4/8 range
/// covering its accesses within that word. None when no sample fits.
pub fn choose(rows: &[HeapAccess], want: Option<&str>) -> Option<Choice> {
    let by_type = count(rows.iter().filter(|r| want.is_none_or(|w| r.type_name == w)).map(|r| r.type_name.as_str()));
    let (type_name, type_samples) = best(by_type)?;
    let of_type: Vec<&HeapAccess> = rows.iter().filter(|r| r.type_name == type_name).collect();
    let ((site, size), samples) = best(count(of_type.iter().map(|r| (r.site.as_str(), r.size))))?;
    let mut groups: HashMap<(&str, u64), (u64, u64, u64)> = HashMap::new();
    for r in of_type.iter().filter(|r| r.site == site && r.size == size) {
        let word = r.offset / 8 * 8;
        let hi = (r.offset + r.width.max(1)).min(word + 8);
        let g = groups.entry((r.field.as_str(), word)).or_insert((r.offset, hi, 0));
        (g.0, g.1, g.2) = (g.0.min(r.offset), g.1.max(hi), g.2 + 1);
    }
    let mut fields: Vec<HotField> = groups
        .into_iter()
        .map(|((field, _), (lo, hi, n))| {
            let (offset, len) = cover(lo, hi);
            HotField { field: field.to_string(), offset, len, samples: n }
        })
        .collect();
    fields.sort_by(|a, b| b.samples.cmp(&a.samples).then(a.offset.cmp(&b.offset)).then(a.field.cmp(&b.field)));
    let mut seen = Vec::new();
    fields.retain(|f| {
        let new = !seen.contains(&(f.offset, f.len));
        seen.push((f.offset, f.len));
        new
    });
    fields.truncate(4);
    Some(Choice { type_name: type_name.to_string(), type_samples, site: site.to_string(), size, samples, fields })
}

/// The smallest aligned range of 1, 2, 4 or 8 bytes holding [lo, hi) (hi <= the next multiple of 8 above lo).
pub fn cover(lo: u64, hi: u64) -> (u64, u64) {
    for len in [1, 2, 4, 8] {
        let start = lo / len * len;
        if hi <= start + len {
            return (start, len);
        }
    }
    (lo / 8 * 8, 8)
}

/// The function an allocation-site label names (`make_msg (queue.c:44)` -> `make_msg`); None for
/// an unsymbolized `image+0xoffset` label.
pub fn site_function(label: &str) -> Option<&str> {
    let name = match label.strip_suffix(')').and_then(|l| l.rsplit_once(" (")) {
        Some((f, _)) => f,
        None => label,
    };
    (!name.is_empty() && !name.contains("+0x")).then_some(name)
}

fn count<K: std::hash::Hash + Eq>(keys: impl Iterator<Item = K>) -> HashMap<K, u64> {
    let mut m = HashMap::new();
    for k in keys {
        *m.entry(k).or_insert(0) += 1;
    }
    m
}

/// The key with the most samples; ties go to the smallest key so the choice is repeatable.
fn best<K: Ord>(m: HashMap<K, u64>) -> Option<(K, u64)> {
    m.into_iter().max_by(|a, b| a.1.cmp(&b.1).then(b.0.cmp(&a.0)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(t: &str, field: &str, site: &str, size: u64, offset: u64, width: u64) -> HeapAccess {
        HeapAccess { type_name: t.into(), field: field.into(), site: site.into(), size, offset, width }
    }

    fn rows() -> Vec<HeapAccess> {
        let mut v = Vec::new();
        let mut add = |n: usize, r: HeapAccess| v.extend(std::iter::repeat_n(r, n));
        // struct msg: 13 samples from make_msg/64 (5 at +16, 3 at +0, 2 at +24, 1 at +8, 1 in a 4-byte field
        // split over +32 and +34), 2 from another site; struct node: 10 samples.
        add(5, row("struct msg", "enq_stamp", "make_msg (queue.c:44)", 64, 16, 8));
        add(3, row("struct msg", "seq", "make_msg (queue.c:44)", 64, 0, 8));
        add(2, row("struct msg", "deq_stamp", "make_msg (queue.c:44)", 64, 24, 8));
        add(1, row("struct msg", "payload", "make_msg (queue.c:44)", 64, 8, 8));
        add(1, row("struct msg", "flags", "make_msg (queue.c:44)", 64, 32, 1));
        add(1, row("struct msg", "flags", "make_msg (queue.c:44)", 64, 34, 2));
        add(2, row("struct msg", "seq", "clone_msg (queue.c:90)", 64, 0, 8));
        add(10, row("struct node", "key", "make_node", 40, 0, 4));
        v
    }

    #[test]
    fn picks_the_hottest_type_its_commonest_site_and_four_hottest_fields() {
        // Checks literal rows: struct msg (15) beats struct node (10); make_msg/64 (13) beats clone_msg; fields by samples, the 1+2-byte flags accesses covered by 32:4.
        let c = choose(&rows(), None).unwrap();
        assert_eq!(
            (c.type_name.as_str(), c.type_samples, c.site.as_str(), c.size, c.samples),
            ("struct msg", 15, "make_msg (queue.c:44)", 64, 13)
        );
        let f: Vec<(&str, u64, u64, u64)> = c.fields.iter().map(|f| (f.field.as_str(), f.offset, f.len, f.samples)).collect();
        assert_eq!(f, vec![("enq_stamp", 16, 8, 5), ("seq", 0, 8, 3), ("deq_stamp", 24, 8, 2), ("flags", 32, 4, 2)]);
    }

    #[test]
    fn a_named_type_is_chosen_even_when_colder() {
        // Checks --type: struct node (10 samples) is taken over the hotter struct msg; an absent type gives None.
        let c = choose(&rows(), Some("struct node")).unwrap();
        assert_eq!((c.site.as_str(), c.size, c.fields.len(), c.fields[0].offset, c.fields[0].len), ("make_node", 40, 1, 0, 4));
        assert!(choose(&rows(), Some("struct none")).is_none());
    }

    #[test]
    fn covers_with_aligned_debug_register_ranges() {
        // Checks the smallest aligned 1/2/4/8 cover: [3,4) -> 3:1, [2,4) -> 2:2, [1,3) -> 0:4, [3,6) -> 0:8.
        assert_eq!(cover(3, 4), (3, 1));
        assert_eq!(cover(2, 4), (2, 2));
        assert_eq!(cover(1, 3), (0, 4));
        assert_eq!(cover(3, 6), (0, 8));
    }

    #[test]
    fn site_labels_give_function_names() {
        // Checks `f (file:line)` -> f, a bare name stays, an unsymbolized image+offset gives None.
        assert_eq!(site_function("make_msg (queue.c:44)"), Some("make_msg"));
        assert_eq!(site_function("make_msg"), Some("make_msg"));
        assert_eq!(site_function("queue+0x1234"), None);
    }
}
