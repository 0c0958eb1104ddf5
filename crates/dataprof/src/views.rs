//! DProf's views over resolved access samples — pure functions, no IO.
//!
//! Without hit/miss data (no memory-sampling PMU), a sample's "memory cost"
//! is the sample itself: time spent at a memory-referencing instruction.
//! Misses are then classified from what the samples do carry — address,
//! CPU, thread, read/write and time — and the cache geometry:
//! * sharing: another thread on another CPU wrote the same line within the
//!   window around the access; true sharing if its bytes overlap the
//!   access's, false sharing otherwise;
//! * conflict: the access's L1 set holds more distinct sampled lines than
//!   the set has ways, and several times the mean of all sets;
//! * capacity: the access's type has an estimated working set above a
//!   tenth of the last-level cache while all types together exceed it.

use crate::cache::Geometry;
use crate::log::AccessRecord;
use crate::resolve::Resolved;
use std::collections::{HashMap, HashSet};

pub struct Sample<'a> {
    pub rec: &'a AccessRecord,
    pub res: &'a Resolved,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Class {
    FalseSharing,
    TrueSharing,
    Conflict,
    Capacity,
}

impl Class {
    pub fn name(self) -> &'static str {
        match self {
            Class::FalseSharing => "false_sharing",
            Class::TrueSharing => "true_sharing",
            Class::Conflict => "conflict",
            Class::Capacity => "capacity",
        }
    }
}

fn line(addr: u64, line: u64) -> u64 {
    addr / line
}

/// A thread writing the same bytes of a line from one CPU: consecutive
/// sampled writes up to the window apart are taken as continuous writing.
struct Writing {
    tid: u32,
    cpu: u32,
    lo: u64,
    hi: u64,
    start: u64,
    end: u64,
}

/// Per sample: the sharing class, if another thread on another CPU was
/// writing its line within `window_ns` of it (true sharing when the
/// written bytes overlap the access's).
pub fn sharing(samples: &[Sample], line_size: u64, window_ns: u64) -> Vec<Option<Class>> {
    let mut writes: Vec<&AccessRecord> = samples.iter().map(|s| s.rec).filter(|r| r.kind.writes()).collect();
    writes.sort_by_key(|r| (line(r.addr, line_size), r.tid, r.cpu, r.addr, r.size, r.time));
    let mut spans: HashMap<u64, Vec<Writing>> = HashMap::new();
    for w in writes {
        let list = spans.entry(line(w.addr, line_size)).or_default();
        let (lo, hi) = (w.addr, w.addr + w.size.max(1) as u64);
        match list.last_mut() {
            Some(x) if x.tid == w.tid && x.cpu == w.cpu && x.lo == lo && x.hi == hi && w.time <= x.end + window_ns => x.end = w.time,
            _ => list.push(Writing { tid: w.tid, cpu: w.cpu, lo, hi, start: w.time, end: w.time }),
        }
    }
    samples
        .iter()
        .map(|s| {
            let r = s.rec;
            let (lo, hi) = (r.addr, r.addr + r.size.max(1) as u64);
            let mut class = None;
            for w in spans.get(&line(r.addr, line_size))? {
                if w.tid == r.tid || w.cpu == r.cpu || r.time + window_ns < w.start || w.end + window_ns < r.time {
                    continue;
                }
                if w.lo < hi && lo < w.hi {
                    return Some(Class::TrueSharing);
                }
                class = Some(Class::FalseSharing);
            }
            class
        })
        .collect()
}

/// L1 sets holding more distinct sampled lines than ways and at least four
/// times the mean over all sets: (set, distinct lines).
pub fn crowded_sets(samples: &[Sample], l1: &Geometry) -> Vec<(u32, usize)> {
    let mut per_set: HashMap<u32, HashSet<u64>> = HashMap::new();
    for s in samples {
        per_set.entry(l1.set_of(s.rec.addr)).or_default().insert(line(s.rec.addr, l1.line as u64));
    }
    let total: usize = per_set.values().map(|l| l.len()).sum();
    let mean = total as f64 / l1.sets.max(1) as f64;
    let mut v: Vec<(u32, usize)> =
        per_set.into_iter().map(|(k, l)| (k, l.len())).filter(|&(_, n)| n > l1.ways as usize && n as f64 >= 4.0 * mean).collect();
    v.sort_by_key(|&(set, n)| (std::cmp::Reverse(n), set));
    v
}

