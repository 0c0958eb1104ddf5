//! DCPI's dcpicalc for x86-64 (DCPI §6): from the machine code of one
//! procedure and its time-biased PC samples, how many times each
//! instruction ran, its cycles per execution, and the likely causes of
//! its stalls.
//!
//! Design constraint: no IO. The code bytes, the samples, the image's
//! memory (for jump tables) and the machine model come in as values and
//! traits, so every step is testable on literal instruction sequences.
//!
//! ```
//! use loupe_calc::{analyze, cfg::NoMemory, mca::MachineModel};
//! struct OneCycle;
//! impl MachineModel for OneCycle {
//!     fn schedule(&mut self, b: &[Vec<String>]) -> loupe_calc::Result<Vec<Vec<f64>>> {
//!         Ok(b.iter().map(|v| vec![1.0; v.len()]).collect())
//!     }
//!     fn describe(&self) -> String { "one cycle each".into() }
//! }
//! // mov $1,%eax; ret — 300 samples each, 1000 cycles per sample.
//! let code = [0xb8, 1, 0, 0, 0, 0xc3];
//! let samples = [(0x1000, 300), (0x1005, 300)].into_iter().collect();
//! let c = analyze(0x1000, &code, &samples, 1000.0, &mut OneCycle, &NoMemory).unwrap();
//! assert_eq!(c.instructions[0].executions.unwrap().round(), 300_000.0);
//! ```

pub mod cfg;
pub mod culprit;
pub mod decode;
pub mod equiv;
pub mod estimate;
pub mod hwbound;
pub mod loops;
pub mod mca;
pub mod solve;

mod error;
pub use error::{Error, ErrorKind, Result};

use culprit::{Cause, Culprit};
use estimate::{Confidence, Freq};
use serde::Serialize;
use std::collections::{BTreeMap, HashMap};

#[cfg(test)]
mod tests {
    use super::*;

    /// Every instruction takes one cycle (the model the known-count tests are built on).
    pub(crate) struct OneCycle;
    impl mca::MachineModel for OneCycle {
        fn schedule(&mut self, b: &[Vec<String>]) -> Result<Vec<Vec<f64>>> {
            Ok(b.iter().map(|v| vec![1.0; v.len()]).collect())
        }
        fn describe(&self) -> String {
            "one cycle each".into()
        }
    }

    /// push %rbx; mov $1000,%ecx | 6: dec %ecx; jne 6 | a: pop %rbx; ret — the loop runs 1000 times per call.
    pub(crate) const COUNTED_LOOP: [u8; 12] = [0x53, 0xb9, 0xe8, 0x03, 0, 0, 0xff, 0xc9, 0x75, 0xfc, 0x5b, 0xc3];

    #[test]
    fn a_deficit_is_repaid_by_the_next_excess_and_never_shows_as_a_negative_stall() {
        // Checks net_block on literal CPI - M_i rows: -2, +3, 0, +1 -> 0, 1, 0, 1 with nothing left; a deficit at
        // the end is not taken from the head (its stall is its entry's) but left as gain, as is a block's shortfall.
        assert_eq!(net_block(&[-2.0, 3.0, 0.0, 1.0]), (vec![0.0, 1.0, 0.0, 1.0], 0.0));
        assert_eq!(net_block(&[2.0, 1.0, -1.5]), (vec![2.0, 1.0, 0.0], 1.5));
        assert_eq!(net_block(&[-3.0, 1.0, 1.0]), (vec![0.0, 0.0, 0.0], 1.0));
    }

    #[test]
    fn no_instruction_of_a_known_loop_gets_a_negative_stall() {
        // Checks the listing on COUNTED_LOOP with its samples all skidded onto the jne (0 on the dec, 1000 on the
        // jne, 2 cycles a iteration): F is right (500,000 iterations), the dec's missing cycle is the jne's, so
        // both stalls are 0 and the procedure has no gain.
        let samples: HashMap<u64, u64> = [(8, 1000)].into_iter().collect();
        let c = analyze(0, &COUNTED_LOOP, &samples, 1000.0, &mut OneCycle, &cfg::NoMemory).unwrap();
        assert!((c.instructions[2].executions.unwrap() - 500_000.0).abs() < 1.0, "{:?}", c.instructions[2]);
        assert!(c.instructions.iter().all(|r| r.stall >= 0.0 && r.stall < 1e-9), "{:?}", c.instructions);
        assert!(c.summary.unexplained_gain.abs() < 1e-6 && c.summary.dynamic_stall.abs() < 1e-6, "{:?}", c.summary);
    }

