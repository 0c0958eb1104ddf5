//! Which breakpoints go together: per function, its reference block and
//! three more at a time.

use crate::{ElfAddr, SLOTS};

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
}