/// Chao1 estimate of how many distinct lines a type touches, from how many
/// sampled lines were seen once (f1) and twice (f2): d + f1²/(2 f2), or
/// d + f1(f1-1)/2 when no line was seen twice. Sampled lines alone are a
/// lower bound that grows with the run; this is not.
pub fn chao1(counts: impl IntoIterator<Item = usize>) -> f64 {
    let (mut d, mut f1, mut f2) = (0f64, 0f64, 0f64);
    for c in counts {
        d += 1.0;
        match c {
            1 => f1 += 1.0,
            2 => f2 += 1.0,
            _ => {}
        }
    }
    if f2 > 0.0 {
        d + f1 * f1 / (2.0 * f2)
    } else {
        d + f1 * (f1 - 1.0).max(0.0) / 2.0
    }
}

/// Bytes of one object its samples say are in use: Chao1 over its sampled
/// lines, at most its size; when at least 32 samples (almost) never hit a
/// line twice — at most 1% repeats — the few collisions cannot bound the
/// use below the whole object, so it is all of it (Chao1 from one or two
/// collisions is a lower bound off by orders of magnitude either way).
fn object_bytes(size: Option<u64>, counts: &HashMap<u64, usize>, line_size: u64) -> f64 {
    let est = chao1(counts.values().copied()) * line_size as f64;
    let n: usize = counts.values().sum();
    match size {
        Some(size) if n >= 32 && counts.len() * 100 >= n * 99 => size as f64,
        Some(size) => est.min(size.max(1) as f64),
        None => est,
    }
}

type Lines = HashMap<u64, usize>;

/// One type's sampled lines: all of them, per known object (with its size), and those of no known object.
type TypeLines = (Lines, HashMap<u64, (u64, Lines)>, Lines);

/// Per type: (distinct sampled lines, estimated working set in bytes, distinct objects).
/// Samples with a known object are estimated object by object (see
/// `object_bytes`), the rest by Chao1; the type as a whole is at least
/// the Chao1 estimate over all its lines.
pub fn working_sets(samples: &[Sample], line_size: u64) -> HashMap<String, (usize, f64, usize)> {
    let mut per_type: HashMap<&str, TypeLines> = HashMap::new();
    for s in samples {
        let l = line(s.rec.addr, line_size);
        let e = per_type.entry(&s.res.type_name).or_default();
        *e.0.entry(l).or_default() += 1;
        match s.res.object {
            Some((base, size)) => *e.1.entry(base).or_insert((size, Lines::new())).1.entry(l).or_default() += 1,
            None => *e.2.entry(l).or_default() += 1,
        }
    }
    per_type
        .into_iter()
        .map(|(t, (all, objects, loose))| {
            let mut est: f64 = objects.values().map(|(size, c)| object_bytes(Some(*size), c, line_size)).sum();
            if !loose.is_empty() {
                est += object_bytes(None, &loose, line_size);
            }
            // Many small objects each sampled once (a random walk over nodes): the type's lines as a whole say more.
            est = est.max(chao1(all.values().copied()) * line_size as f64);
            (t.to_string(), (all.len(), est, objects.len()))
        })
        .collect()
}

/// Per sample: its class (sharing first, then conflict, then capacity).
pub fn classify_samples(samples: &[Sample], caches: &[Geometry], window_ns: u64) -> Vec<Option<Class>> {
    let line_size = caches.first().map_or(64, |c| c.line as u64);
    let mut out = sharing(samples, line_size, window_ns);
    if let Some(l1) = Geometry::level(caches, 1) {
        let crowded: HashSet<u32> = crowded_sets(samples, l1).into_iter().map(|(s, _)| s).collect();
        for (c, s) in out.iter_mut().zip(samples) {
            if c.is_none() && crowded.contains(&l1.set_of(s.rec.addr)) {
                *c = Some(Class::Conflict);
            }
        }
    }
    if let Some(llc) = Geometry::last(caches) {
        let ws = working_sets(samples, line_size);
        let total: f64 = ws.values().map(|w| w.1).sum();
        if total > llc.size as f64 {
            for (c, s) in out.iter_mut().zip(samples) {
                if c.is_none() && ws.get(&s.res.type_name).is_some_and(|w| w.1 > llc.size as f64 / 10.0) {
                    *c = Some(Class::Capacity);
                }
            }
        }
    }
    out
}