    /// 0: push %rbx; mov $100,%ecx | 6: test $3,%cl; jne 0xe | b: inc %eax; nop | e: dec %ecx; jne 6 | 12: pop %rbx; ret —
    /// a loop of 100 whose `inc` runs when the counter is a multiple of 4: 25 of the 100 times.
    pub(crate) const BRANCH_LOOP: [u8; 20] =
        [0x53, 0xb9, 100, 0, 0, 0, 0xf6, 0xc1, 0x03, 0x75, 0x03, 0xff, 0xc0, 0x90, 0xff, 0xc9, 0x75, 0xf4, 0x5b, 0xc3];

    #[test]
    fn counted_classes_and_their_flow_replace_the_estimates() {
        // Checks analyze_counted on BRANCH_LOOP called M = 1000 times: counted entries 1000, loop head 100,000, arm
        // 25,000 (skewed samples that would estimate otherwise). Every block then has its count, the skipping edge
        // 75,000 by flow, CPI = samples x period / count, and the rows say counted with the counts' interval.
        // Three classes have blocks: prologue with epilogue, loop (head and tail), the arm.
        assert_eq!(counting_points(0, &BRANCH_LOOP, &cfg::NoMemory), vec![0, 6, 0xb]);
        // The prologue and epilogue are outside the loop; its head and its arm inside it.
        assert_eq!(counting_ladder(0, &BRANCH_LOOP, &cfg::NoMemory), vec![(0, 0, false), (6, 1, true), (0xb, 1, false)]);
        let samples: HashMap<u64, u64> = [(6, 300), (9, 10), (0xb, 200), (0xe, 90), (0x10, 5)].into_iter().collect();
        let counted = [
            Counted { address: 0, executions: 1000.0, half_width: 0.0 },
            Counted { address: 6, executions: 100_000.0, half_width: 500.0 },
            Counted { address: 0xb, executions: 25_000.0, half_width: 100.0 },
        ];
        let opt = estimate::Options::default();
        let c = analyze_counted(0, &BRANCH_LOOP, &samples, 1000.0, &mut OneCycle, &cfg::NoMemory, opt, &counted).unwrap();
        let at = |a: u64| c.instructions.iter().find(|r| r.address == a).unwrap();
        for (a, want) in [(0, 1000.0), (6, 100_000.0), (0xb, 25_000.0), (0xe, 100_000.0), (0x12, 1000.0)] {
            let r = at(a);
            assert!(r.counted && (r.executions.unwrap() - want).abs() < 1e-6, "{a:x}: {r:?}");
        }
        assert_eq!(at(6).interval, Some((99_500.0, 100_500.0)));
        assert!((at(0xb).cpi.unwrap() - 200.0 * 1000.0 / 25_000.0).abs() < 1e-9);
        let skip = c.edges.iter().find(|e| (e.from, e.to) == (9, 0xe)).unwrap();
        assert!((skip.executions.unwrap() - 75_000.0).abs() < 1e-6, "{skip:?}");
    }

