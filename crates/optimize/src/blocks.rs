//! PC samples of one function to basic-block counts (Morph §3.3, Figure 2):
//! each sample is a witness for the block holding it, and a block's count
//! is its samples divided by its length in instructions, since every
//! instruction of a block runs equally often. Blocks and edges come from
//! `loupe-calc`'s control-flow graph (jump tables resolved).
//!
//! A statistical profile is not a complete one: an unsampled block may
//! still run. A block is called cold only when the 95% upper bound of its
//! count is below `cold_fraction` of the function's hottest block; other
//! unsampled blocks keep a small count so BOLT does not move them out of
//! line on no evidence.

use crate::stats::poisson_upper;
use loupe_calc::cfg::{self, Memory};
use loupe_calc::decode::{self, Flow};
use serde::Serialize;
use std::collections::BTreeMap;

#[derive(Clone, Copy, Debug)]
pub struct ColdPolicy {
    pub cold_fraction: f64,
}

impl Default for ColdPolicy {
    fn default() -> Self {
        ColdPolicy { cold_fraction: 0.01 }
    }
}

#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct BlockCount {
    /// Offset of the block's first instruction from the function's start.
    pub offset: u64,
    pub insns: usize,
    /// Aged samples that fell in the block.
    pub samples: f64,
    /// Samples per instruction: proportional to executions.
    pub count: f64,
    /// 95% upper bound of `count`.
    pub upper: f64,
    /// Confidently (almost) never run: may be split out of line.
    pub cold: bool,
}

#[derive(Clone, Debug, Serialize)]
pub struct EdgeCount {
    /// Offset of the source block's first instruction.
    pub from: u64,
    /// Offset of the source block's last instruction when it is a jump or
    /// branch (BOLT's branch records start there); `None` for fall-through
    /// from a block that ends without one.
    pub branch: Option<u64>,
    pub to: u64,
    pub count: f64,
}

#[derive(Clone, Debug, Serialize)]
pub struct FunctionProfile {
    pub name: String,
    pub start: u64,
    /// Bytes of code.
    pub size: u64,
    pub samples: f64,
    pub blocks: Vec<BlockCount>,
    /// Edge frequencies synthesized from block counts (Morph's Editor does
    /// the same): a block's count split over its successors in proportion
    /// to theirs.
    pub edges: Vec<EdgeCount>,
    /// The graph has an indirect jump whose targets were not found.
    pub missing_edges: bool,
}

/// Block profile of the function `name` whose code `bytes` starts at
/// `start`, from aged samples per virtual address.
pub fn function_profile(
    name: &str,
    start: u64,
    bytes: &[u8],
    samples: &BTreeMap<u64, f64>,
    mem: &dyn Memory,
    policy: ColdPolicy,
) -> FunctionProfile {
    let g = cfg::build(decode::decode(start, bytes), mem);
    let end = start + bytes.len() as u64;
    let mut blocks: Vec<BlockCount> = g
        .blocks
        .iter()
        .enumerate()
        .map(|(b, blk)| {
            let lo = g.start(b);
            let hi = g.last(b).end();
            let s: f64 = samples.range(lo..hi).map(|(_, w)| w).sum();
            let n = (blk.end - blk.first).max(1);
            BlockCount { offset: lo - start, insns: n, samples: s, count: s / n as f64, upper: poisson_upper(s) / n as f64, cold: false }
        })
        .collect();
    let hottest = blocks.iter().map(|b| b.count).fold(0.0, f64::max);
    for b in &mut blocks {
        b.cold = b.samples == 0.0 && b.upper < policy.cold_fraction * hottest;
    }
    let edges = synthesize_edges(&g, &blocks, start);
    let total = samples.range(start..end).map(|(_, w)| w).sum();
    FunctionProfile {
        name: name.to_string(),
        start,
        size: bytes.len() as u64,
        samples: total,
        blocks,
        edges,
        missing_edges: g.missing_edges,
    }
}

