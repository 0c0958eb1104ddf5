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
//! line on no evidence. A block that flow says must run as often as a
//! sampled neighbour (its only predecessor always enters it, or it is the
//! only way into a sampled successor) gets that count even with no sample
//! of its own: short blocks (a lone `jmp`, a `mov` before a call) catch
//! few samples however often they run.

use crate::infer;
use crate::stats::{poisson_lower, poisson_upper};
use loupe_calc::cfg::{self, Memory};
use loupe_calc::decode::{self, Flow};
use serde::Serialize;
use std::collections::BTreeMap;

#[derive(Clone, Copy, Debug)]
pub struct ColdPolicy {
    pub cold_fraction: f64,
    /// Undo the timer's skid: an interrupt reports the instruction after
    /// the one that was running, so a block's first instruction holds the
    /// samples of whichever predecessor's last instruction ran before it
    /// (a cache-missing compare-and-branch lands on the successor taken).
    /// A block of n > 1 instructions is then counted from its instructions
    /// 2..n over n - 1. Measured at 30k samples (`bench/optimize_realprogs.py`
    /// branch agreement with the complete profile): Lua 50.4% -> 68.2%,
    /// zstd 84.5% both ways, SQLite 73.6% -> 75.3%.
    pub skid: bool,
    /// Make counts flow-consistent by minimum-cost flow (`infer`) instead
    /// of raising counts along forced chains and splitting edges by ratio.
    pub infer: bool,
}

impl Default for ColdPolicy {
    fn default() -> Self {
        ColdPolicy { cold_fraction: 0.01, skid: true, infer: false }
    }
}

/// Exact relative counts of some of a function's blocks (execute
/// breakpoints, `loupe optimize probe`): per block's first address, its
/// executions per execution of the function's reference block, and how
/// many of the reference's executions that was counted over. The
/// reference itself is in the map as `(1.0, n)`.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Measured {
    pub counts: BTreeMap<u64, (f64, u64)>,
}

/// Instructions of evidence a measured block's count stands for in flow
/// inference, per reference execution counted beside it: a ratio over
/// 30 reference executions (0 counted: up to 10% of the reference) weighs
/// as 3 sampled instructions, one over 10,000 outweighs any sample
/// estimate (capped at `MEASURED_EVIDENCE`).
const EVIDENCE_PER_REFERENCE: f64 = 0.1;
/// Normal quantile of the lower bound a measured 0's block's own samples
/// must clear to overrule it (`apply_measured`): 99.9%, since a function
/// has dozens of measured zeros, and a stray sample of a rare block (the
/// `modes` workload's HALT, 1 in 70,000 dispatches) must not outweigh its 0.
const MISSED_PHASE_Z: f64 = 3.09;
const MEASURED_EVIDENCE: usize = 1000;
/// A block's ratio is used once its reference ran this often in its
/// windows (the ratio then has a resolution of a few percent).
const MIN_REFERENCE: u64 = 30;

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
    /// With inferred flow: the count that came from outside the graph
    /// (calls of the entry, escapes where the graph has no way in), so
    /// count = edges in + `entered` = edges out + `left` exactly.
    #[serde(skip_serializing_if = "is_zero")]
    pub entered: f64,
    /// With inferred flow: the count that left the graph (returns, tail
    /// calls, escapes).
    #[serde(skip_serializing_if = "is_zero")]
    pub left: f64,
}

fn is_zero(x: &f64) -> bool {
    *x == 0.0
}

#[derive(Clone, Debug, Serialize)]
pub struct EdgeCount {
    /// Offset of the source block's first instruction.
    pub from: u64,
    /// Offset of the source block's last instruction when it is a jump or
    /// branch; `None` for fall-through from a block that ends without one.
    pub branch: Option<u64>,
    /// Offset of the source block's last instruction, whatever it is:
    /// BOLT's records start there, a plain fall-through's included.
    pub last: u64,
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
    /// Direct calls and tail jumps to other functions, with their block's count.
    pub calls: Vec<CallCount>,
    /// BOLT's name of the function (`NAME/N` for a local symbol, see
    /// `bolt_names`); the fdata writers use it. Defaults to `name`.
    pub bolt_name: String,
}

