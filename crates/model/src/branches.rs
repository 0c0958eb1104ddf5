//! Branch records: the taken branches a CPU's last-branch record (Intel
//! LBR, AMD BRS, Arm BRBE) reported with samples, counted per (image,
//! event) as (from offset, to offset) pairs with how many of them were
//! mispredicted. Both ends lie in the profile's image: a branch between
//! two images (a call through the PLT into a library, its return) is
//! counted by the collector but has no place in one image's layout.
//!
//! Between two consecutive records of one stack the CPU ran straight
//! through: from the older record's target to the newer record's source.
//! Those fall-through ranges ("traces", as perf2bolt calls them) are counted
//! too, so the code they cross gets measured fall-through counts.
//!
//! ```
//! use loupe_model::*;
//! use loupe_model::branches::{BranchCount, BranchProfile};
//! let mut b = BranchProfile::new(ImageId::elf("/bin/app", None), EventName::new("cycles"));
//! b.add(ImageOffset(0x1005), ImageOffset(0x1040), 3, 1);
//! b.add(ImageOffset(0x1005), ImageOffset(0x1040), 2, 0);
//! assert_eq!(b.records[&(ImageOffset(0x1005), ImageOffset(0x1040))], BranchCount { taken: 5, mispredicted: 1 });
//! ```

use crate::{EventName, ImageId, ImageOffset, MergeError};
use std::collections::BTreeMap;

/// How often one branch was taken, and how often its target was mispredicted.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct BranchCount {
    pub taken: u64,
    pub mispredicted: u64,
}

/// The branch records of one image and event.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BranchProfile {
    pub image: ImageId,
    pub event: EventName,
    /// Samples whose branch stack contributed (each holds up to 32 records).
    pub stacks: u64,
    /// (from, to) -> counts.
    pub records: BTreeMap<(ImageOffset, ImageOffset), BranchCount>,
    /// (start, end) of a range run straight through -> times; start <= end.
    pub traces: BTreeMap<(ImageOffset, ImageOffset), u64>,
}

impl BranchProfile {
    pub fn new(image: ImageId, event: EventName) -> BranchProfile {
        BranchProfile { image, event, stacks: 0, records: BTreeMap::new(), traces: BTreeMap::new() }
    }

    /// Counts `taken` executions of the branch `from` -> `to`, `mispredicted` of them mispredicted.
    pub fn add(&mut self, from: ImageOffset, to: ImageOffset, taken: u64, mispredicted: u64) {
        let c = self.records.entry((from, to)).or_default();
        c.taken += taken;
        c.mispredicted += mispredicted;
    }

    /// Counts `n` runs straight through from `start` to `end`.
    pub fn add_trace(&mut self, start: ImageOffset, end: ImageOffset, n: u64) {
        *self.traces.entry((start, end)).or_insert(0) += n;
    }

    /// Records summed over every branch.
    pub fn total_taken(&self) -> u64 {
        self.records.values().map(|c| c.taken).sum()
    }

    /// Adds `other` (same image and event) into this profile.
    pub fn merge(&mut self, other: &BranchProfile) -> Result<(), MergeError> {
        if self.image != other.image {
            return Err(MergeError::DifferentImage(self.image.path.clone(), other.image.path.clone()));
        }
        if self.event != other.event {
            return Err(MergeError::DifferentEvent(self.event.0.clone(), other.event.0.clone()));
        }
        for (&(f, t), c) in &other.records {
            self.add(f, t, c.taken, c.mispredicted);
        }
        for (&(s, e), &n) in &other.traces {
            self.add_trace(s, e, n);
        }
        self.stacks += other.stacks;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn merge_sums_and_refuses_other_images() {
        // Checks that merging adds taken and mispredicted counts per pair and refuses another image's records.
        let img = ImageId::elf("/bin/a", None);
        let mut a = BranchProfile::new(img.clone(), EventName::new("cycles"));
        a.add(ImageOffset(1), ImageOffset(2), 10, 3);
        a.stacks = 4;
        let mut b = BranchProfile::new(img, EventName::new("cycles"));
        b.add(ImageOffset(1), ImageOffset(2), 5, 1);
        b.add(ImageOffset(7), ImageOffset(1), 2, 0);
        b.stacks = 1;
        a.add_trace(ImageOffset(2), ImageOffset(7), 3);
        b.add_trace(ImageOffset(2), ImageOffset(7), 4);
        a.merge(&b).unwrap();
        assert_eq!(a.traces[&(ImageOffset(2), ImageOffset(7))], 7);
        assert_eq!(a.records[&(ImageOffset(1), ImageOffset(2))], BranchCount { taken: 15, mispredicted: 4 });
        assert_eq!((a.total_taken(), a.stacks), (17, 5));
        let other = BranchProfile::new(ImageId::elf("/bin/b", None), EventName::new("cycles"));
        assert!(a.merge(&other).is_err());
    }
}