#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct ProfileRow {
    #[serde(rename = "type")]
    pub type_name: String,
    pub field: String,
    /// Where the field starts in its type; absent without a field.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub offset: Option<u64>,
    pub samples: u64,
    /// Of all samples (memory-referencing or not).
    pub percent: f64,
    /// The field's lines were written by another CPU within the window of
    /// at least 5% of its samples: its objects bounce between caches.
    pub bounces: bool,
    /// How the type was found (static, register, site, site_only, region).
    pub how: crate::resolve::How,
}

/// Types and fields by samples: rows grouped by type (types by their total),
/// fields within a type by their own samples.
pub fn profile(samples: &[Sample], classes: &[Option<Class>], total_samples: u64) -> Vec<ProfileRow> {
    let mut rows: HashMap<(&str, &str), (u64, u64, crate::resolve::How, u64)> = HashMap::new();
    let mut type_totals: HashMap<&str, u64> = HashMap::new();
    for (s, c) in samples.iter().zip(classes) {
        let e = rows.entry((&s.res.type_name, &s.res.field)).or_insert((0, 0, s.res.how, s.res.field_offset));
        e.0 += 1;
        e.1 += matches!(c, Some(Class::FalseSharing | Class::TrueSharing)) as u64;
        e.2 = e.2.min(s.res.how);
        *type_totals.entry(&s.res.type_name).or_default() += 1;
    }
    let mut v: Vec<ProfileRow> = rows
        .into_iter()
        .map(|((t, f), (n, shared, how, off))| ProfileRow {
            type_name: t.to_string(),
            field: f.to_string(),
            offset: (!f.is_empty()).then_some(off),
            samples: n,
            percent: 100.0 * n as f64 / total_samples.max(1) as f64,
            bounces: shared * 20 >= n && shared >= 2,
            how,
        })
        .collect();
    v.sort_by(|a, b| {
        let (ta, tb) = (type_totals[a.type_name.as_str()], type_totals[b.type_name.as_str()]);
        tb.cmp(&ta).then_with(|| a.type_name.cmp(&b.type_name)).then_with(|| b.samples.cmp(&a.samples)).then_with(|| a.field.cmp(&b.field))
    });
    v
}

#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct ClassRow {
    #[serde(rename = "type")]
    pub type_name: String,
    pub field: String,
    /// Where the field starts in its type; absent without a field.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub offset: Option<u64>,
    pub class: Class,
    /// Samples of this field in this class over all memory samples.
    pub share: f64,
    pub samples: u64,
    /// Conflict rows: the crowded L1 sets its lines fall in.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub sets: Vec<u32>,
}

/// One row per (type, field, class), most samples first.
pub fn classify(samples: &[Sample], classes: &[Option<Class>], caches: &[Geometry]) -> Vec<ClassRow> {
    let l1 = Geometry::level(caches, 1);
    // Per (type, field, class): samples, conflict sets, the field's offset.
    type Acc = (u64, HashSet<u32>, u64);
    let mut rows: HashMap<(&str, &str, Class), Acc> = HashMap::new();
    for (s, c) in samples.iter().zip(classes) {
        let Some(c) = *c else { continue };
        let e = rows.entry((&s.res.type_name, &s.res.field, c)).or_insert_with(|| (0, HashSet::new(), s.res.field_offset));
        e.0 += 1;
        if c == Class::Conflict {
            e.1.extend(l1.map(|g| g.set_of(s.rec.addr)));
        }
    }
    let total = samples.len().max(1) as f64;
    let mut v: Vec<ClassRow> = rows
        .into_iter()
        .map(|((t, f, c), (n, sets, off))| {
            let mut sets: Vec<u32> = sets.into_iter().collect();
            sets.sort();
            let offset = (!f.is_empty()).then_some(off);
            ClassRow { type_name: t.into(), field: f.into(), offset, class: c, share: n as f64 / total, samples: n, sets }
        })
        .collect();
    v.sort_by(|a, b| b.samples.cmp(&a.samples).then_with(|| (&a.type_name, &a.field, a.class).cmp(&(&b.type_name, &b.field, b.class))));
    v
}

