//! Counts summed over windows, per run, block and reference, kept in a JSON
//! file per build (written whole to a temporary name and renamed, so a
//! crash leaves the previous tally).
//!
//! Windows are spread over time, but each saturates with traps, so a
//! window covers far less of the run where its blocks are hot: a ratio
//! summed over windows weights the run's phases by time, not by how often
//! the reference ran in them. Each run therefore also keeps the timer
//! samples its reference blocks drew between windows; a block's ratio is
//! the runs' ratios weighted by those (a block's samples per execution vary
//! between blocks, not between runs of the same block).

use crate::ElfAddr;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::io;
use std::path::Path;

/// One block's executions and its reference's, over the same windows.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Pair {
    pub block: ElfAddr,
    pub reference: ElfAddr,
    pub count: u64,
    pub reference_count: u64,
    pub windows: u64,
}

/// A block's executions per execution of its reference.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Ratio {
    pub ratio: f64,
    /// The reference's executions it was counted over (all runs).
    pub reference_count: u64,
    /// Share of the reference's samples (of all commands probed) that fell
    /// in commands under which this block was counted: below 1, some of
    /// what the reference ran was never seen beside this block.
    pub coverage: f64,
    /// Fewest windows it was counted in under any one command: a window
    /// sees one short stretch of a run (about a hundred executions of a hot
    /// reference), so a block that runs in one phase only is 0 in every
    /// window that misses the phase, however many reference executions
    /// those windows counted.
    pub min_windows: u64,
}

/// One probing run (one `optimize probe`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Run {
    /// What ran: the command line probed (runs of the same command are
    /// pooled, so a group missed in one run is counted from the others).
    #[serde(default)]
    pub label: String,
    pub pairs: Vec<Pair>,
    /// Timer samples in each reference block between windows: how often it ran in this run, up to a factor
    /// of the block's own.
    pub reference_samples: Vec<(ElfAddr, u64)>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Tally {
    pub build_id: String,
    /// Window time the breakpoints were armed, summed (what the traps cost).
    pub armed_secs: f64,
    pub runs: Vec<Run>,
    /// Per function (its first address), the reference block its other
    /// blocks are counted against: the one calibration found most executed.
    #[serde(default)]
    pub references: BTreeMap<u64, ElfAddr>,
}

/// A block's count against its reference is settled, and its group's
/// windows better spent elsewhere, once the block itself was counted
/// [`SETTLED_COUNT`] times (its ratio known to about +-22%) or its
/// reference [`SETTLED_REFERENCE`] times (a block never counted in those
/// runs less than once per 650 of the reference, at 95%).
pub const SETTLED_COUNT: u64 = 20;
pub const SETTLED_REFERENCE: u64 = 2000;

/// Counts of (reference, block) pooled over windows: (block count, reference count).
pub type Pooled = std::collections::HashMap<(ElfAddr, ElfAddr), (u64, u64)>;

/// Whether a pooled (block count, reference count) needs no more windows.
pub fn settled((count, reference_count): (u64, u64)) -> bool {
    count >= SETTLED_COUNT || reference_count >= SETTLED_REFERENCE
}

impl Run {
    /// Adds one window's counts of `addrs` (the reference first).
    pub fn add_window(&mut self, addrs: &[ElfAddr], counts: &[u64]) {
        let (Some(&reference), Some(&rc)) = (addrs.first(), counts.first()) else { return };
        for (&block, &count) in addrs.iter().zip(counts).skip(1) {
            let i = match self.pairs.iter().position(|p| p.block == block && p.reference == reference) {
                Some(i) => i,
                None => {
                    self.pairs.push(Pair { block, reference, ..Default::default() });
                    self.pairs.len() - 1
                }
            };
            let p = &mut self.pairs[i];
            (p.count, p.reference_count, p.windows) = (p.count + count, p.reference_count + rc, p.windows + 1);
        }
    }
}

/// One (reference, block) pair over the commands that counted it: their
/// ratios weighted by their reference samples, those weights, the summed
/// counts and the fewest windows of any one command.
#[derive(Default)]
struct Commands {
    weighted: f64,
    weight: f64,
    count: u64,
    reference_count: u64,
    min_windows: u64,
}

impl Tally {
    /// Counts of the runs labelled `label` (one command's), pooled as
    /// [`Tally::by_reference`] pools them.
    pub fn pooled(&self, label: &str) -> Pooled {
        let mut out = Pooled::new();
        for p in self.runs.iter().filter(|r| r.label == label).flat_map(|r| &r.pairs) {
            let a = out.entry((p.reference, p.block)).or_default();
            (a.0, a.1) = (a.0 + p.count, a.1 + p.reference_count);
        }
        out
    }

