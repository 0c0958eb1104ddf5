//! The probe scheduler of `loupe optimize probe`: which blocks of a
//! program's hottest functions are armed together as execute breakpoints
//! (`loupe-probe`), in what order, how each function's reference block is
//! chosen, and which of the counts kept in a build's tally are trusted in
//! place of the sample estimates. The caller arms the breakpoints and
//! reads the clock; this module decides.

use crate::blocks::{FunctionProfile, Measured};
use loupe_probe::{ElfAddr, Plan, Pooled, Run, Tally};
use std::collections::{BTreeMap, HashMap};

/// Share of the reference's runs a block's ratio must have been counted
/// beside to be used: all of them (up to rounding). At 0.9, SQLite blocks
/// counted 0 under `insert` and `mixed` but never armed under `query`
/// (7% of the reference's samples), where they ran 21 M times, were taken
/// as measured zeros and split out cold.
pub const MIN_COVERAGE: f64 = 0.999;

/// Windows under every command a block counted 0 must have been armed in
/// for that 0 to be used. A window sees about a hundred executions of a
/// hot reference, one stretch of one phase: SQLite handlers run 4-21 M
/// times in training were 0 in their 1-6 windows per command and were
/// split out cold (against their 400-2,000 timer samples). Below this the
/// samples decide.
pub const MIN_ZERO_WINDOWS: u64 = 10;

/// Windows each candidate reference block of a function is counted in
/// before the most executed one is kept.
pub const CALIBRATION_WINDOWS: u64 = 4;

/// Per function start, its measured blocks: those counted against the
/// reference inside `[start, start + size)` that ran most often.
pub fn measured_by_function(t: &Tally, functions: &[(u64, u64)]) -> HashMap<u64, Measured> {
    let by = t.by_reference();
    let mut out = HashMap::new();
    for &(start, size) in functions {
        let refs = by.range(ElfAddr(start)..ElfAddr(start + size));
        // The reference chosen by calibration, else the one counted most.
        let best = match t.references.get(&start).and_then(|r| by.get_key_value(r)) {
            Some(kv) => Some(kv),
            None => refs.max_by_key(|(_, blocks)| blocks.values().map(|x| x.reference_count).sum::<u64>()),
        };
        if let Some((r, blocks)) = best {
            // A ratio counted beside only part of what the reference ran (a command under which the block's
            // group was never armed) may miss where the block runs: left to the samples.
            let mut counts: BTreeMap<u64, (f64, u64)> = blocks
                .iter()
                .filter(|(_, x)| x.coverage >= MIN_COVERAGE && (x.ratio > 0.0 || x.min_windows >= MIN_ZERO_WINDOWS))
                .map(|(b, x)| (b.0, (x.ratio, x.reference_count)))
                .collect();
            // The reference alone says nothing: its ratio to itself is 1 by definition, and its count
            // would be its own samples' estimate, pinned (CPython's long_richcompare: no other ratio
            // covered `text.py`, and the entry's stall-inflated 341 against its successor's 131 sent
            // flow down a path run 18 times in 23 M). Left to the samples.
            if counts.keys().all(|&b| b == r.0) {
                continue;
            }
            let most = blocks.values().map(|x| x.reference_count).max().unwrap_or(0);
            counts.insert(r.0, (1.0, most));
            out.insert(start, Measured { counts });
        }
    }
    out
}

/// A function whose reference block is not chosen yet.
#[derive(Clone, Debug)]
struct Calibrating {
    start: u64,
    /// Its most-sampled blocks, counted against the first.
    candidates: Vec<ElfAddr>,
    blocks: Vec<ElfAddr>,
}

/// What the next window arms: a function's candidate references against
/// each other, or a planned group.
#[derive(Debug)]
pub struct Schedule {
    calibrating: Vec<Calibrating>,
    plan: Plan,
    next: usize,
    /// This command's counts so far (earlier runs of it and this one): groups whose blocks are settled give
    /// their windows to the others.
    seen: Pooled,
    /// Every block of the probed functions by its first address: its end.
    extents: BTreeMap<u64, u64>,
    /// Functions probed and their blocks.
    pub functions: usize,
    pub blocks: usize,
}