#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct WorkingSetRow {
    #[serde(rename = "type")]
    pub type_name: String,
    pub samples: u64,
    /// Distinct objects sampled (statics, heap blocks, pointed-to elements).
    pub objects: usize,
    pub lines_sampled: usize,
    /// Chao1 estimate of the lines touched, in bytes.
    pub estimated_bytes: f64,
    /// Lines of this type resident at the end of an LRU simulation of the
    /// L1 data cache fed with the sampled lines in time order.
    pub l1_resident_lines: usize,
    /// L1 sets where this type holds more sampled lines than the set has ways.
    pub crowded_sets: Vec<u32>,
}

/// Which types occupy the cache, how many objects, which sets they crowd.
pub fn working_set(samples: &[Sample], caches: &[Geometry]) -> Vec<WorkingSetRow> {
    let line_size = caches.first().map_or(64, |c| c.line as u64);
    let ws = working_sets(samples, line_size);
    let mut counts: HashMap<&str, u64> = HashMap::new();
    for s in samples {
        *counts.entry(&s.res.type_name).or_default() += 1;
    }
    let l1 = Geometry::level(caches, 1).cloned();
    let (resident, crowding) = match &l1 {
        Some(g) => (simulate_lru(samples, g), type_crowding(samples, g)),
        None => (HashMap::new(), HashMap::new()),
    };
    let mut v: Vec<WorkingSetRow> = ws
        .into_iter()
        .map(|(t, (lines, est, objects))| WorkingSetRow {
            samples: counts.get(t.as_str()).copied().unwrap_or(0),
            objects,
            lines_sampled: lines,
            estimated_bytes: est,
            l1_resident_lines: resident.get(t.as_str()).copied().unwrap_or(0),
            crowded_sets: crowding.get(t.as_str()).cloned().unwrap_or_default(),
            type_name: t,
        })
        .collect();
    v.sort_by(|a, b| b.estimated_bytes.total_cmp(&a.estimated_bytes).then_with(|| a.type_name.cmp(&b.type_name)));
    v
}

fn simulate_lru<'a>(samples: &[Sample<'a>], g: &Geometry) -> HashMap<&'a str, usize> {
    let mut order: Vec<&Sample> = samples.iter().collect();
    order.sort_by_key(|s| s.rec.time);
    // Each set: lines most recent last, with the type that last touched them.
    let mut sets: HashMap<u32, Vec<(u64, &str)>> = HashMap::new();
    for s in order {
        let l = s.rec.addr / g.line as u64;
        let set = sets.entry(g.set_of(s.rec.addr)).or_default();
        if let Some(p) = set.iter().position(|&(x, _)| x == l) {
            set.remove(p);
        } else if set.len() >= g.ways as usize {
            set.remove(0);
        }
        set.push((l, &s.res.type_name));
    }
    let mut out = HashMap::new();
    for (_, t) in sets.values().flatten() {
        *out.entry(*t).or_default() += 1;
    }
    out
}

