//! Which breakpoints go together: per function, its reference block and
//! three more at a time.

use crate::{settled, ElfAddr, Pooled, SLOTS};

/// Breakpoints armed together: `blocks` counted against `reference`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PlannedGroup {
    pub reference: ElfAddr,
    pub blocks: Vec<ElfAddr>,
}

impl PlannedGroup {
    /// The reference first, then the blocks: the order counts come back in.
    pub fn addrs(&self) -> Vec<ElfAddr> {
        std::iter::once(self.reference).chain(self.blocks.iter().copied()).collect()
    }
}

/// The groups to rotate through.
#[derive(Clone, Debug, Default)]
pub struct Plan {
    pub groups: Vec<PlannedGroup>,
}

impl Plan {
    /// One function's groups: its blocks other than `reference`, three to a
    /// group (the fourth slot is the reference, so every count has one to
    /// be divided by from the same window).
    pub fn add_function(&mut self, reference: ElfAddr, blocks: &[ElfAddr]) {
        let others: Vec<ElfAddr> = blocks.iter().copied().filter(|&b| b != reference).collect();
        for chunk in others.chunks(SLOTS - 1) {
            self.groups.push(PlannedGroup { reference, blocks: chunk.to_vec() });
        }
    }

    /// The first group after index `after` (cyclically) with a block whose
    /// count is not yet settled in `seen`; when every group is settled, the
    /// next one (windows keep refining). Hot blocks settle within a few
    /// windows, so the windows go to the rare blocks whose counts decide
    /// what is cold: round-robin over SQLite's 1,937-block interpreter
    /// loop left blocks run millions of times at 0.
    pub fn next_unsettled(&self, after: usize, seen: &Pooled) -> Option<usize> {
        let n = self.groups.len();
        let open = |g: &PlannedGroup| g.blocks.iter().any(|&b| !settled(seen.get(&(g.reference, b)).copied().unwrap_or((0, 0))));
        let after = after % n.max(1);
        (n > 0).then(|| (1..=n).map(|k| (after + k) % n).find(|&i| open(&self.groups[i])).unwrap_or((after + 1) % n))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_go_three_to_a_group_beside_their_reference() {
        // Checks chunking: 7 blocks besides the reference make groups of 3, 3 and 1, each led by the reference.
        let mut p = Plan::default();
        let blocks: Vec<ElfAddr> = (0..8).map(|i| ElfAddr(0x1000 + i * 16)).collect();
        p.add_function(ElfAddr(0x1010), &blocks);
        let sizes: Vec<usize> = p.groups.iter().map(|g| g.blocks.len()).collect();
        assert_eq!(sizes, vec![3, 3, 1]);
        assert!(p.groups.iter().all(|g| g.reference == ElfAddr(0x1010) && !g.blocks.contains(&ElfAddr(0x1010))));
        assert_eq!(p.groups[0].addrs()[0], ElfAddr(0x1010));
    }

    #[test]
    fn settled_groups_are_skipped_until_all_are() {
        // Checks the rotation: group 1's blocks are all settled (one by its own count, one by its reference's,
        // one by both), so after group 0 comes group 2, and after group 2 group 0 (a reference count of 1999
        // settles nothing); all settled: plain round robin.
        let mut p = Plan::default();
        let r = ElfAddr(0x1000);
        let blocks: Vec<ElfAddr> = (1..=9).map(|i| ElfAddr(0x1000 + i * 16)).collect();
        p.add_function(r, &blocks);
        let mut seen = Pooled::new();
        seen.insert((r, blocks[3]), (crate::SETTLED_COUNT, 10));
        seen.insert((r, blocks[4]), (0, crate::SETTLED_REFERENCE));
        seen.insert((r, blocks[5]), (500, 5000));
        assert_eq!(p.next_unsettled(0, &seen), Some(2));
        seen.insert((r, blocks[2]), (0, 1999));
        assert_eq!(p.next_unsettled(2, &seen), Some(0));
        for &b in &blocks {
            seen.insert((r, b), (0, crate::SETTLED_REFERENCE));
        }
        assert_eq!(p.next_unsettled(0, &seen), Some(1));
        assert_eq!(Plan::default().next_unsettled(0, &seen), None);
    }
}