    #[test]
    fn a_small_difference_of_uncertain_counts_is_not_counted() {
        // Checks propagate_counted's gate on BRANCH_LOOP: the skipping edge is the loop head less the arm. Head
        // 100,000 +- 500 and arm 25,000 +- 100: 75,000 +- 600, counted (High). Head 100,000 +- 3,000 and arm
        // 97,000 +- 500: 3,000 +- 3,500 is no count, and the edge keeps its estimate (never High).
        let samples: HashMap<u64, u64> = [(6, 300), (9, 10), (0xb, 200), (0xe, 90), (0x10, 5)].into_iter().collect();
        let skip = |head: (f64, f64), arm: (f64, f64)| {
            let counted = [
                Counted { address: 0, executions: 1000.0, half_width: 0.0 },
                Counted { address: 6, executions: head.0, half_width: head.1 },
                Counted { address: 0xb, executions: arm.0, half_width: arm.1 },
            ];
            let opt = estimate::Options::default();
            let c = analyze_counted(0, &BRANCH_LOOP, &samples, 1000.0, &mut OneCycle, &cfg::NoMemory, opt, &counted).unwrap();
            c.edges.into_iter().find(|e| (e.from, e.to) == (9, 0xe)).unwrap()
        };
        let precise = skip((100_000.0, 500.0), (25_000.0, 100.0));
        assert_eq!(precise.confidence, Some(estimate::Confidence::High));
        assert!((precise.executions.unwrap() - 75_000.0).abs() < 1e-6, "{precise:?}");
        let loose = skip((100_000.0, 3000.0), (97_000.0, 500.0));
        assert_ne!(loose.confidence, Some(estimate::Confidence::High), "{loose:?}");
    }

    #[test]
    fn global_solver_keeps_unsampled_prologue_out_of_the_loop() {
        // Checks the bug of issue 30: the loop of COUNTED_LOOP sampled 500 times per instruction at 1000 cycles a
        // sample (500,000 iterations: 500 calls), prologue and ret never sampled; the global fit gave the
        // prologue's class (free, no estimate) the whole loop's count. It must stay at most a sample's worth.
        let samples: HashMap<u64, u64> = [(6, 500), (8, 500)].into_iter().collect();
        for combine in [estimate::Combine::Local, estimate::Combine::Global] {
            let opt = estimate::Options { combine, ..Default::default() };
            let c = analyze_with(0, &COUNTED_LOOP, &samples, 1000.0, &mut OneCycle, &cfg::NoMemory, opt).unwrap();
            let loop_e = c.instructions[2].executions.unwrap();
            assert!((loop_e - 500_000.0).abs() < 1.0, "{combine:?}: loop {loop_e}");
            for i in [0, 1, 4, 5] {
                let e = c.instructions[i].executions.unwrap_or(0.0);
                assert!(e <= 1000.0, "{combine:?}: instruction {i} outside the loop ran {e} times");
            }
        }
    }

    #[test]
    fn skid_moves_each_gap_to_the_next_instruction() {
        // Checks that a load's 5-cycle retire gap is expected on the instruction after it, wrapping at the end.
        assert_eq!(super::skid(&[5.0, 0.0, 1.0]), vec![1.0, 5.0, 0.0]);
        assert!(super::skid(&[]).is_empty());
    }
}

/// One instruction of the listing (Figure 2).
#[derive(Clone, Debug, Serialize)]
pub struct InsnReport {
    pub address: u64,
    pub instruction: String,
    pub samples: u64,
    /// Minimum cycles per execution without dynamic stalls (the model's M_i).
    pub min_cycles: f64,
    pub executions: Option<f64>,
    /// 95% interval of `executions`: a count's from its windows; an
    /// estimate's from its block's samples (sampling error only: the
    /// estimator's bias is not in it); None where the block has no samples.
    pub interval: Option<(f64, f64)>,
    /// Whether `executions` was counted rather than estimated.
    pub counted: bool,
    /// Cycles per execution at the head of the reorder buffer.
    pub cpi: Option<f64>,
    pub confidence: Option<Confidence>,
    /// Dynamic stall cycles per execution: CPI - M_i net of the cycles the
    /// model charged earlier instructions of the block that were sampled
    /// here (see [`net_block`]); never negative.
    pub stall: f64,
    /// Cycles per execution the model charges the block beyond all its
    /// samples (on the block's first instruction; 0 elsewhere): the
    /// model's overcharge, DCPI's "unexplained gain".
    pub gain: f64,
    pub culprits: Vec<Culprit>,
    /// What hardware events say about each culprit (same order as `culprits`).
    pub bounds: Vec<hwbound::Bound>,
    /// Stall cycles per execution the culprits explain: the stall, or the
    /// whole CPI where a low-confidence estimate cannot tell them apart.
    pub suspect: f64,
    pub block: usize,
}