#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct CallCount {
    /// Offset of the call (or tail jump) instruction.
    pub offset: u64,
    /// Virtual address of the callee.
    pub target: u64,
    pub count: f64,
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
    measured: Option<&Measured>,
) -> FunctionProfile {
    let g = cfg::build(decode::decode(start, bytes), mem);
    let end = start + bytes.len() as u64;
    // Per block: all its samples, and those net of skid with the
    // instructions they were counted from. A lone instruction has only its
    // predecessor's skid and is counted from that; one without samples is
    // unknown (0 instructions), never called cold, since one instruction
    // that retires beside others may go unsampled however often it runs
    // (at 300k samples, 58-77% of the executions of hot one-instruction
    // blocks of Lua, SQLite, CPython and gawk had none;
    // `bench/sample_yield.py`). See `fill_unknown`.
    let mut own: Vec<(f64, f64, usize)> = (0..g.blocks.len())
        .map(|b| {
            let blk = &g.blocks[b];
            let all: f64 = samples.range(g.start(b)..g.last(b).end()).map(|(_, w)| w).sum();
            let n = blk.end - blk.first;
            let (o, k) = match (policy.skid, own_samples(&g, b, samples)) {
                (true, Some(own)) => own,
                _ if n == 1 && all == 0.0 => (0.0, 0),
                _ => (all, n),
            };
            (all, o, k)
        })
        .collect();
    let mut blocks: Vec<BlockCount> = g
        .blocks
        .iter()
        .enumerate()
        .map(|(b, blk)| {
            let (all, o, k) = own[b];
            let per = |x: f64| if k > 0 { x / k as f64 } else { 0.0 };
            BlockCount {
                offset: g.start(b) - start,
                insns: (blk.end - blk.first).max(1),
                samples: all,
                count: per(o),
                upper: per(poisson_upper(o)),
                cold: false,
                entered: 0.0,
                left: 0.0,
            }
        })
        .collect();
    fill_unknown(&g, &mut blocks, &own);
    // Measured blocks: their exact ratios, on the samples' scale; flow is
    // then inferred around them (they hold, the estimates give way).
    let measured = measured.filter(|m| !m.counts.is_empty());
    if let Some(m) = measured {
        apply_measured(&g, m, &mut blocks, &mut own);
    }
    let edges = if policy.infer || measured.is_some() {
        let evidence: Vec<usize> = own.iter().map(|&(_, _, k)| k).collect();
        let estimate: Vec<f64> = blocks.iter().map(|b| b.count).collect();
        let flow = infer::infer(&g, &estimate, &evidence);
        for (k, b) in blocks.iter_mut().enumerate() {
            (b.count, b.entered, b.left) = (flow.blocks[k], flow.entered[k], flow.left[k]);
            b.upper = b.upper.max(b.count);
        }
        g.edges
            .iter()
            .zip(&flow.edges)
            .map(|(e, &count)| EdgeCount {
                from: blocks[e.from].offset,
                branch: branch_of(&g, e.from, start),
                last: g.last(e.from).addr - start,
                to: g.start(e.to) - start,
                count,
            })
            .collect()
    } else {
        propagate_flow(&g, &mut blocks);
        synthesize_edges(&g, &blocks, start)
    };
    let hottest = blocks.iter().map(|b| b.count).fold(0.0, f64::max);
    for (b, &(_, _, k)) in blocks.iter_mut().zip(&own) {
        b.cold = k > 0 && b.count == 0.0 && b.upper < policy.cold_fraction * hottest;
    }
    cold_behind_cold(&g, &mut blocks);
    let calls = calls_out(&g, &blocks, start, end, bytes);
    let total = samples.range(start..end).map(|(_, w)| w).sum();
    FunctionProfile {
        name: name.to_string(),
        start,
        size: bytes.len() as u64,
        samples: total,
        blocks,
        edges,
        missing_edges: g.missing_edges,
        calls,
        bolt_name: name.to_string(),
    }
}