/// One window to arm: the addresses (the reference first) and, for a
/// calibration window, the function whose reference is being chosen.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Window {
    pub calibrating: Option<u64>,
    pub addrs: Vec<ElfAddr>,
}

impl Schedule {
    /// The schedule for the `n` hottest of `functions` (the profile's order)
    /// under the command labelled `label`: functions whose reference `tally`
    /// already holds go straight into the plan; the others first count
    /// their most-sampled blocks against each other. None when no function
    /// has a block.
    pub fn new(functions: &[FunctionProfile], n: usize, tally: &Tally, label: &str) -> Option<Schedule> {
        let chosen: Vec<&FunctionProfile> = functions.iter().take(n).filter(|f| !f.blocks.is_empty()).collect();
        let mut s = Schedule {
            calibrating: vec![],
            plan: Plan::default(),
            next: 0,
            seen: tally.pooled(label),
            extents: BTreeMap::new(),
            functions: chosen.len(),
            blocks: chosen.iter().map(|f| f.blocks.len()).sum(),
        };
        for f in &chosen {
            let blocks: Vec<ElfAddr> = f.blocks.iter().map(|b| ElfAddr(f.start + b.offset)).collect();
            for (i, b) in blocks.iter().enumerate() {
                s.extents.insert(b.0, blocks.get(i + 1).map_or(f.start + f.size, |n| n.0));
            }
            // The reference should be the function's most executed block, so that every window counts it
            // often; samples do not say which that is, so the four blocks with the most are counted against
            // each other.
            let mut by_count: Vec<&crate::blocks::BlockCount> = f.blocks.iter().collect();
            by_count.sort_by(|x, y| y.count.total_cmp(&x.count));
            let candidates = by_count.iter().take(loupe_probe::SLOTS).map(|b| ElfAddr(f.start + b.offset)).collect();
            match tally.references.get(&f.start) {
                Some(&r) => s.plan.add_function(r, &blocks),
                None => s.calibrating.push(Calibrating { start: f.start, candidates, blocks }),
            }
        }
        (!chosen.is_empty()).then_some(s)
    }

    /// Starts the rotation after group `k` (a random start, so short runs
    /// probed one after another still cover every group).
    pub fn start_after(&mut self, k: usize) {
        self.next = k;
    }

    /// References still to choose.
    pub fn calibrating(&self) -> usize {
        self.calibrating.len()
    }

    /// The next window: calibration first, then the next group with a block
    /// not yet settled.
    pub fn next_window(&mut self) -> Option<Window> {
        if let Some(c) = self.calibrating.first() {
            return Some(Window { calibrating: Some(c.start), addrs: c.candidates.clone() });
        }
        self.next = self.plan.next_unsettled(self.next, &self.seen)?;
        Some(Window { calibrating: None, addrs: self.plan.groups[self.next].addrs() })
    }

    /// Files one window's counts (in the order of `w.addrs`) into `run`, and
    /// into what decides which groups are settled; after a calibration window
    /// with enough counts, the function's reference is the candidate counted
    /// most (kept in `tally`) and its groups join the plan.
    pub fn counted(&mut self, w: &Window, counts: &[u64], run: &mut Run, tally: &mut Tally) {
        run.add_window(&w.addrs, counts);
        if let (Some(&r), Some(&rc)) = (w.addrs.first(), counts.first()) {
            for (&b, &c) in w.addrs.iter().zip(counts).skip(1) {
                let a = self.seen.entry((r, b)).or_default();
                (a.0, a.1) = (a.0 + c, a.1 + rc);
            }
        }
        if let Some(start) = w.calibrating {
            self.calibrated(start, run, tally);
        }
    }