    /// Per reference, each block's [`Ratio`]. Runs of one command are
    /// pooled: its ratio is its counts summed, its weight its runs' samples
    /// of the reference (all of them: how often the reference ran under
    /// that command). Commands' ratios are averaged by weight; when no
    /// command has a sample of the reference, counts are summed over all
    /// runs.
    pub fn by_reference(&self) -> BTreeMap<ElfAddr, BTreeMap<ElfAddr, Ratio>> {
        let mut weight: BTreeMap<(&str, ElfAddr), f64> = BTreeMap::new();
        let mut pooled: BTreeMap<(ElfAddr, ElfAddr, &str), (u64, u64, u64)> = BTreeMap::new();
        for run in &self.runs {
            for &(r, n) in &run.reference_samples {
                *weight.entry((run.label.as_str(), r)).or_default() += n as f64;
            }
            for p in &run.pairs {
                let a = pooled.entry((p.reference, p.block, run.label.as_str())).or_default();
                (a.0, a.1, a.2) = (a.0 + p.count, a.1 + p.reference_count, a.2 + p.windows);
            }
        }
        let mut acc: BTreeMap<(ElfAddr, ElfAddr), Commands> = BTreeMap::new();
        for ((r, b, label), (c, rc, n)) in pooled.into_iter().filter(|(_, (_, rc, _))| *rc > 0) {
            let w = weight.get(&(label, r)).copied().unwrap_or(0.0);
            let a = acc.entry((r, b)).or_insert(Commands { min_windows: u64::MAX, ..Default::default() });
            a.weighted += w * c as f64 / rc as f64;
            a.weight += w;
            (a.count, a.reference_count, a.min_windows) = (a.count + c, a.reference_count + rc, a.min_windows.min(n));
        }
        let mut total: BTreeMap<ElfAddr, f64> = BTreeMap::new();
        for ((_, r), w) in &weight {
            *total.entry(*r).or_default() += w;
        }
        let mut out: BTreeMap<ElfAddr, BTreeMap<ElfAddr, Ratio>> = BTreeMap::new();
        for ((r, b), a) in acc {
            let all = total.get(&r).copied().unwrap_or(0.0);
            let ratio = if a.weight > 0.0 { a.weighted / a.weight } else { a.count as f64 / a.reference_count as f64 };
            let coverage = if all > 0.0 { a.weight / all } else { 1.0 };
            out.entry(r).or_default().insert(b, Ratio { ratio, reference_count: a.reference_count, coverage, min_windows: a.min_windows });
        }
        out
    }

    /// The tally at `path`; an absent file is `None`, a corrupt one an error naming it.
    pub fn load(path: &Path) -> io::Result<Option<Tally>> {
        match std::fs::read(path) {
            Ok(b) => serde_json::from_slice(&b)
                .map(Some)
                .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, format!("{}: {e}", path.display()))),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e),
        }
    }

    pub fn save(&self, path: &Path) -> io::Result<()> {
        if let Some(d) = path.parent() {
            loupe_files::create_dir_all(d)?;
        }
        let tmp = path.with_extension("json.tmp");
        loupe_files::write(&tmp, serde_json::to_vec(self)?)?;
        std::fs::rename(&tmp, path)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runs_weigh_by_their_reference_samples() {
        // Checks the weighting: run 1 (reference sampled 300 times) has block a at 0.1 per reference execution,
        // run 2 (100 samples) at 0.5, so a is (300*0.1 + 100*0.5) / 400 = 0.2, not the summed 0.3 of equal
        // windows; without samples the counts are summed; a reference that never ran is left out. A third run
        // of run 1's command that counted b once more pools with run 1 (b's 3 in 150), and its 60 samples of
        // the reference add to that command's weight although it did not count a.
        let (r, a, b) = (ElfAddr(0x10), ElfAddr(0x20), ElfAddr(0x30));
        let mut one = Run { label: "one".into(), reference_samples: vec![(r, 300)], ..Default::default() };
        one.add_window(&[r, a, b], &[50, 5, 0]);
        one.add_window(&[r, a, b], &[50, 5, 2]);
        let mut two = Run { label: "two".into(), reference_samples: vec![(r, 100)], ..Default::default() };
        two.add_window(&[r, a], &[100, 50]);
        two.add_window(&[ElfAddr(0x40), a], &[0, 5]);
        let t = Tally { build_id: "ab".into(), runs: vec![one.clone(), two.clone()], ..Default::default() };
        let by = t.by_reference();
        assert!((by[&r][&a].ratio - 0.2).abs() < 1e-12 && by[&r][&a].reference_count == 200, "{by:?}");
        assert!((by[&r][&b].ratio - 0.02).abs() < 1e-12, "{by:?}");
        assert!(!by.contains_key(&ElfAddr(0x40)));
        // a: two windows under "one", one under "two"; b: counted under "one" only, in two windows.
        assert_eq!((by[&r][&a].min_windows, by[&r][&b].min_windows), (1, 2));
        let mut three = Run { label: "one".into(), reference_samples: vec![(r, 60)], ..Default::default() };
        three.add_window(&[r, b], &[50, 1]);
        let mut pooled = t.clone();
        pooled.runs.push(three);
        let p = pooled.by_reference();
        // b was counted only under "one": 360 of the 460 samples of the reference.
        assert!((p[&r][&b].coverage - 360.0 / 460.0).abs() < 1e-12 && p[&r][&a].coverage == 1.0, "{p:?}");
        assert!(
            (p[&r][&b].ratio - 3.0 / 150.0).abs() < 1e-12 && (p[&r][&a].ratio - (360.0 * 0.1 + 100.0 * 0.5) / 460.0).abs() < 1e-12,
            "{p:?}"
        );
        one.reference_samples.clear();
        two.reference_samples.clear();
        let plain = Tally { runs: vec![one, two], ..Default::default() }.by_reference();
        assert!((plain[&r][&a].ratio - 0.3).abs() < 1e-12, "{plain:?}");
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("p/ab.json");
        t.save(&f).unwrap();
        assert_eq!(Tally::load(&f).unwrap(), Some(t));
        std::fs::write(&f, "{not json").unwrap();
        assert!(Tally::load(&f).unwrap_err().to_string().contains("ab.json"));
        assert_eq!(Tally::load(&dir.path().join("none.json")).unwrap(), None);
    }
}