/// Puts measured ratios on the samples' scale: the reference block's count
/// is the one that makes the measured blocks' counts, times the
/// instructions each was estimated from, add up to those blocks' own
/// samples (a ratio of sums: long, well-sampled blocks carry the scale).
/// Measured blocks then weigh by how many reference executions their
/// ratio was counted over, with an upper bound from the count's Poisson
/// bound.
fn apply_measured(g: &cfg::Cfg, m: &Measured, blocks: &mut [BlockCount], own: &mut [(f64, f64, usize)]) {
    let ratio = |b: usize| m.counts.get(&g.start(b)).filter(|&&(_, r)| r >= MIN_REFERENCE).map(|&(x, r)| (x, x * r as f64, r));
    let (mut samples, mut weight) = (0.0, 0.0);
    // Blocks measured at 0 carry no weight, so their samples (which a block
    // that never ran would not have) would only inflate the scale.
    for (b, &(_, o, k)) in own.iter().enumerate() {
        if let Some((x, _, _)) = ratio(b).filter(|&(x, _, _)| x > 0.0 && k > 0) {
            samples += o;
            weight += x * k as f64;
        }
    }
    let hottest = blocks.iter().map(|b| b.count).fold(0.0, f64::max);
    // No sampled instruction among the measured blocks: the hottest
    // estimate stands for the reference.
    let scale = if weight > 0.0 && samples > 0.0 { samples / weight } else { hottest };
    for b in 0..blocks.len() {
        let Some((x, c, r)) = ratio(b) else { continue };
        let upper = scale * poisson_upper(c) / r as f64;
        // A block counted 0 in its windows whose own samples (net of skid:
        // it ran) put its count surely above what that 0 allows was missed,
        // not absent: its windows fell outside the phase of the run it runs
        // in. Lua's `sort.lua` runs one arithmetic block 0.6 M times (2.8%
        // of the reference) while it builds its table, a twentieth of the
        // run; all 18 windows fell in the sort, and the measured 0 over
        // 2,000 reference executions split out a block the test ran 22.5 M
        // times, against its 37 samples. Left to the samples.
        let (o, k) = (own[b].1, own[b].2);
        if x == 0.0 && k > 0 && poisson_lower(o, MISSED_PHASE_Z) / k as f64 > upper {
            continue;
        }
        blocks[b].count = scale * x;
        blocks[b].upper = upper;
        own[b].2 = ((r as f64 * EVIDENCE_PER_REFERENCE) as usize).clamp(1, MEASURED_EVIDENCE);
    }
}

/// Unknown blocks (no instruction to count them from) get the even split
/// of their predecessors' counts: with no evidence either way, a branch
/// into one is called 50:50, which keeps the compiler's layout of the
/// branch (`if (x) y = z;` stays a fall-through chain) instead of moving
/// the block out of line as if it never ran. Counted 0 instead, gawk's
/// `r_interpret` lost a 170 M-execution store (`mov %eax,sourceline`,
/// never sampled) to its cold end. Flow inference leaves them to flow (no
/// evidence), and a block only flow reaches is raised there or by
/// `propagate_flow`. BENCHMARKS.md, eleventh pass.
fn fill_unknown(g: &cfg::Cfg, blocks: &mut [BlockCount], own: &[(f64, f64, usize)]) {
    for b in 0..blocks.len() {
        if own[b].2 != 0 {
            continue;
        }
        let split: f64 = g.blocks[b]
            .preds
            .iter()
            .map(|&e| g.edges[e].from)
            .filter(|&p| p != b)
            .map(|p| blocks[p].count / g.blocks[p].succs.len().max(1) as f64)
            .sum();
        blocks[b].count = split;
        blocks[b].upper = blocks[b].upper.max(split);
    }
}