#[derive(Clone, Debug, Serialize)]
pub struct BlockReport {
    pub start: u64,
    /// Address just past the last instruction.
    pub end: u64,
    pub executions: Option<f64>,
    /// As [`InsnReport::interval`].
    pub interval: Option<(f64, f64)>,
    pub confidence: Option<Confidence>,
    pub how: Option<estimate::How>,
    pub class: Option<usize>,
    pub reachable: bool,
}

#[derive(Clone, Debug, Serialize)]
pub struct EdgeReport {
    pub from: u64,
    pub to: u64,
    pub executions: Option<f64>,
    pub confidence: Option<Confidence>,
}

/// Figure 4: where the procedure's cycles went.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Summary {
    pub instructions_executed: f64,
    pub cycles: f64,
    /// Cycles if no instruction stalled dynamically (Σ M_i E_i).
    pub best_case_cycles: f64,
    /// Per cause: (cycles where it is the only culprit, cycles where it is one of them).
    pub causes: BTreeMap<String, (f64, f64)>,
    pub unexplained_stall: f64,
    pub unexplained_gain: f64,
    pub dynamic_stall: f64,
    pub samples: u64,
    pub samples_with_estimates: u64,
}

#[derive(Clone, Debug, Serialize)]
pub struct Calc {
    pub instructions: Vec<InsnReport>,
    pub blocks: Vec<BlockReport>,
    pub edges: Vec<EdgeReport>,
    pub missing_edges: bool,
    pub classes: usize,
    pub period_cycles: f64,
    pub summary: Summary,
}

/// Stalls shorter than this (cycles per execution) are noise, not stalls.
pub const MIN_STALL: f64 = 1.0;
/// Minimum cycles from which a static stall is explained too.
pub const STATIC_STALL: f64 = 4.0;

/// Analyses the procedure whose code `bytes` starts at virtual address
/// `start`, with `samples` of a time event per virtual address and the
/// mean sampling period in cycles.
pub fn analyze(
    start: u64,
    bytes: &[u8],
    samples: &HashMap<u64, u64>,
    period_cycles: f64,
    model: &mut dyn mca::MachineModel,
    mem: &dyn cfg::Memory,
) -> Result<Calc> {
    analyze_with(start, bytes, samples, period_cycles, model, mem, estimate::Options::default())
}

/// [`analyze`], estimating as `opt` says.
pub fn analyze_with(
    start: u64,
    bytes: &[u8],
    samples: &HashMap<u64, u64>,
    period_cycles: f64,
    model: &mut dyn mca::MachineModel,
    mem: &dyn cfg::Memory,
    opt: estimate::Options,
) -> Result<Calc> {
    analyze_counted(start, bytes, samples, period_cycles, model, mem, opt, &[])
}

/// Executions of one instruction counted over the run, and the 95%
/// interval's half-width (`loupe_probe::count`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Counted {
    pub address: u64,
    pub executions: f64,
    pub half_width: f64,
}

/// One instruction per frequency class worth counting: the head of the
/// first reachable block of each class (every block of a class runs equally
/// often), the entry's class first; edge-only classes follow by flow.
pub fn counting_points(start: u64, bytes: &[u8], mem: &dyn cfg::Memory) -> Vec<u64> {
    counting_ladder(start, bytes, mem).into_iter().map(|p| p.0).collect()
}

/// [`counting_points`], each with its loop depth ([`loops::depths`]): the
/// deepest block of its class (a class's blocks run equally often; the
/// deepest says best how often that is), and whether the class holds a
/// loop's header at that depth (it runs every iteration of that loop).
pub fn counting_ladder(start: u64, bytes: &[u8], mem: &dyn cfg::Memory) -> Vec<(u64, u32, bool)> {
    let g = cfg::build(decode::decode(start, bytes), mem);
    let classes = equiv::classes(&g);
    let depth = loops::depths(&g);
    let heads = loops::headers(&g);
    let mut at: Vec<Option<usize>> = vec![None; classes.count];
    let mut out: Vec<(u64, u32, bool)> = Vec::new();
    for (b, blk) in g.blocks.iter().enumerate() {
        let Some(k) = classes.block[b].filter(|_| blk.reachable) else { continue };
        let i = *at[k].get_or_insert_with(|| {
            out.push((g.start(b), 0, false));
            out.len() - 1
        });
        if depth[b] > out[i].1 {
            out[i].1 = depth[b];
            out[i].2 = false;
        }
        if depth[b] == out[i].1 && heads[b] {
            out[i].2 = true;
        }
    }
    out
}