    fn calibrated(&mut self, start: u64, run: &Run, tally: &mut Tally) {
        let Some(i) = self.calibrating.iter().position(|c| c.start == start) else { return };
        let c = &self.calibrating[i];
        let first = c.candidates[0];
        let pairs: Vec<&loupe_probe::Pair> = run.pairs.iter().filter(|p| p.reference == first && c.candidates.contains(&p.block)).collect();
        let done = c.candidates.len() == 1 || pairs.iter().all(|p| p.windows >= CALIBRATION_WINDOWS);
        if !done {
            return;
        }
        let rc = pairs.first().map_or(0, |p| p.reference_count);
        let best = pairs.iter().filter(|p| p.count > rc).max_by_key(|p| p.count).map_or(first, |p| p.block);
        let c = self.calibrating.remove(i);
        tally.references.insert(start, best);
        self.plan.add_function(best, &c.blocks);
    }

    /// Files timer samples (ELF addresses) taken between windows under the
    /// block holding each; those outside the probed blocks are dropped.
    pub fn file_samples(&self, addrs: impl IntoIterator<Item = u64>, into: &mut HashMap<u64, u64>) {
        for va in addrs {
            if let Some((&start, &end)) = self.extents.range(..=va).next_back() {
                if va < end {
                    *into.entry(start).or_default() += 1;
                }
            }
        }
    }

