//! Branch records (LBR) of several epochs and builds folded into one
//! profile at the original build's addresses, for [`crate::lbr::write_fdata`]:
//! each profile's records weighted by its epoch's age like the PC samples;
//! records of other builds left out and counted, never applied; records of
//! the optimized builds Loupe made from this one mapped back through BOLT's
//! address table, both ends (a record with an end the table cannot map is
//! counted and left out, never guessed). The caller reads the database and
//! each build's code; this module decides what goes in.

use crate::bat::Translator;
use crate::lbr::{self, Branch, LbrFdata, Trace};
use loupe_model::branches::BranchProfile;
use loupe_model::ImageOffset;
use std::collections::BTreeMap;

/// Aged branch and straight-run counts at the original build's addresses.
#[derive(Debug, Default)]
pub struct Fold {
    branches: BTreeMap<(u64, u64), (f64, f64)>,
    runs: BTreeMap<(u64, u64), f64>,
    /// Profiles of builds neither the one folded nor one Loupe made from it.
    pub refused: usize,
}

/// What folding records in gave: executions mapped, and executions left
/// out because an end has no original.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Folded {
    pub mapped: u64,
    pub lost: u64,
}

impl std::ops::AddAssign for Folded {
    fn add_assign(&mut self, o: Folded) {
        (self.mapped, self.lost) = (self.mapped + o.mapped, self.lost + o.lost);
    }
}

impl Fold {
    /// Whether a profile of build `pb` is folded when folding build `bid`:
    /// only that build; another is counted refused unless `ours` says Loupe
    /// made it from the original (its records are folded on their own).
    pub fn admits(&mut self, pb: &str, bid: &str, ours: &dyn Fn(&str) -> bool) -> bool {
        if pb.eq_ignore_ascii_case(bid) {
            return true;
        }
        self.refused += usize::from(!ours(pb));
        false
    }

    /// One profile's records, weighted `w`: `vaddr` gives the virtual
    /// address of a file offset in the profiled build, and `t`, for an
    /// optimized build, maps its addresses to the original's.
    pub fn add(&mut self, bp: &BranchProfile, vaddr: &dyn Fn(ImageOffset) -> Option<u64>, t: Option<&Translator>, w: f64) -> Folded {
        let map = |va: u64| match t {
            Some(t) => t.branch_end_to_original(va),
            None => Some(va),
        };
        let mut out = Folded::default();
        for (&(from, to), c) in &bp.records {
            let (Some(f), Some(g)) = (vaddr(from), vaddr(to)) else { continue };
            match (map(f), map(g)) {
                (Some(f), Some(g)) => {
                    let x = self.branches.entry((f, g)).or_default();
                    x.0 += c.taken as f64 * w;
                    x.1 += c.mispredicted as f64 * w;
                    out.mapped += c.taken;
                }
                _ => out.lost += c.taken,
            }
        }
        for (&(start, end), &n) in &bp.traces {
            let (Some(s), Some(e)) = (vaddr(start), vaddr(end)) else { continue };
            let run = match t {
                Some(t) => t.run_to_original(s, e),
                None => Some((s, e)),
            };
            match run {
                Some(r) => *self.runs.entry(r).or_default() += n as f64 * w,
                None => out.lost += n,
            }
        }
        out
    }

    /// Whether no branch was folded in.
    pub fn is_empty(&self) -> bool {
        self.branches.is_empty()
    }