/// [`analyze_with`], where the instructions in `counted` were counted: their
/// classes, and what follows from them by flow, take the counts; CPI is then
/// the sampled cycles over the counted executions.
#[allow(clippy::too_many_arguments)]
pub fn analyze_counted(
    start: u64,
    bytes: &[u8],
    samples: &HashMap<u64, u64>,
    period_cycles: f64,
    model: &mut dyn mca::MachineModel,
    mem: &dyn cfg::Memory,
    opt: estimate::Options,
    counted: &[Counted],
) -> Result<Calc> {
    let g = cfg::build(decode::decode(start, bytes), mem);
    let classes = equiv::classes(&g);
    let mut per_class: Vec<Option<(f64, f64)>> = vec![None; classes.count];
    for c in counted {
        let Some(i) = g.insns.iter().position(|x| x.addr == c.address) else { continue };
        if let Some(k) = classes.block[g.block_of(i)] {
            per_class[k] = Some((c.executions / period_cycles, c.half_width / period_cycles));
        }
    }
    let s: Vec<f64> = g.insns.iter().map(|x| samples.get(&x.addr).copied().unwrap_or(0) as f64).collect();
    // Only classes with samples need M_i (others estimate 0 or by propagation):
    // a large procedure with few hot blocks schedules only those.
    let mut class_hot = vec![false; classes.count];
    for (b, blk) in g.blocks.iter().enumerate() {
        if let Some(c) = classes.block[b] {
            class_hot[c] |= (blk.first..blk.end).any(|i| s[i] > 0.0);
        }
    }
    let wanted: Vec<bool> = (0..g.blocks.len()).map(|b| g.blocks[b].reachable && classes.block[b].is_some_and(|c| class_hot[c])).collect();
    let hot = |c: &loops::Cycle| c.blocks.iter().any(|&b| (g.blocks[b].first..g.blocks[b].end).any(|i| s[i] > 0.0));
    let hot_loops: Vec<loops::Cycle> = loops::simple_cycles(&g, 2).into_iter().filter(hot).collect();
    let branching: Vec<loops::Cycle> =
        if opt.branching_loops { loops::branching_loops(&g).into_iter().filter(hot).collect() } else { Vec::new() };
    let m = min_cycles(&g, &wanted, model)?;
    let est = estimate::estimate_counted(&g, &classes, &s, &m, &hot_loops, &branching, opt, &per_class);
    let block_samples: Vec<f64> = g.blocks.iter().map(|blk| (blk.first..blk.end).map(|i| s[i]).sum()).collect();
    let interval = |b: usize| est.block[b].and_then(|f| interval(f, block_samples[b], period_cycles));
    let (stalls, gains) = net_stalls(&g, &s, &m, &est);
    let mut instructions: Vec<InsnReport> =
        (0..g.insns.len()).map(|i| insn_report(&g, i, &s, &m, &est, period_cycles, (stalls[i], gains[i]))).collect();
    for r in &mut instructions {
        r.interval = interval(r.block);
    }
    let blocks = (0..g.blocks.len())
        .map(|b| {
            let f = est.block[b];
            BlockReport {
                start: g.start(b),
                end: g.last(b).end(),
                executions: f.map(|f| f.f * period_cycles),
                interval: interval(b),
                confidence: f.map(|f| f.confidence),
                how: f.map(|f| f.how),
                class: classes.block[b],
                reachable: g.blocks[b].reachable,
            }
        })
        .collect();
    let edges = g
        .edges
        .iter()
        .enumerate()
        .map(|(k, e)| EdgeReport {
            from: g.last(e.from).addr,
            to: g.start(e.to),
            executions: est.edge[k].map(|f| f.f * period_cycles),
            confidence: est.edge[k].map(|f| f.confidence),
        })
        .collect();
    let summary = summarize(&instructions, period_cycles);
    Ok(Calc { instructions, blocks, edges, missing_edges: g.missing_edges, classes: classes.count, period_cycles, summary })
}