/// An edge's count is the larger of two estimates: the source's count
/// split over its successors by their counts, and the target's count split
/// over its predecessors by theirs. The second rescues edges out of a
/// block too short to catch samples of its own (a lone `jmp *` of a
/// switch dispatch) into well-sampled targets.
fn synthesize_edges(g: &cfg::Cfg, blocks: &[BlockCount], start: u64) -> Vec<EdgeCount> {
    let share = |num: f64, sum: f64, n: usize| if sum > 0.0 { num / sum } else { 1.0 / n.max(1) as f64 };
    let mut out = Vec::new();
    for (b, blk) in g.blocks.iter().enumerate() {
        // `succs` and `preds` hold edge indices.
        let succ: Vec<usize> = blk.succs.iter().map(|&e| g.edges[e].to).collect();
        let out_sum: f64 = succ.iter().map(|&s| blocks[s].count).sum();
        for &s in &succ {
            let preds: Vec<usize> = g.blocks[s].preds.iter().map(|&e| g.edges[e].from).collect();
            let in_sum: f64 = preds.iter().map(|&p| blocks[p].count).sum();
            let forward = blocks[b].count * share(blocks[s].count, out_sum, succ.len());
            let backward = blocks[s].count * share(blocks[b].count, in_sum, preds.len());
            let last = g.last(b);
            let branch = matches!(last.flow, Flow::Jump(_) | Flow::Branch(_) | Flow::IndirectJump).then(|| last.addr - start);
            out.push(EdgeCount { from: blocks[b].offset, branch, to: g.start(s) - start, count: forward.max(backward) });
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use loupe_calc::cfg::NoMemory;

    // cmp $0,%edi; je L; (3 x add $1,%eax); L: ret
    const CODE: [u8; 15] = [0x83, 0xff, 0x00, 0x74, 0x09, 0x83, 0xc0, 0x01, 0x83, 0xc0, 0x01, 0x83, 0xc0, 0x01, 0xc3];

    fn at(s: &[(u64, f64)]) -> BTreeMap<u64, f64> {
        s.iter().copied().collect()
    }

    // Figure 2: equal samples per instruction give equal block counts,
    // whatever the block's length.
    #[test]
    fn counts_scale_by_block_length() {
        let p = function_profile(
            "f",
            0x1000,
            &CODE,
            &at(&[(0x1000, 60.0), (0x1003, 60.0), (0x1005, 60.0), (0x1008, 60.0), (0x100b, 60.0), (0x100e, 60.0)]),
            &NoMemory,
            ColdPolicy::default(),
        );
        let offs: Vec<u64> = p.blocks.iter().map(|b| b.offset).collect();
        assert_eq!(offs, vec![0, 5, 14]);
        let counts: Vec<f64> = p.blocks.iter().map(|b| b.count).collect();
        assert_eq!(counts, vec![60.0, 60.0, 60.0]);
        assert_eq!(p.samples, 360.0);
        assert!(p.blocks.iter().all(|b| !b.cold));
    }

    // An unsampled block is cold only when the evidence says so: with
    // 1000 samples per instruction elsewhere yes, with 2 no.
    #[test]
    fn cold_needs_confidence() {
        let dense = function_profile(
            "f",
            0x1000,
            &CODE,
            &at(&[(0x1000, 1000.0), (0x1003, 1000.0), (0x100e, 1000.0)]),
            &NoMemory,
            ColdPolicy::default(),
        );
        assert_eq!(dense.blocks.iter().map(|b| b.cold).collect::<Vec<_>>(), vec![false, true, false]);
        let sparse = function_profile("f", 0x1000, &CODE, &at(&[(0x1000, 2.0), (0x100e, 1.0)]), &NoMemory, ColdPolicy::default());
        assert!(sparse.blocks.iter().all(|b| !b.cold));
    }

    // An unsampled source block (too short to catch samples) still passes
    // on the count of a target it is the only predecessor of.
    #[test]
    fn edges_from_target_counts() {
        let p = function_profile(
            "f",
            0x1000,
            &CODE,
            &at(&[(0x1005, 100.0), (0x1008, 100.0), (0x100b, 100.0), (0x100e, 100.0)]),
            &NoMemory,
            ColdPolicy::default(),
        );
        let e: Vec<(u64, u64, f64)> = p.edges.iter().map(|e| (e.from, e.to, e.count)).collect();
        assert!(e.contains(&(0, 5, 100.0)), "{e:?}");
    }

    // Edges: the entry block's count splits over je-taken and fall-through
    // in proportion to the successors' counts (0 and 1000 here).
    #[test]
    fn edges_from_block_counts() {
        let p = function_profile(
            "f",
            0x1000,
            &CODE,
            &at(&[(0x1000, 1000.0), (0x1003, 1000.0), (0x100e, 1000.0)]),
            &NoMemory,
            ColdPolicy::default(),
        );
        let e: Vec<(u64, u64, f64)> = p.edges.iter().map(|e| (e.from, e.to, e.count)).collect();
        assert!(e.contains(&(0, 14, 1000.0)));
        assert!(e.contains(&(0, 5, 0.0)));
        assert!(e.contains(&(5, 14, 0.0)));
        assert_eq!(e.len(), 3);
        // The je at offset 3 is the branch of both edges out of the entry block; block 2 falls through.
        let br: Vec<Option<u64>> = p.edges.iter().map(|e| e.branch).collect();
        assert_eq!(br, vec![Some(3), Some(3), None]);
    }
}
