//! Counts summed over windows, per block and reference, kept in a JSON
//! file per build (written whole to a temporary name and renamed, so a
//! crash leaves the previous tally).

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

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Tally {
    pub build_id: String,
    /// Window time the breakpoints were armed, summed (what the traps cost).
    pub armed_secs: f64,
    pub pairs: Vec<Pair>,
}

impl Tally {
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

    /// Adds another tally of the same build.
    pub fn merge(&mut self, other: &Tally) {
        self.armed_secs += other.armed_secs;
        for o in &other.pairs {
            match self.pairs.iter_mut().find(|p| p.block == o.block && p.reference == o.reference) {
                Some(p) => {
                    (p.count, p.reference_count, p.windows) =
                        (p.count + o.count, p.reference_count + o.reference_count, p.windows + o.windows)
                }
                None => self.pairs.push(*o),
            }
        }
    }

    /// Per reference, each block's executions per execution of the
    /// reference (`count`, `reference_count`), for the pairs whose
    /// reference ran in their windows.
    pub fn by_reference(&self) -> BTreeMap<ElfAddr, BTreeMap<ElfAddr, (u64, u64)>> {
        let mut out: BTreeMap<ElfAddr, BTreeMap<ElfAddr, (u64, u64)>> = BTreeMap::new();
        for p in self.pairs.iter().filter(|p| p.reference_count > 0) {
            out.entry(p.reference).or_default().insert(p.block, (p.count, p.reference_count));
        }
        out
    }

    /// The tally at `path`; an absent file is an empty tally, a corrupt one an error naming it.
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
            std::fs::create_dir_all(d)?;
        }
        let tmp = path.with_extension("json.tmp");
        std::fs::write(&tmp, serde_json::to_vec(self)?)?;
        std::fs::rename(&tmp, path)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn windows_sum_per_pair_and_merge_adds() {
        // Checks that counts add per (block, reference) over windows and tallies, and a reference that never ran is left out.
        let (r, a, b) = (ElfAddr(0x10), ElfAddr(0x20), ElfAddr(0x30));
        let mut t = Tally { build_id: "ab".into(), ..Default::default() };
        t.add_window(&[r, a, b], &[70, 10, 0]);
        t.add_window(&[r, a, b], &[70, 9, 1]);
        let mut u = Tally::default();
        u.add_window(&[r, a], &[7, 1]);
        u.add_window(&[ElfAddr(0x40), a], &[0, 5]);
        t.merge(&u);
        let by = t.by_reference();
        assert_eq!(by[&r][&a], (20, 147));
        assert_eq!(by[&r][&b], (1, 140));
        assert!(!by.contains_key(&ElfAddr(0x40)));
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("p/ab.json");
        t.save(&f).unwrap();
        assert_eq!(Tally::load(&f).unwrap(), Some(t));
        std::fs::write(&f, "{not json").unwrap();
        assert!(Tally::load(&f).unwrap_err().to_string().contains("ab.json"));
        assert_eq!(Tally::load(&dir.path().join("none.json")).unwrap(), None);
    }
}