/// The 95% interval of executions `f` x `period`: a count's own; an
/// estimate's from the `samples` of its block (Poisson, sampling error
/// only), None without samples.
fn interval(f: Freq, samples: f64, period: f64) -> Option<(f64, f64)> {
    let e = f.f * period;
    let h = match f.how {
        estimate::How::Counted { half_width } => half_width * period,
        _ if samples > 0.0 => e * 1.96 / samples.sqrt(),
        _ => return None,
    };
    Some(((e - h).max(0.0), e + h))
}

/// M_i of every instruction of the `wanted` blocks, scheduled on `model` (0 elsewhere).
fn min_cycles(g: &cfg::Cfg, wanted: &[bool], model: &mut dyn mca::MachineModel) -> Result<Vec<f64>> {
    // Long blocks go to the model in pieces: llvm-mca's timeline of an 80 KB
    // block run 12 times is gigabytes, and a piece of a few hundred
    // instructions reaches the same steady state.
    let mut pieces: Vec<(usize, std::ops::Range<usize>)> = Vec::new();
    for b in (0..g.blocks.len()).filter(|&b| wanted[b]) {
        let (first, end) = (g.blocks[b].first, g.blocks[b].end);
        pieces.extend((first..end).step_by(MAX_PIECE).map(|p| (b, p..(p + MAX_PIECE).min(end))));
    }
    let texts: Vec<Vec<String>> = pieces.iter().map(|(_, r)| r.clone().map(|i| g.insns[i].text.clone()).collect()).collect();
    let sched = model.schedule(&texts)?;
    let mut raw = vec![0.0; g.insns.len()];
    for (k, (_, r)) in pieces.iter().enumerate() {
        for (j, i) in r.clone().enumerate() {
            raw[i] = sched.get(k).and_then(|v| v.get(j)).copied().unwrap_or(0.0);
        }
    }
    let mut m = vec![0.0; g.insns.len()];
    for b in (0..g.blocks.len()).filter(|&b| wanted[b]) {
        let r = g.blocks[b].first..g.blocks[b].end;
        m[r.clone()].copy_from_slice(&skid(&raw[r]));
    }
    Ok(m)
}

/// Most instructions scheduled in one piece (see `min_cycles`).
pub const MAX_PIECE: usize = 256;

/// Where the samples of a block's retire gaps land. The timer interrupt
/// waits for the instruction at the head of the reorder buffer to retire
/// and reports the next one, so the gap before instruction i retires is
/// sampled at i+1 (measured here: a pointer chase's samples sit on the
/// instruction after the load). The last gap wraps to the block's head,
/// as the block's schedule does when llvm-mca runs it as a loop.
pub fn skid(gaps: &[f64]) -> Vec<f64> {
    let n = gaps.len();
    (0..n).map(|i| gaps[(i + n - 1) % n]).collect()
}

/// Per instruction, its dynamic stall per execution, and per block head the
/// model's overcharge. On an out-of-order core the cycles the model charges
/// an instruction are often sampled at a later one of its retire group, so
/// CPI - M_i alone goes negative at one instruction and too high at the next
/// (issue 30: the text showed negative stalls). A deficit is therefore
/// carried forward through the block and repaid by the next excess; what no
/// later excess repays is the model charging the block more than its
/// samples show. Not round to the head: a head's stall is its entry's (an
/// I-cache miss or mispredict on the way in; calcwork's `icache`, wrapped,
/// lost its I-cache stalls to the deficits of its blocks' jumps).
fn net_stalls(g: &cfg::Cfg, s: &[f64], m: &[f64], est: &estimate::Estimate) -> (Vec<f64>, Vec<f64>) {
    let (mut stall, mut gain) = (vec![0.0; s.len()], vec![0.0; s.len()]);
    for (b, blk) in g.blocks.iter().enumerate() {
        let Some(f) = est.block[b].map(|f| f.f).filter(|&f| f > 0.0) else { continue };
        let excess: Vec<f64> = (blk.first..blk.end).map(|i| s[i] / f - m[i]).collect();
        let (net, left) = net_block(&excess);
        stall[blk.first..blk.end].copy_from_slice(&net);
        gain[blk.first] = left;
    }
    (stall, gain)
}