/// Blocks with no count that can be reached only through cold blocks are
/// cold too. A short block without samples is not cold on its own (its
/// upper bound stays above the threshold: 2 instructions' worth of no
/// samples is weak evidence), so a region the training never entered,
/// such as mawk's regular-expression machine behind the test for a plain
/// string, was called cold in its long blocks and warm in its short ones,
/// and BOLT split its chains between the hot and the cold part; the
/// complete profile calls all of it cold and keeps the compiler's order
/// in the cold part. The region has no samples in any of its
/// instructions and every way in passes a block confidently below the
/// threshold. Starts: the entry, every block with a count (never cold:
/// cold means a count of 0), and blocks the static graph cannot reach
/// (entered some other way). Not applied when an
/// indirect jump's targets are unknown (any block may be entered).
fn cold_behind_cold(g: &cfg::Cfg, blocks: &mut [BlockCount]) {
    if g.missing_edges || blocks.is_empty() {
        return;
    }
    let mut seen = vec![false; blocks.len()];
    let mut stack: Vec<usize> = (0..blocks.len()).filter(|&b| b == 0 || !g.blocks[b].reachable || blocks[b].count > 0.0).collect();
    for &b in &stack {
        seen[b] = true;
    }
    while let Some(b) = stack.pop() {
        for &e in &g.blocks[b].succs {
            let t = g.edges[e].to;
            if !seen[t] && !blocks[t].cold {
                seen[t] = true;
                stack.push(t);
            }
        }
    }
    for (b, blk) in blocks.iter_mut().enumerate() {
        if !seen[b] && blk.count == 0.0 {
            blk.cold = true;
        }
    }
}

/// A block's samples without the timer's skid, and the instructions they
/// were counted from: a block's first instruction holds its predecessor's
/// samples. `None` for a lone instruction.
fn own_samples(g: &cfg::Cfg, b: usize, samples: &BTreeMap<u64, f64>) -> Option<(f64, usize)> {
    let blk = &g.blocks[b];
    let from = blk.first + 1;
    (from < blk.end).then(|| (samples.range(g.insns[from].addr..g.insns[blk.end - 1].end()).map(|(_, w)| w).sum(), blk.end - from))
}

/// Offset of block `b`'s last instruction when it is a jump or branch
/// (BOLT's branch records start there); `None` when the block falls through.
fn branch_of(g: &cfg::Cfg, b: usize, start: u64) -> Option<u64> {
    let last = g.last(b);
    matches!(last.flow, Flow::Jump(_) | Flow::Branch(_) | Flow::IndirectJump).then(|| last.addr - start)
}

/// Flow-implied counts: a block runs at least as often as the sum of its
/// predecessors that have no other successor, and as the sum of its
/// successors that have no other predecessor. Raised counts propagate
/// along chains (a few passes; each only raises a count).
fn propagate_flow(g: &cfg::Cfg, blocks: &mut [BlockCount]) {
    let succs = |b: usize| -> Vec<usize> { g.blocks[b].succs.iter().map(|&e| g.edges[e].to).collect() };
    let preds = |b: usize| -> Vec<usize> { g.blocks[b].preds.iter().map(|&e| g.edges[e].from).collect() };
    for _ in 0..8 {
        let mut changed = false;
        for b in 0..blocks.len() {
            let into: f64 = preds(b).into_iter().filter(|&p| p != b && succs(p).len() == 1).map(|p| blocks[p].count).sum();
            let out: f64 = succs(b).into_iter().filter(|&s| s != b && preds(s).len() == 1).map(|s| blocks[s].count).sum();
            let implied = into.max(out);
            if implied > blocks[b].count * 1.000_001 {
                blocks[b].count = implied;
                blocks[b].upper = blocks[b].upper.max(implied);
                changed = true;
            }
        }
        if !changed {
            break;
        }
    }
}