fn type_crowding<'a>(samples: &[Sample<'a>], g: &Geometry) -> HashMap<&'a str, Vec<u32>> {
    let mut lines: HashMap<(&str, u32), HashSet<u64>> = HashMap::new();
    for s in samples {
        lines.entry((&s.res.type_name, g.set_of(s.rec.addr))).or_default().insert(s.rec.addr / g.line as u64);
    }
    let mut out: HashMap<&str, Vec<u32>> = HashMap::new();
    for ((t, set), l) in lines {
        if l.len() > g.ways as usize {
            out.entry(t).or_default().push(set);
        }
    }
    for v in out.values_mut() {
        v.sort();
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::interp::Kind;
    use crate::log::{Source, Status};
    use crate::resolve::How;

    fn rec(time: u64, cpu: u32, addr: u64, kind: Kind) -> AccessRecord {
        AccessRecord {
            time,
            ip: 0,
            addr,
            base_offset: 0,
            data_src: 0,
            pid: 1,
            tid: 10 + cpu,
            cpu,
            weight: 0,
            size: 8,
            kind,
            base: None,
            status: Status::Ok,
            source: Source::Interpretation,
            back: 0,
        }
    }

    fn typed(t: &str, f: &str) -> Resolved {
        Resolved {
            type_name: t.into(),
            field: f.into(),
            field_offset: if f == "b" { 8 } else { 0 },
            how: How::Static,
            object: Some((0x1000, 16)),
            offset: 0,
            site: None,
            area: crate::resolve::Area::Static,
            why: None,
            fallback: None,
        }
    }

    fn l1() -> Geometry {
        Geometry { level: 1, kind: "Data".into(), size: 48 << 10, ways: 12, line: 64, sets: 64 }
    }

    #[test]
    fn writes_to_other_fields_of_a_line_are_false_sharing() {
        // Checks: CPU1 writing +8 near CPU0's write at +0 is false sharing; a read of bytes CPU0 writes is true sharing; outside the window or same CPU, nothing.
        let recs = [
            rec(1000, 0, 0x1000, Kind::Write),
            rec(1500, 1, 0x1008, Kind::Write),
            rec(9000, 0, 0x2000, Kind::Write),
            rec(9100, 1, 0x2000, Kind::Read),
            rec(50_000, 0, 0x1000, Kind::Write),
            rec(50_100, 0, 0x1008, Kind::Write),
        ];
        let res = typed("struct counters", "a");
        let s: Vec<Sample> = recs.iter().map(|r| Sample { rec: r, res: &res }).collect();
        let c = sharing(&s, 64, 1000);
        assert_eq!(c, vec![Some(Class::FalseSharing), Some(Class::FalseSharing), None, Some(Class::TrueSharing), None, None]);
    }

    #[test]
    fn sampled_writes_close_in_time_make_a_span() {
        // Checks CPU0's writes at t=0 and t=900 (window 1000) form one span: a CPU1 read at 1800 falls within it plus the window, one at 2800 does not.
        let recs = [
            rec(0, 0, 0x1000, Kind::Write),
            rec(900, 0, 0x1000, Kind::Write),
            rec(1800, 1, 0x1000, Kind::Read),
            rec(2800, 1, 0x1000, Kind::Read),
        ];
        let res = typed("struct counters", "a");
        let s: Vec<Sample> = recs.iter().map(|r| Sample { rec: r, res: &res }).collect();
        assert_eq!(sharing(&s, 64, 1000), vec![None, None, Some(Class::TrueSharing), None]);
    }

    #[test]
    fn lines_four_kib_apart_crowd_one_set() {
        // Checks 24 lines 4 KiB apart crowd set 0 of a 12-way 64-set L1, and 24 consecutive lines crowd none.
        let apart: Vec<AccessRecord> = (0..24).map(|i| rec(i, 0, 0x10_0000 + i * 4096, Kind::Read)).collect();
        let res = typed("struct slot", "v");
        let s: Vec<Sample> = apart.iter().map(|r| Sample { rec: r, res: &res }).collect();
        assert_eq!(crowded_sets(&s, &l1()), vec![(0, 24)]);
        let packed: Vec<AccessRecord> = (0..24).map(|i| rec(i, 0, 0x10_0000 + i * 64, Kind::Read)).collect();
        let s: Vec<Sample> = packed.iter().map(|r| Sample { rec: r, res: &res }).collect();
        assert!(crowded_sets(&s, &l1()).is_empty());
    }

    #[test]
    fn chao1_by_hand() {
        // Checks Chao1: 4 lines seen once, 2 twice: 6 + 16/4 = 10; all singletons: d + d(d-1)/2; all repeated: d.
        assert_eq!(chao1([1, 1, 1, 1, 2, 2]), 10.0);
        assert_eq!(chao1([1, 1, 1]), 6.0);
        assert_eq!(chao1([5, 7]), 2.0);
    }

    #[test]
    fn spread_samples_stand_for_their_whole_object() {
        // Checks 40 samples on 40 different lines of a 1 MiB block count the whole block, as do 201 samples with one repeat; 40 samples on 2 lines count Chao1 (2 lines).
        let spread: HashMap<u64, usize> = (0..40).map(|l| (l * 100, 1)).collect();
        assert_eq!(object_bytes(Some(1 << 20), &spread, 64), (1u64 << 20) as f64);
        let mut nearly: HashMap<u64, usize> = (0..199).map(|l| (l * 100, 1)).collect();
        nearly.insert(7, 2);
        assert_eq!(object_bytes(Some(1 << 20), &nearly, 64), (1u64 << 20) as f64);
        let hot: HashMap<u64, usize> = [(0, 20), (1, 20)].into_iter().collect();
        assert_eq!(object_bytes(Some(1 << 20), &hot, 64), 128.0);
        assert_eq!(object_bytes(Some(16), &hot, 64), 16.0);
    }

    #[test]
    fn many_small_objects_sampled_once_add_up_by_chao1() {
        // Checks 100 samples on 100 distinct 64-byte objects (one line each) estimate 100 + 100*99/2 = 5050 lines, not 100.
        let recs: Vec<AccessRecord> = (0..100).map(|i| rec(i, 0, 0x100_0000 + i * 6400, Kind::Read)).collect();
        let res: Vec<Resolved> = recs.iter().map(|r| Resolved { object: Some((r.addr, 64)), ..typed("struct node", "key") }).collect();
        let s: Vec<Sample> = recs.iter().zip(&res).map(|(rec, res)| Sample { rec, res }).collect();
        let ws = working_sets(&s, 64);
        assert_eq!(ws["struct node"], (100, 5050.0 * 64.0, 100));
    }

    #[test]
    fn capacity_goes_to_the_type_that_overflows_the_cache() {
        // Checks: 400 lines each seen once estimate 400+400*399/2 lines (~5 MB) > a 1 MiB LLC, so the big type is capacity; a small type seen often is not.
        let llc = Geometry { level: 3, kind: "Unified".into(), size: 1 << 20, ways: 16, line: 64, sets: 1024 };
        let mut recs: Vec<AccessRecord> = (0..400).map(|i| rec(i, 0, 0x100_0000 + i * 64 * 97, Kind::Read)).collect();
        recs.extend((0..50).map(|i| rec(1000 + i, 0, 0x5000, Kind::Read)));
        let big = Resolved { object: None, ..typed("struct node", "key") };
        let small = typed("struct tally", "sum");
        let s: Vec<Sample> = recs.iter().enumerate().map(|(i, r)| Sample { rec: r, res: if i < 400 { &big } else { &small } }).collect();
        let c = classify_samples(&s, &[l1(), llc], 1000);
        assert!(c[..400].iter().all(|c| *c == Some(Class::Capacity)));
        assert!(c[400..].iter().all(|c| c.is_none()));
        let rows = classify(&s, &c, &[l1()]);
        assert_eq!((rows.len(), rows[0].type_name.as_str(), rows[0].samples), (1, "struct node", 400));
    }

    #[test]
    fn profile_groups_fields_under_their_type() {
        // Checks rows are ordered by type total then field samples, with the field's offset, percent of all samples and the bounce flag from sharing.
        let recs: Vec<AccessRecord> = (0..10).map(|i| rec(i * 10, (i % 2) as u32, 0x1000 + (i % 2) * 8, Kind::Write)).collect();
        let (a, b, t) = (typed("struct counters", "a"), typed("struct counters", "b"), typed("struct tally", "sum"));
        let mut s: Vec<Sample> = recs.iter().enumerate().map(|(i, r)| Sample { rec: r, res: if i % 2 == 0 { &a } else { &b } }).collect();
        let lone = [
            rec(5, 0, 0x9000, Kind::Read),
            rec(6, 0, 0x9000, Kind::Read),
            rec(7, 0, 0x9000, Kind::Read),
            rec(8, 0, 0x9000, Kind::Read),
            rec(9, 0, 0x9000, Kind::Read),
            rec(10, 0, 0x9000, Kind::Read),
        ];
        s.extend(lone.iter().map(|r| Sample { rec: r, res: &t }));
        let c = classify_samples(&s, &[], 100);
        let p = profile(&s, &c, 20);
        let got: Vec<(&str, &str, Option<u64>, u64, bool)> =
            p.iter().map(|r| (r.type_name.as_str(), r.field.as_str(), r.offset, r.samples, r.bounces)).collect();
        let want = [
            ("struct counters", "a", Some(0), 5, true),
            ("struct counters", "b", Some(8), 5, true),
            ("struct tally", "sum", Some(0), 6, false),
        ];
        assert_eq!(got, want);
        assert_eq!(p[2].percent, 30.0);
    }
}