    /// The timer samples of each reference (chosen, or first candidate of a
    /// function still calibrating) from `block_samples`: how often this
    /// run's references ran, to weigh its ratios against other runs'.
    pub fn reference_samples(&self, tally: &Tally, block_samples: &HashMap<u64, u64>) -> Vec<(ElfAddr, u64)> {
        let mut refs: Vec<ElfAddr> = tally.references.values().copied().chain(self.calibrating.iter().map(|c| c.candidates[0])).collect();
        refs.sort();
        refs.dedup();
        refs.into_iter().map(|r| (r, block_samples.get(&r.0).copied().unwrap_or(0))).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::blocks::BlockCount;

    fn function(start: u64, size: u64, blocks: &[(u64, f64)]) -> FunctionProfile {
        let block = |&(offset, count): &(u64, f64)| BlockCount {
            offset,
            insns: 1,
            samples: count,
            count,
            upper: count,
            cold: false,
            entered: 0.0,
            left: 0.0,
        };
        FunctionProfile {
            name: format!("f{start:x}"),
            start,
            size,
            samples: blocks.iter().map(|b| b.1).sum(),
            blocks: blocks.iter().map(block).collect(),
            edges: vec![],
            missing_edges: false,
            calls: vec![],
            bolt_name: format!("f{start:x}"),
        }
    }

    #[test]
    fn only_ratios_counted_under_every_command_and_zeros_over_enough_windows_are_used() {
        // Checks the two filters on a function at 0x100 with reference 0x100: block 0x110 counted under both
        // commands (used), 0x120 only under "a" (its ratio misses what "b" ran: left out), 0x130 at 0 in
        // MIN_ZERO_WINDOWS windows under each command (used: a measured zero), 0x140 at 0 in fewer windows
        // under "b" (left to the samples).
        let (r, b1, b2, b3, b4) = (ElfAddr(0x100), ElfAddr(0x110), ElfAddr(0x120), ElfAddr(0x130), ElfAddr(0x140));
        let mut runs = vec![];
        for label in ["a", "b"] {
            let mut run = Run { label: label.into(), reference_samples: vec![(r, 100)], ..Default::default() };
            for w in 0..MIN_ZERO_WINDOWS {
                run.add_window(&[r, b1, b3], &[100, 50, 0]);
                if label == "a" {
                    run.add_window(&[r, b2, b4], &[100, 10, 0]);
                } else if w == 0 {
                    run.add_window(&[r, b4], &[100, 0]);
                }
            }
            runs.push(run);
        }
        let t = Tally { runs, references: [(0x100, r)].into_iter().collect(), ..Default::default() };
        let m = measured_by_function(&t, &[(0x100, 0x100)]);
        let got: Vec<u64> = m[&0x100].counts.keys().copied().collect();
        assert_eq!(got, vec![0x100, 0x110, 0x130], "{m:?}");
        assert_eq!(m[&0x100].counts[&0x110].0, 0.5);
    }

    #[test]
    fn a_function_with_no_usable_ratio_is_left_to_its_samples() {
        // Checks a function whose only block ratio was counted under "a" while "b" also ran its reference
        // (timer samples): no ratio is used, and the reference alone is no measurement.
        let (r, b1) = (ElfAddr(0x100), ElfAddr(0x110));
        let mut a = Run { label: "a".into(), reference_samples: vec![(r, 100)], ..Default::default() };
        a.add_window(&[r, b1], &[100, 50]);
        let b = Run { label: "b".into(), reference_samples: vec![(r, 100)], ..Default::default() };
        let t = Tally { runs: vec![a, b], references: [(0x100, r)].into_iter().collect(), ..Default::default() };
        assert!(measured_by_function(&t, &[(0x100, 0x100)]).is_empty());
    }

    // A function without a reference first counts its four most-sampled blocks against each other; after
    // CALIBRATION_WINDOWS windows the one counted most (0x1020, run 3 times as often as the first candidate)
    // becomes the reference, kept in the tally, and the plan then arms the other blocks three at a time beside it.
    #[test]
    fn calibration_picks_the_most_executed_candidate_then_plans_groups() {
        let f = function(0x1000, 0x60, &[(0, 5.0), (0x10, 9.0), (0x20, 7.0), (0x30, 1.0), (0x40, 3.0), (0x50, 2.0)]);
        let mut tally = Tally::default();
        let mut s = Schedule::new(&[f], 16, &tally, "cmd").unwrap();
        assert_eq!((s.functions, s.blocks, s.calibrating()), (1, 6, 1));
        let mut run = Run { label: "cmd".into(), ..Default::default() };
        let cands = vec![ElfAddr(0x1010), ElfAddr(0x1020), ElfAddr(0x1000), ElfAddr(0x1040)];
        for _ in 0..CALIBRATION_WINDOWS {
            let w = s.next_window().unwrap();
            assert_eq!(w, Window { calibrating: Some(0x1000), addrs: cands.clone() });
            s.counted(&w, &[100, 300, 50, 20], &mut run, &mut tally);
        }
        assert_eq!(s.calibrating(), 0);
        assert_eq!(tally.references[&0x1000], ElfAddr(0x1020));
        let w = s.next_window().unwrap();
        assert_eq!(w.calibrating, None);
        assert_eq!(w.addrs[0], ElfAddr(0x1020));
        assert!(w.addrs.len() <= loupe_probe::SLOTS);
    }

    // A reference already in the tally needs no calibration; a group whose blocks are settled gives its window
    // to the unsettled one; samples are filed under the block holding them (none past the function's end); the
    // run's reference samples are those of the tally's references.
    #[test]
    fn settled_groups_give_way_and_samples_file_under_their_blocks() {
        let blocks: Vec<(u64, f64)> = (0..7).map(|i| (i * 0x10, 1.0)).collect();
        let f = function(0x1000, 0x70, &blocks);
        let mut tally = Tally { references: [(0x1000, ElfAddr(0x1000))].into_iter().collect(), ..Default::default() };
        let mut s = Schedule::new(&[f], 16, &tally, "cmd").unwrap();
        assert_eq!(s.calibrating(), 0);
        let mut run = Run { label: "cmd".into(), ..Default::default() };
        let first = s.next_window().unwrap();
        s.counted(&first, &[loupe_probe::SETTLED_REFERENCE, 500, 500, 500], &mut run, &mut tally);
        let second = s.next_window().unwrap();
        assert_ne!(second.addrs, first.addrs);
        assert_eq!(s.next_window().unwrap().addrs, second.addrs, "the settled group is skipped");
        let mut into = HashMap::new();
        s.file_samples([0x1000, 0x1005, 0x1033, 0x1070, 0x900], &mut into);
        assert_eq!(into, HashMap::from([(0x1000, 2), (0x1030, 1)]));
        assert_eq!(s.reference_samples(&tally, &into), vec![(ElfAddr(0x1000), 2)]);
    }
}