/// Direct calls (`call rel32`) and jumps out of the function (tail calls),
/// each counted as often as its block runs.
fn calls_out(g: &cfg::Cfg, blocks: &[BlockCount], start: u64, end: u64, bytes: &[u8]) -> Vec<CallCount> {
    let mut out = Vec::new();
    for (k, i) in g.insns.iter().enumerate() {
        let target = match i.flow {
            Flow::Jump(t) if !(start..end).contains(&t) => Some(t),
            _ if i.is_call && i.len == 5 => {
                let at = (i.addr - start) as usize;
                let code = bytes.get(at..at + 5).filter(|c| c[0] == 0xe8);
                code.map(|c| i.end().wrapping_add(i32::from_le_bytes([c[1], c[2], c[3], c[4]]) as i64 as u64))
            }
            _ => None,
        };
        let count = blocks[g.block_of(k)].count;
        if let Some(t) = target.filter(|_| count > 0.0) {
            out.push(CallCount { offset: i.addr - start, target: t, count });
        }
    }
    out
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
            out.push(EdgeCount {
                from: blocks[b].offset,
                branch: branch_of(g, b, start),
                last: g.last(b).addr - start,
                to: g.start(s) - start,
                count: forward.max(backward),
            });
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
            None,
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
            None,
        );
        assert_eq!(dense.blocks.iter().map(|b| b.cold).collect::<Vec<_>>(), vec![false, true, false]);
        let sparse = function_profile("f", 0x1000, &CODE, &at(&[(0x1000, 2.0), (0x100e, 1.0)]), &NoMemory, ColdPolicy::default(), None);
        assert!(sparse.blocks.iter().all(|b| !b.cold));
    }

    // Measured ratios override the samples: the samples put all weight on
    // the branch's fall-through (0x1005) and none on the exit (0x100e), the
    // breakpoints counted the fall-through at 1/4 of the entry (40 of 160
    // over the same windows), the exit at every entry. Counts follow the
    // ratios on the samples' scale (the measured blocks' own samples over
    // their ratio-weighted instructions), and the edges follow flow.
    #[test]
    fn measured_ratios_replace_sample_estimates() {
        let s = at(&[(0x1000, 10.0), (0x1003, 50.0), (0x1005, 5.0), (0x1008, 100.0), (0x100b, 100.0)]);
        let m = Measured { counts: [(0x1000, (1.0, 160)), (0x1005, (0.25, 160)), (0x100e, (1.0, 160))].into_iter().collect() };
        let p = function_profile("f", 0x1000, &CODE, &s, &NoMemory, ColdPolicy::default(), Some(&m));
        let c: Vec<f64> = p.blocks.iter().map(|b| b.count).collect();
        // Own samples (skid: instructions 2..n) 50 + 200 over 1*1 + 2*0.25 instructions; the lone `ret`
        // has none, so it is unknown and carries no weight in the scale.
        let scale = 250.0 / 1.5;
        let want = [scale, scale * 0.25, scale];
        assert!(c.iter().zip(want).all(|(x, w)| (x - w).abs() < 1e-3 * w), "{c:?} vs {want:?}");
        let e: Vec<(u64, u64, f64)> = p.edges.iter().map(|e| (e.from, e.to, (e.count / scale * 100.0).round())).collect();
        assert!(e.contains(&(0, 5, 25.0)) && e.contains(&(0, 14, 75.0)) && e.contains(&(5, 14, 25.0)), "{e:?}");
        // Too few reference executions: the samples' estimate stands.
        let weak = Measured { counts: [(0x1000, (1.0, 20)), (0x1005, (0.25, 20))].into_iter().collect() };
        let q = function_profile("f", 0x1000, &CODE, &s, &NoMemory, ColdPolicy { infer: true, ..ColdPolicy::default() }, Some(&weak));
        let r = function_profile("f", 0x1000, &CODE, &s, &NoMemory, ColdPolicy { infer: true, ..ColdPolicy::default() }, None);
        assert_eq!(q.blocks, r.blocks);
    }

    // A block measured at 0 whose own samples put it surely above what the
    // 0 allows ran: its windows missed the phase it runs in, and the
    // samples decide (Lua's sort.lua, BENCHMARKS.md fourteenth pass).
    // Without samples, or with a stray one, the 0 stands.
    #[test]
    fn measured_zero_against_own_samples_is_a_missed_phase() {
        let m = Measured { counts: [(0x1000, (1.0, 5000)), (0x1005, (0.0, 5000)), (0x100e, (1.0, 5000))].into_iter().collect() };
        let hot = [(0x1000, 1000.0), (0x1003, 1000.0), (0x100e, 1000.0)];
        let ran = at(&[&hot[..], &[(0x1008, 30.0), (0x100b, 30.0)]].concat());
        let p = function_profile("f", 0x1000, &CODE, &ran, &NoMemory, ColdPolicy::default(), Some(&m));
        assert!(!p.blocks[1].cold && p.blocks[1].count > 0.0, "{:?}", p.blocks[1]);
        for rare in [at(&hot), at(&[&hot[..], &[(0x1008, 1.0)]].concat())] {
            let q = function_profile("f", 0x1000, &CODE, &rare, &NoMemory, ColdPolicy::default(), Some(&m));
            assert!(q.blocks[1].cold && q.blocks[1].count == 0.0, "{:?}", q.blocks[1]);
        }
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
            None,
        );
        let e: Vec<(u64, u64, f64)> = p.edges.iter().map(|e| (e.from, e.to, e.count)).collect();
        assert!(e.contains(&(0, 5, 100.0)), "{e:?}");
    }

    // An unsampled block that its sampled only predecessor always enters
    // runs as often as that predecessor.
    #[test]
    fn flow_implied_counts() {
        // mov $1,%eax; jmp L; nop; L: add $1,%eax; ret
        let code = [0xb8, 0x01, 0, 0, 0, 0xeb, 0x01, 0x90, 0x83, 0xc0, 0x01, 0xc3];
        let p = function_profile("f", 0x1000, &code, &at(&[(0x1000, 50.0), (0x1005, 50.0)]), &NoMemory, ColdPolicy::default(), None);
        let c: Vec<(u64, f64)> = p.blocks.iter().map(|b| (b.offset, b.count)).collect();
        // Entry (2 insns, 50 per insn) always jumps to L: L runs 50 times though unsampled; the nop never runs.
        assert_eq!(c, vec![(0, 50.0), (7, 0.0), (8, 50.0)]);
        assert!(!p.blocks[2].cold);
    }

    // `if (x) y = z;`: a lone store between a branch and its join never
    // caught a sample (it retires with the branch). It is unknown, not
    // cold: the branch is called 50:50, so the store keeps its place
    // between the two and both edges into the join keep a count.
    #[test]
    fn lone_unsampled_instruction_takes_an_even_split() {
        // cmp $0,%edi; jle L; mov %edi,%eax; L: add $1,%eax; add $1,%eax; ret
        let code = [0x83, 0xff, 0x00, 0x7e, 0x02, 0x89, 0xf8, 0x83, 0xc0, 0x01, 0x83, 0xc0, 0x01, 0xc3];
        let p = function_profile(
            "f",
            0x1000,
            &code,
            &at(&[(0x1003, 1000.0), (0x100a, 1000.0), (0x100d, 1000.0)]),
            &NoMemory,
            ColdPolicy::default(),
            None,
        );
        let c: Vec<(u64, f64, bool)> = p.blocks.iter().map(|b| (b.offset, b.count.round(), b.cold)).collect();
        assert_eq!(c, vec![(0, 1000.0, false), (5, 500.0, false), (7, 1000.0, false)]);
        let e: Vec<(u64, u64)> = p.edges.iter().filter(|e| e.count > 0.0).map(|e| (e.from, e.to)).collect();
        assert!(e.contains(&(0, 5)) && e.contains(&(5, 7)) && e.contains(&(0, 7)), "{e:?}");
    }

    // With `infer`, a lone instruction without samples is unknown, not
    // cold: the return here (two predecessors) takes the entry's count from
    // flow, while the unsampled three-instruction block beside it is
    // confidently cold.
    #[test]
    fn lone_unsampled_instruction_is_not_cold() {
        let inferred = function_profile(
            "f",
            0x1000,
            &CODE,
            &at(&[(0x1000, 1000.0), (0x1003, 1000.0)]),
            &NoMemory,
            ColdPolicy { infer: true, ..ColdPolicy::default() },
            None,
        );
        // Flow: the entry's count leaves through the return, the only exit.
        assert_eq!(
            inferred.blocks.iter().map(|b| (b.cold, b.count.round())).collect::<Vec<_>>(),
            vec![(false, 1000.0), (true, 0.0), (false, 1000.0)]
        );
    }

    // A short block reached only through a cold block is cold: alone its
    // 2 instructions without samples leave an upper bound above 1% of the
    // entry (200 samples per instruction), the 4-instruction block before
    // it is confidently cold, and the loop has no other way in.
    #[test]
    fn blocks_behind_cold_blocks_are_cold() {
        // cmp $0,%edi; je R; add $1,%eax x4; L: sub $1,%edi; jne L; R: ret
        let code = [
            0x83, 0xff, 0x00, 0x74, 0x11, 0x83, 0xc0, 0x01, 0x83, 0xc0, 0x01, 0x83, 0xc0, 0x01, 0x83, 0xc0, 0x01, 0x83, 0xef, 0x01, 0x75,
            0xfb, 0xc3,
        ];
        let p = function_profile("f", 0x1000, &code, &at(&[(0x1003, 200.0), (0x1016, 200.0)]), &NoMemory, ColdPolicy::default(), None);
        let c: Vec<(u64, bool)> = p.blocks.iter().map(|b| (b.offset, b.cold)).collect();
        assert_eq!(c, vec![(0, false), (5, true), (0x11, true), (0x16, false)]);
        assert!(p.blocks[2].upper >= 0.01 * 200.0, "the loop is not cold on its own evidence");
        // Entered from a sampled block too, the loop stays warm: je L instead of je R.
        let mut into_loop = code;
        into_loop[4] = 0x0c;
        let p = function_profile("f", 0x1000, &into_loop, &at(&[(0x1003, 200.0), (0x1016, 200.0)]), &NoMemory, ColdPolicy::default(), None);
        assert_eq!(p.blocks.iter().map(|b| b.cold).collect::<Vec<_>>(), vec![false, true, false, false]);
    }

    // Calls: `call rel32` to the callee's address, counted with its block.
    #[test]
    fn direct_calls() {
        // call 0x2000; ret   (at 0x1000: rel32 = 0x2000 - 0x1005 = 0xffb)
        let code = [0xe8, 0xfb, 0x0f, 0, 0, 0xc3];
        let p = function_profile("f", 0x1000, &code, &at(&[(0x1000, 8.0), (0x1005, 8.0)]), &NoMemory, ColdPolicy::default(), None);
        assert_eq!(p.calls, vec![CallCount { offset: 0, target: 0x2000, count: 8.0 }]);
    }

    // Samples on a block's first instruction are skid from its
    // predecessor: the add block with samples only there counts 0 with
    // the skid correction and 100 per instruction without it.
    #[test]
    fn skid_moves_head_samples_to_the_predecessor() {
        let s = at(&[(0x1000, 100.0), (0x1003, 100.0), (0x1005, 300.0)]);
        let with = function_profile("f", 0x1000, &CODE, &s, &NoMemory, ColdPolicy::default(), None);
        let without = function_profile("f", 0x1000, &CODE, &s, &NoMemory, ColdPolicy { skid: false, ..ColdPolicy::default() }, None);
        assert_eq!((with.blocks[0].count, with.blocks[1].count), (100.0, 0.0));
        assert_eq!((without.blocks[0].count, without.blocks[1].count), (100.0, 100.0));
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
            None,
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