    /// The fdata of what was folded (counts rounded), over the original's
    /// functions `funcs`; None when no branch was folded in (then the caller
    /// writes the no-LBR form).
    pub fn fdata(self, funcs: &[lbr::Function]) -> Option<LbrFdata> {
        if self.branches.is_empty() {
            return None;
        }
        let branches: Vec<Branch> = self
            .branches
            .into_iter()
            .map(|((from, to), (n, m))| Branch { from, to, taken: n.round() as u64, mispredicted: m.round() as u64 })
            .collect();
        let traces: Vec<Trace> = self.runs.into_iter().map(|((start, end), n)| Trace { start, end, count: n.round() as u64 }).collect();
        Some(lbr::write_fdata(&branches, &traces, funcs))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use loupe_model::branches::BranchCount;
    use loupe_model::{EventName, ImageId};

    fn profile(records: &[(u64, u64, u64, u64)], traces: &[(u64, u64, u64)]) -> BranchProfile {
        let mut bp = BranchProfile::new(ImageId::elf("/x/f", None), EventName("cycles".into()));
        for &(from, to, taken, mispredicted) in records {
            bp.records.insert((ImageOffset(from), ImageOffset(to)), BranchCount { taken, mispredicted });
        }
        for &(s, e, n) in traces {
            bp.traces.insert((ImageOffset(s), ImageOffset(e)), n);
        }
        bp
    }

    // The file's code at offset 0 sits at 0x1000: offset 0x10 is address 0x1010, nothing past 0x100.
    fn vaddr(off: ImageOffset) -> Option<u64> {
        (off.0 < 0x100).then_some(off.0 + 0x1000)
    }

    // Two epochs of one build, weighted 1 and 0.5, add up per branch and run and round at the end; a record with
    // an end outside the code is skipped; an empty fold has no fdata.
    #[test]
    fn epochs_fold_with_their_weights() {
        let mut f = Fold::default();
        let bp = profile(&[(0x10, 0x20, 10, 3), (0x10, 0x200, 5, 0)], &[(0x20, 0x28, 4)]);
        assert_eq!(f.add(&bp, &vaddr, None, 1.0), Folded { mapped: 10, lost: 0 });
        assert_eq!(f.add(&bp, &vaddr, None, 0.5), Folded { mapped: 10, lost: 0 });
        assert_eq!(f.branches, BTreeMap::from([((0x1010, 0x1020), (15.0, 4.5))]));
        assert_eq!(f.runs, BTreeMap::from([((0x1020, 0x1028), 6.0)]));
        let funcs = [lbr::Function { start: 0x1000, size: 0x40, bolt_name: "f".into(), code: vec![0x90; 0x40] }];
        let fd = f.fdata(&funcs).unwrap();
        assert!(fd.text.starts_with("1 f 10 1 f 20 5 15\n"), "{}", fd.text);
        assert!(Fold::default().fdata(&funcs).is_none());
    }

    // Only the folded build is admitted; another build is refused and counted unless Loupe made it (then it is
    // left to be folded through its table), case aside.
    #[test]
    fn other_builds_are_refused_and_counted() {
        let mut f = Fold::default();
        let ours = |b: &str| b == "cc33";
        assert!(f.admits("AA11", "aa11", &ours));
        assert!(!f.admits("bb22", "aa11", &ours));
        assert!(!f.admits("cc33", "aa11", &ours));
        assert_eq!(f.refused, 1);
    }

    // An optimized build's records map through the hand-built table: a branch between entries (0x1018 ->
    // 0x1000: original 0x5040 -> 0x5000) and a run inside one entry (0x1000..0x1008) fold in at the original's
    // addresses; a branch to 0x101a (past code that decodes differently) and a run across the entry at 0x10 are
    // lost, counted by executions.
    #[test]
    fn optimized_records_map_both_ends_or_are_lost() {
        let t = crate::bat::hand_built_translator();
        let at = |off: ImageOffset| Some(off.0);
        let bp = profile(&[(0x1018, 0x1000, 7, 1), (0x1000, 0x101a, 2, 0)], &[(0x1000, 0x1008, 3), (0x1004, 0x1012, 4)]);
        let mut f = Fold::default();
        assert_eq!(f.add(&bp, &at, Some(&t), 1.0), Folded { mapped: 7, lost: 6 });
        assert_eq!(f.branches, BTreeMap::from([((0x5040, 0x5000), (7.0, 1.0))]));
        assert_eq!(f.runs, BTreeMap::from([((0x5000, 0x5008), 3.0)]));
    }
}