/// One block's stalls from its CPI - M_i (`excess`): deficits repaid by the
/// excesses after them; returns the stalls and the deficit left.
pub fn net_block(excess: &[f64]) -> (Vec<f64>, f64) {
    let mut net: Vec<f64> = excess.iter().map(|&e| e.max(0.0)).collect();
    let mut owed = 0.0;
    for (k, &e) in excess.iter().enumerate() {
        if e < 0.0 {
            owed -= e;
            continue;
        }
        let paid = owed.min(net[k]);
        net[k] -= paid;
        owed -= paid;
    }
    (net, owed)
}

fn insn_report(g: &cfg::Cfg, i: usize, s: &[f64], m: &[f64], est: &estimate::Estimate, period: f64, sg: (f64, f64)) -> InsnReport {
    let b = g.block_of(i);
    let f: Option<Freq> = est.block[b];
    let cpi = f.filter(|f| f.f > 0.0).map(|f| s[i] / f.f);
    let (stall, gain) = sg;
    // Guilty until proven innocent: a low-confidence frequency cannot prove
    // that the model's minimum was not itself a stall (a class whose only
    // issue point always stalls, like a pointer chase), so the whole CPI is suspect.
    let suspect = match f.map(|f| f.confidence) {
        Some(Confidence::Low) => cpi.unwrap_or(0.0),
        _ => stall,
    };
    let mut culprits = if suspect >= MIN_STALL { culprit::culprits(g, i, suspect) } else { Vec::new() };
    // A long static stall behind a divide: the divider leads, even when the model foresaw it.
    if m[i] >= STATIC_STALL && s[i] > 0.0 {
        if let Some(c) = culprit::static_culprit(g, i) {
            culprits.retain(|x| x.cause != c.cause);
            culprits.insert(0, c);
        }
    }
    InsnReport {
        address: g.insns[i].addr,
        instruction: g.insns[i].text.clone(),
        samples: s[i] as u64,
        min_cycles: m[i],
        executions: f.map(|f| f.f * period),
        interval: None,
        counted: f.is_some_and(|f| f.how.counted()),
        cpi,
        confidence: f.map(|f| f.confidence),
        stall,
        gain,
        bounds: vec![hwbound::Bound::default(); culprits.len()],
        culprits,
        suspect,
        block: b,
    }
}

/// Aggregates the listing into Figure 4's ranges: a cause's lower bound
/// counts stalls it alone explains, its upper bound every stall it is
/// among the culprits of, each capped by the culprit's hardware-event
/// bound where there is one (ruled-out culprits explain nothing).
pub(crate) fn summarize(rows: &[InsnReport], period: f64) -> Summary {
    let mut s = Summary::default();
    for c in Cause::ALL {
        s.causes.insert(c.name().to_string(), (0.0, 0.0));
    }
    for r in rows {
        s.samples += r.samples;
        s.cycles += r.samples as f64 * period;
        let Some(e) = r.executions else { continue };
        s.samples_with_estimates += r.samples;
        s.instructions_executed += e;
        s.best_case_cycles += r.min_cycles * e;
        let stall = r.stall * e;
        if r.cpi.is_none() {
            continue;
        }
        s.unexplained_gain -= r.gain * e;
        s.dynamic_stall += stall;
        // Each live culprit explains at most its bound; what none can is unexplained.
        let caps = hwbound::caps(r, stall);
        let covered: f64 = caps.iter().map(|c| c.1).sum();
        s.unexplained_stall += (stall - covered).max(0.0);
        for (k, &(cause, cap)) in caps.iter().enumerate() {
            let others: f64 = caps.iter().enumerate().filter(|&(j, _)| j != k).map(|(_, c)| c.1).sum();
            let x = s.causes.get_mut(cause.name()).expect("every cause is listed");
            x.1 += cap;
            // The part no other culprit can explain is this one's for sure.
            x.0 += cap.min(stall - others).max(0.0);
        }
    }
    s
}
